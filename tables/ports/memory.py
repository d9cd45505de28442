"""The ports of the memory store, one per concern: the write path (`MemoryWrites`),
learning's effects (`OutcomeEffects`), the read path (`RecallReads`) and recall
usage (`UsageLedger`); `MemoryStore` is all of them, as the Redis store and its
in-memory twin implement it (one contract suite,
`tests/integration/test_store_contract.py`). A `recall_source` is the core's
`RecallSource` port (`grimoire.streams.ports.recall`) bound to one agent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from grimoire.streams.journal.usage import UsageChanges, UsageView
from grimoire.streams.learn.outcomes import Outcome
from grimoire.streams.learn.runs import MemoryCredit
from grimoire.streams.model.field_state import FieldState
from grimoire.streams.ports.recall import RecallSource
from grimoire.streams.recall.view import RecallView
from grimoire.streams.write.changes import StateVector, WriteBatch
from grimoire.streams.write.plan import StoredNeighbour
from grimoire.streams.write.view import IngestView
from grimoire.tables.codec.memory_hash import StoredMemory
from grimoire.tables.ports.transaction import TransactionPart

if TYPE_CHECKING:
    # Type-only: a port names the Redis reads' hit type without importing them.
    from grimoire.tables.memory.reads import ScoredHit

__all__ = [
    "FieldReads",
    "IngestStore",
    "MemoryStore",
    "MemoryWrites",
    "OutcomeEffects",
    "RecallReads",
    "RecallViews",
    "UsageLedger",
]


class FieldReads(Protocol):
    """Each agent's field state (tick, watermark, regime): what every concern reads."""

    async def load_fields(self, agent_ids: Sequence[str]) -> dict[str, FieldState]: ...


class MemoryWrites(FieldReads, Protocol):
    """The write path's storage: what was decided, the nearest stored neighbours,
    the batch's commit, and the outcomes that wait for a memory not yet written."""

    async def ingest_view(self, pairs: Sequence[tuple[str, str]]) -> IngestView:
        """For a batch's (agent, candidate id) pairs, in one read: those an outcome is
        held for, those already decided, and their agents' field states (as
        `load_fields` reads them)."""
        ...

    async def nearest(
        self, queries: Sequence[tuple[str, bytes]]
    ) -> list[StoredNeighbour | None]: ...
    async def commit(self, batch: WriteBatch, also: Sequence[TransactionPart] = ()) -> None:
        """Write the batch, and `also` in the same transaction."""
        ...

    async def missing_memories(self, pairs: Sequence[tuple[str, str]]) -> set[tuple[str, str]]: ...
    async def held_outcomes(self, agent_id: str, memory_ids: Sequence[str]) -> list[Outcome]: ...
    async def release_held_outcomes(self, agent_id: str, memory_ids: Sequence[str]) -> None: ...


class OutcomeEffects(FieldReads, Protocol):
    """Learning's storage: an outcome's effects and a run's credits, each once per
    outcome id, and the outcomes held for memories not written yet."""

    def recall_source(self, agent_id: str) -> RecallSource: ...
    async def apply_outcome(self, outcome: Outcome, journal: tuple[int, int] | None = None) -> int:
        """Apply an outcome once; -1 when it was applied before, else how many of the
        agent's memories it changed. With the `journal` entry applying it, its
        witness record is left due with the effects (`WitnessDue`)."""
        ...

    async def apply_credits(
        self,
        outcome: Outcome,
        credits: Sequence[MemoryCredit],
        uplifts: Mapping[str, float],
        also: Sequence[TransactionPart] = (),
        counters: Sequence[tuple[str, float]] = (),
        journal: tuple[int, int] | None = None,
    ) -> int:
        """Apply a run's credits and the causes' new causal uplift once per outcome
        id, with `also` and the agent's stats `counters` (increments) in the same
        transaction; -1 when applied before (and then neither is written), else how
        many of the agent's memories changed."""
        ...

    async def missing_memories(self, pairs: Sequence[tuple[str, str]]) -> set[tuple[str, str]]: ...
    async def hold_outcome(self, outcome: Outcome, memory_ids: Sequence[str]) -> None: ...


class IngestStore(MemoryWrites, OutcomeEffects, Protocol):
    """What ingest needs: the write path, and learning's effects for the outcomes
    and run credits that wait for the memories a batch writes."""


class RecallReads(FieldReads, Protocol):
    """The read path's storage: the agent's memories through its `RecallSource`,
    its state vector, watermark and the contrarian window served."""

    def recall_source(self, agent_id: str) -> RecallSource: ...
    async def state_vectors(self, agent_ids: Sequence[str]) -> dict[str, StateVector]:
        """Each agent's last stored state vector (`WriteBatch.state_vectors`); an
        agent without one is left out."""
        ...

    async def watermark(self, agent_id: str) -> int | None: ...
    async def contrarian_served(self, agent_id: str) -> int | None: ...
    async def actors_named(self, agent_id: str, candidates: Sequence[str]) -> frozenset[str]:
        """Which of `candidates` (`actor_name` spellings) name an actor of the
        agent's memories."""
        ...


class RecallViews(Protocol):
    """What a recall reads of its agent before it searches, in one read; with the
    actors among `actor_candidates` (`RecallView.actors`)."""

    async def recall_view(
        self, agent_id: str, actor_candidates: Sequence[str] = ()
    ) -> RecallView: ...


class UsageLedger(Protocol):
    """What a served recall's usage entry reads and writes; whether it applies (once
    per entry and per request) is `fold_usage`'s."""

    def recall_source(self, agent_id: str) -> RecallSource: ...
    async def serve_contrarian(self, agent_id: str, window: int) -> None: ...
    async def usage_view(self, agent_id: str, seq: int, request: str | None) -> UsageView:
        """Whether the usage entry `seq` was applied, and which entry applied the
        recall `request` (its topic:partition:offset), in one read: what
        `fold_usage` decides from."""
        ...

    async def commit_usage(self, changes: UsageChanges) -> None:
        """Write one entry's uses (counters, last access, the window served) with its
        applied marks, all or nothing."""
        ...


class MemoryStore(IngestStore, RecallReads, UsageLedger, Protocol):
    """The whole memory store, one per deployment: each concern above is a port of
    it, and each handler depends on its own (ingest on `IngestStore`, outcomes on
    `OutcomeEffects`, recall on `RecallReads`, usage on `UsageLedger`). The rest is
    the deployment's: the index schema, reads by id and by lane, counts, metrics."""

    async def ensure_schema(self) -> None: ...
    async def get_many(self, agent_id: str, ids: Sequence[str]) -> list[StoredMemory | None]: ...
    async def knn(
        self, agent_id: str, vector: Sequence[float], k: int, *, lane: str = "canonical"
    ) -> list[ScoredHit]: ...
    async def full_text(self, agent_id: str, terms: Sequence[str], k: int) -> list[ScoredHit]: ...
    async def count(self, agent_id: str) -> int: ...
    async def metrics(self) -> dict[str, float]: ...
