"""A dict-backed ``RecallSource`` and the records, queries and contexts to run
``grimoire.streams.recall.flow.run_recall`` on it, without Redis."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from grimoire.streams.inbound.recall_request import RecallQuery
from grimoire.streams.model.lexicon import lexical_form, query_terms
from grimoire.streams.recall.entity_lane import query_entity_keys
from grimoire.streams.recall.flow import RecallContext
from grimoire.streams.recall.named import query_names
from grimoire.streams.recall.options import ProvenanceFilters, RetrievalBudgets, RetrievalMode
from grimoire.streams.recall.ports import Anchor, LaneHit, RecallRecord, Vector, adjacent_members
from grimoire.streams.recall.temporal import TimeIntent
from grimoire.streams.recall.walk.daimoi import NodeInfo

from .vectors import random_unit

NOW = 1_800_000_000_000
DIMS = 8


def seed_vector(seed: int) -> Vector:
    """The vector of ``record(..., seed)``: a seeded random unit vector of ``DIMS``."""
    return random_unit(seed, DIMS)


class DictSource:
    """RecallSource over a list of records of one agent (tenancy is the caller's)."""

    def __init__(self, records: Sequence[RecallRecord], edges: Mapping[str, dict[str, str]] = {}):
        self.by_id = {r.memory_id: r for r in records}
        self.edges = dict(edges)
        self.touched: list[tuple[str, int]] = []
        self.graph_calls = 0

    def _eligible(self, filters: ProvenanceFilters) -> list[RecallRecord]:
        return [r for r in self.by_id.values() if r.live and r.admitted_by(filters)]

    async def knn(
        self, lane: str, vector: Vector, k: int, filters: ProvenanceFilters
    ) -> list[LaneHit]:
        hits = [
            LaneHit(r.memory_id, float(vector @ r.vector))
            for r in self._eligible(filters)
            if r.vector is not None
        ]
        return sorted(hits, key=lambda h: (-h.score, h.memory_id))[:k]

    async def full_text(
        self, terms: Sequence[str], k: int, filters: ProvenanceFilters
    ) -> list[LaneHit]:
        hits = []
        for record in self._eligible(filters):
            score = len(set(terms) & set(lexical_form(record.text, record.ts_ms).words))
            if score:
                hits.append(LaneHit(record.memory_id, float(score)))
        return sorted(hits, key=lambda h: (-h.score, h.memory_id))[:k]

    async def lexical(self, terms: Sequence[str], memory_ids: Sequence[str]) -> dict[str, float]:
        found = {}
        for memory_id in memory_ids:
            record = self.by_id.get(memory_id)
            score = (
                len(set(terms) & set(lexical_form(record.text, record.ts_ms).words))
                if record
                else 0
            )
            if score:
                found[memory_id] = float(score)
        return found

    async def adjacent(self, anchors: Sequence[Anchor]) -> dict[str, tuple[str, ...]]:
        found: dict[str, tuple[str, ...]] = {}
        for anchor in anchors:
            members = {
                r.memory_id: r.ts_ms for r in self.by_id.values() if anchor.key in r.nexus_keys
            }
            found[anchor.memory_id] = adjacent_members(members, anchor)
        return found

    async def records(self, memory_ids: Sequence[str]) -> dict[str, RecallRecord]:
        return {i: self.by_id[i] for i in memory_ids if i in self.by_id}

    async def nodes(self, memory_ids: Sequence[str]) -> dict[str, NodeInfo]:
        self.graph_calls += 1
        return {i: r.node() for i, r in (await self.records(memory_ids)).items()}

    async def degrees(self, keys: Sequence[str]) -> dict[str, int]:
        self.graph_calls += 1
        return {k: sum(k in r.nexus_keys for r in self.by_id.values()) for k in keys}

    async def newest(self, keys: Sequence[str], limit: int) -> dict[str, list[str]]:
        self.graph_calls += 1
        found = {}
        for key in keys:
            members = [r for r in self.by_id.values() if key in r.nexus_keys]
            members.sort(key=lambda r: (-r.ts_ms, r.memory_id))
            found[key] = [r.memory_id for r in members[:limit]]
        return found

    async def neighbourhood(
        self, keys: Sequence[str], limit: int
    ) -> tuple[dict[str, int], dict[str, list[str]]]:
        degrees = await self.degrees(keys)
        self.graph_calls -= 1  # one round trip for both
        return degrees, await self.newest(keys, limit)

    async def hyperedges(self, edge_ids: Sequence[str]) -> dict[str, Mapping[str, str]]:
        return {e: self.edges[e] for e in edge_ids if e in self.edges}

    async def touch(self, memory_ids: Sequence[str], as_of_ms: int) -> None:
        self.touched.extend((i, as_of_ms) for i in memory_ids)


def record(memory_id: str, text: str, seed: int, **extra: Any) -> RecallRecord:
    """An episode observation ``seed`` minutes before ``NOW``, its vector ``seed_vector(seed)``."""
    fields: dict[str, Any] = {
        "kind": "episode",
        "layer": "observation",
        "ts_ms": NOW - seed * 60_000,
        "confidence": 0.7,
        "quality": 0.6,
        "normalized_hash": memory_id,
        "event_type": "episode",
        "source_event_id": f"src-{memory_id}",
    }
    fields.update(extra)
    return RecallRecord(memory_id=memory_id, text=text, vector=seed_vector(seed), **fields)


def query(text: str = "disk full on node seven", **budgets: Any) -> RecallQuery:
    """agent-1 asking ``text`` with explain on; keywords are ``RecallBudgets`` fields, plus
    ``filters`` and ``expand_episodes``."""
    filters = budgets.pop("filters", ProvenanceFilters())
    expand = budgets.pop("expand_episodes", False)
    return RecallQuery(
        agent_id="agent-1",
        query=text,
        reply_to="r",
        correlation_id="c",
        filters=filters,
        budgets=replace(RetrievalBudgets(), **budgets),
        expand_episodes=expand,
        explain=True,
    )


def context(text: str, vector: Vector, mode: RetrievalMode = RetrievalMode.FULL) -> RecallContext:
    """What the recall handler reads from ``text`` (its terms, time, actors and
    entities), and ``vector`` on both lanes, at ``NOW``."""
    return RecallContext(
        now_ms=NOW,
        mode=mode,
        terms=query_terms(text),
        canonical=vector,
        eidolon=vector,
        time=TimeIntent.of(text, NOW),
        named=query_names(text),
        entity_keys=query_entity_keys(text),
    )
