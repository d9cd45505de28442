"""`RecallSource` over an in-memory memory store's core (`InMemoryMemoryCore`), with
RedisRecallSource's semantics: the same record decoding, filters applied to every
lane, batched graph reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from grimoire.streams.model.lexicon import lexical_form
from grimoire.streams.recall.options import ProvenanceFilters
from grimoire.streams.recall.ports import (
    Anchor,
    LaneHit,
    RecallRecord,
    Vector,
    adjacent_members,
)
from grimoire.streams.recall.walk.daimoi import NodeInfo
from grimoire.tables.codec.memory_hash import decode_record, with_usage

if TYPE_CHECKING:
    from grimoire.tables.testing.fact_store import InMemoryFactStore
    from grimoire.tables.testing.memory_core import InMemoryMemoryCore


class InMemoryRecallSource:
    def __init__(
        self,
        store: InMemoryMemoryCore,
        agent_id: str,
        dims: int,
        facts: InMemoryFactStore | None = None,
    ) -> None:
        self._store = store
        self._agent = agent_id
        self._dims = dims
        self._facts = facts  # the agent's facts, whose entity links the walk follows

    async def linked_keys(self, keys: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        if self._facts is None:
            return {}
        return await self._facts.links(self._agent, keys)

    @property
    def may_link(self) -> bool:
        return self._facts is not None

    def _candidates(
        self, filters: ProvenanceFilters
    ) -> list[tuple[RecallRecord, Mapping[str, object]]]:
        found = []
        for doc in self._store.hashes():
            record = decode_record(doc, self._agent, self._dims)
            if record is not None and record.live and record.admitted_by(filters):
                found.append((record, doc))
        return found

    async def knn(
        self, lane: str, vector: Vector, k: int, filters: ProvenanceFilters
    ) -> list[LaneHit]:
        query = np.asarray(vector, dtype=np.float64)
        hits = []
        for record, doc in self._candidates(filters):
            stored = doc.get(lane)
            if not isinstance(stored, bytes) or not stored:
                continue
            other = np.frombuffer(stored, dtype=np.float32).astype(np.float64)
            norms = float(np.linalg.norm(query) * np.linalg.norm(other))
            hits.append(LaneHit(record.memory_id, float(query @ other) / norms if norms else 0.0))
        hits.sort(key=lambda hit: (-hit.score, hit.memory_id))
        return hits[:k]

    async def full_text(
        self, terms: Sequence[str], k: int, filters: ProvenanceFilters
    ) -> list[LaneHit]:
        """Any term may match; the score counts the distinct query terms a text contains."""
        wanted = set(terms)
        hits = []
        for record, _ in self._candidates(filters):
            matches = len(wanted & set(lexical_form(record.text, record.ts_ms).words))
            if matches:
                hits.append(LaneHit(record.memory_id, float(matches)))
        hits.sort(key=lambda hit: (-hit.score, hit.memory_id))
        return hits[:k]

    async def lexical(self, terms: Sequence[str], memory_ids: Sequence[str]) -> dict[str, float]:
        wanted = set(terms)
        found = {}
        for record in (await self.records(memory_ids)).values():
            matches = len(wanted & set(lexical_form(record.text, record.ts_ms).words))
            if matches:
                found[record.memory_id] = float(matches)
        return found

    async def adjacent(self, anchors: Sequence[Anchor]) -> dict[str, tuple[str, ...]]:
        found: dict[str, tuple[str, ...]] = {}
        for anchor in anchors:
            members = await self._store.nexus(self._agent, anchor.key)
            near = (*found.get(anchor.memory_id, ()), *adjacent_members(members, anchor))
            found[anchor.memory_id] = tuple(dict.fromkeys(near))
        return found

    async def records(self, memory_ids: Sequence[str]) -> dict[str, RecallRecord]:
        found = {}
        for memory_id in memory_ids:
            doc = self._store.record(memory_id)
            usage = self._store.usage(memory_id)
            record = decode_record(with_usage(doc, usage), self._agent, self._dims) if doc else None
            if record is not None:
                found[memory_id] = record
        return found

    async def nodes(self, memory_ids: Sequence[str]) -> dict[str, NodeInfo]:
        return {i: r.node() for i, r in (await self.records(memory_ids)).items()}

    async def degrees(self, keys: Sequence[str]) -> dict[str, int]:
        return await self._store.degrees(self._agent, keys)

    async def newest(self, keys: Sequence[str], limit: int) -> dict[str, list[str]]:
        return {key: await self._store.newest(self._agent, key, limit) for key in keys}

    async def neighbourhood(
        self, keys: Sequence[str], limit: int
    ) -> tuple[dict[str, int], dict[str, list[str]]]:
        return await self.degrees(keys), await self.newest(keys, limit)

    async def hyperedges(self, edge_ids: Sequence[str]) -> dict[str, Mapping[str, str]]:
        found: dict[str, Mapping[str, str]] = {}
        for edge in edge_ids:
            members = await self._store.hyperedge(self._agent, edge)
            if members:
                found[edge] = members
        return found

    async def touch(self, memory_ids: Sequence[str], as_of_ms: int) -> None:
        for memory_id in memory_ids:
            self._store.touch(memory_id, as_of_ms)
