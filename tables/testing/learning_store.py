"""The in-memory `LearningStore`: the reference the Redis store is held to (the
contract suite runs both)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grimoire.streams.learn.causal import CausalEdge
from grimoire.streams.learn.hedge import LearnedWeights
from grimoire.streams.learn.runs import EndedRun
from grimoire.tables.learn.store import LearningWrite
from grimoire.tables.ports.transaction import TransactionPart

__all__ = ["InMemoryLearningStore"]


class _LearningPart:
    def __init__(self, store: InMemoryLearningStore, write: LearningWrite) -> None:
        self._store = store
        self._write = write

    def queue(self, pipe: Any) -> None:
        raise NotImplementedError("the in-memory store has no pipeline")

    async def apply_alone(self) -> None:
        self._store.write(self._write)


class InMemoryLearningStore:
    def __init__(self) -> None:
        self._recalls: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
        self._weights: dict[str, LearnedWeights] = {}
        self._edges: dict[str, dict[tuple[str, str], CausalEdge]] = {}
        self._ended: dict[str, dict[str, EndedRun]] = {}

    async def ended_runs(self, agent_id: str, run_ids: Sequence[str]) -> dict[str, EndedRun]:
        held = self._ended.get(agent_id, {})
        return {run_id: held[run_id] for run_id in sorted(set(run_ids)) if run_id in held}

    async def record_recalls(self, agent_id: str, run_id: str, recalls: Mapping[str, Any]) -> None:
        if not run_id or not recalls:
            return
        held = self._recalls.setdefault(agent_id, {}).setdefault(run_id, {})
        for memory_id, factors in recalls.items():
            held.setdefault(memory_id, {k: float(v) for k, v in factors.items()})

    async def run_recalls(self, agent_id: str, run_id: str) -> dict[str, dict[str, float]]:
        held = self._recalls.get(agent_id, {}).get(run_id, {})
        return {m: dict(f) for m, f in held.items()}

    async def learned_weights(self, agent_id: str) -> LearnedWeights | None:
        return self._weights.get(agent_id)

    async def edges(
        self, agent_id: str, pairs: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], CausalEdge]:
        held = self._edges.get(agent_id, {})
        return {pair: held[pair] for pair in pairs if pair in held}

    async def edges_of(self, agent_id: str, nodes: Sequence[str]) -> dict[str, list[CausalEdge]]:
        held = self._edges.get(agent_id, {})
        return {
            node: sorted(
                (e for (c, f), e in held.items() if node in (c, f)),
                key=lambda edge: (edge.cause, edge.effect),
            )
            for node in nodes
        }

    async def out_edges(self, agent_id: str, causes: Sequence[str]) -> dict[str, list[CausalEdge]]:
        held = self._edges.get(agent_id, {})
        return {
            cause: sorted((e for (c, _), e in held.items() if c == cause), key=lambda e: e.effect)
            for cause in causes
        }

    async def all_edges(self, agent_id: str) -> list[CausalEdge]:
        return sorted(self._edges.get(agent_id, {}).values(), key=lambda e: (e.cause, e.effect))

    async def outcome_part(self, write: LearningWrite) -> TransactionPart:
        return _LearningPart(self, write)

    def write(self, write: LearningWrite) -> None:
        edges = self._edges.setdefault(write.agent_id, {})
        for edge in write.edges:
            edges[(edge.cause, edge.effect)] = edge
        if write.weights is not None:
            self._weights[write.agent_id] = write.weights
        if write.run_id:
            self._recalls.get(write.agent_id, {}).pop(write.run_id, None)
        if write.ended is not None:
            self._ended.setdefault(write.agent_id, {})[write.ended.run_id] = write.ended
