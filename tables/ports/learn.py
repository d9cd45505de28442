"""The port of what an agent learned from outcomes.

What each run recalled, the learned rerank weights, the ended runs and the
causal graph's edges are read and written through `LearningStore`; an outcome's
writes commit with its credits as a `TransactionPart`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from grimoire.streams.learn.causal import CausalEdge
from grimoire.streams.learn.hedge import LearnedWeights
from grimoire.streams.learn.runs import EndedRun
from grimoire.tables.ports.transaction import TransactionPart

if TYPE_CHECKING:
    # Type-only: `grimoire.tables.learn.store` imports this module at import time.
    from grimoire.tables.learn.store import LearningWrite

__all__ = ["LearningStore", "Recalls"]

Recalls = dict[str, dict[str, float]]  # memory id -> factor -> value


class LearningStore(Protocol):
    async def record_recalls(self, agent_id: str, run_id: str, recalls: Mapping[str, Any]) -> None:
        """Add a recall's memories (id → factor values) to the run's; a memory the run
        recalled before keeps the values of its first recall."""
        ...

    async def run_recalls(self, agent_id: str, run_id: str) -> Recalls: ...

    async def learned_weights(self, agent_id: str) -> LearnedWeights | None: ...

    async def ended_runs(self, agent_id: str, run_ids: Sequence[str]) -> dict[str, EndedRun]:
        """The runs among `run_ids` whose outcome was learned from."""
        ...

    async def edges(
        self, agent_id: str, pairs: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], CausalEdge]:
        """The stored edges among `pairs` (cause, effect)."""
        ...

    async def edges_of(self, agent_id: str, nodes: Sequence[str]) -> dict[str, list[CausalEdge]]:
        """Each node's edges, in and out, sorted by (cause, effect)."""
        ...

    async def out_edges(self, agent_id: str, causes: Sequence[str]) -> dict[str, list[CausalEdge]]:
        """Each cause's out-edges, sorted by effect (what a cause's uplift is from)."""
        ...

    async def all_edges(self, agent_id: str) -> list[CausalEdge]: ...

    async def outcome_part(self, write: LearningWrite) -> TransactionPart:
        """The writes of one outcome, to commit with its credits."""
        ...
