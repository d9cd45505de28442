"""The recall pool: the fused lanes' best eligible memories, scored on evidence.

Reciprocal rank fusion decides which memories are looked at; this module loads
them (a compacted source stands in as its summary), adds the session neighbours
of the strongest ones and scores every pooled memory with `relevance.score_pool`.
All storage reads are batched: one round for the pool's lexical scores and
neighbours, one for the records and lexical scores of the neighbours that join
it (two when one of them stands in as its summary).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from grimoire.streams.model.lexicon import lexical_form
from grimoire.streams.model.nexus_keys import session_key
from grimoire.streams.ports.recall import RecallSource
from grimoire.streams.recall.fusion import FusedHit
from grimoire.streams.recall.named import names_actor
from grimoire.streams.recall.options import ProvenanceFilters
from grimoire.streams.recall.ports import Anchor, RecallRecord, Vector
from grimoire.streams.recall.relevance import (
    QueryMatch,
    Relevance,
    RelevancePolicy,
    anchors,
    cosines,
    score_pool,
)
from grimoire.streams.recall.temporal import NO_TIME_INTENT, TimeIntent, time_match

CONTEXT_LANE: Final = "context"
MAX_REPLACEMENT_DEPTH: Final = 3


@dataclass(frozen=True, slots=True)
class Pooled:
    """A pooled memory under the id it is returned as, with the lanes and ranks
    that brought it (a summary collects those of every source it stands for)."""

    record: RecallRecord
    lanes: tuple[str, ...]
    ranks: tuple[tuple[str, int], ...]
    rrf: float


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the query brings to score a pool: its terms and their lane scores
    (memory id → full BM25 sum), its canonical vector, what it asks of time and
    the words that may name an actor."""

    terms: tuple[str, ...]
    lexical_hits: Mapping[str, float]
    vector: Vector | None
    time: TimeIntent = NO_TIME_INTENT
    # The query's words as written (casefolded), to find the actors it names.
    named: frozenset[str] = frozenset()

    def matches(
        self, members: Mapping[str, Pooled], *, coverage: bool = False
    ) -> dict[str, QueryMatch]:
        if self.time.empty and not self.named and not coverage:
            return {}
        wanted = set(self.terms)
        found = {}
        for memory_id, pooled in members.items():
            record = pooled.record
            cue, window = time_match(self.time, record.text, record.ts_ms)
            actor = 1.0 if names_actor(self.named, record.actor_id) else 0.0
            held = 0.0
            if coverage and wanted:
                words = set(lexical_form(record.text, record.ts_ms).words)
                held = len(wanted & words) / len(wanted)
            if cue or window or actor or held:
                found[memory_id] = QueryMatch(cue, window, actor, held)
        return found


async def gather_pool(
    source: RecallSource, fused: Sequence[FusedHit], filters: ProvenanceFilters, depth: int
) -> dict[str, Pooled]:
    """Up to `depth` eligible memories in fused order: the walk may bring hundreds
    of ids, the pool only needs the best few. The lanes only return eligible
    memories, so the first `depth` ids usually suffice; what falls out (a walked
    memory outside the filters, a summary standing in twice) is topped up."""
    pool: dict[str, Pooled] = {}
    start = 0
    while start < len(fused) and len(pool) < depth:
        hits = fused[start : start + max(depth - len(pool), 8)]
        start += len(hits)
        records = await resolved_records(source, [hit.id for hit in hits])
        for hit in hits:
            record = records.get(hit.id)
            if record is None or not record.live or not record.admitted_by(filters):
                continue
            held = pool.get(record.memory_id)
            if held is None and len(pool) >= depth:
                continue
            pool[record.memory_id] = joined(record, hit, held)
    return pool


def joined(record: RecallRecord, hit: FusedHit, held: Pooled | None) -> Pooled:
    """`record` as pooled under `hit`, with what `held` (the same memory met
    under another id) brought already."""
    lanes = {*hit.lanes, *(held.lanes if held else ())}
    ranks = {*zip(hit.lanes, hit.ranks, strict=True), *(held.ranks if held else ())}
    rrf = hit.score + (held.rrf if held else 0.0)
    return Pooled(record, tuple(sorted(lanes)), tuple(sorted(ranks)), rrf)


async def resolved_records(
    source: RecallSource, memory_ids: Sequence[str]
) -> dict[str, RecallRecord]:
    """Records by the id they were ranked under; a compacted source maps to its
    summary (followed a few links deep), never to itself."""
    records = await source.records(memory_ids)
    resolved = dict(records)
    pending = {i: r for i, r in records.items() if r.deleted and r.replaced_by}
    for _ in range(MAX_REPLACEMENT_DEPTH):
        if not pending:
            break
        found = await source.records(sorted({r.replaced_by for r in pending.values()}))
        still: dict[str, RecallRecord] = {}
        for memory_id, record in pending.items():
            target = found.get(record.replaced_by)
            if target is None:
                continue
            resolved[memory_id] = target
            if target.deleted and target.replaced_by:
                still[memory_id] = target
        pending = still
    return resolved


async def assess(
    source: RecallSource,
    pool: Mapping[str, Pooled],
    evidence: Evidence,
    filters: ProvenanceFilters,
    policy: RelevancePolicy,
) -> tuple[dict[str, Pooled], dict[str, Relevance]]:
    """Score the pool; the strongest memories' session neighbours join it (lane
    `context`) and every memory borrows from its best pooled neighbour."""
    members = dict(pool)
    missing = [i for i in members if i not in evidence.lexical_hits]
    lexical_scores, adjacency = await asyncio.gather(
        _lexical(source, evidence.terms, missing),
        source.adjacent(_anchors(members.values())),
    )
    lexical = {i: s for i, s in evidence.lexical_hits.items() if i in members}
    lexical.update(lexical_scores)
    vectors = {i: p.record.vector for i, p in members.items() if p.record.vector is not None}
    semantic = cosines(evidence.vector, vectors)
    # The anchors are chosen on each memory's own relevance, which no query
    # match changes: this first scoring needs none.
    first = score_pool(list(members), lexical, semantic, {}, policy)
    wanted = sorted(
        {n for a in anchors(first, policy.context_anchors) for n in adjacency.get(a, ())}
        - set(members)
    )
    if wanted:
        # The neighbours' lexical scores load with their records: only one that
        # stands in as its summary needs a second call, for the summary's id.
        joined, near_lexical = await asyncio.gather(
            _neighbours(source, wanted, members, filters),
            _lexical(source, evidence.terms, wanted),
        )
        renamed = {i: p.record.memory_id for i, p in joined.items()}
        adjacency = {a: tuple(renamed.get(n, n) for n in near) for a, near in adjacency.items()}
        fresh = {p.record.memory_id: p for p in joined.values()}
        members.update(fresh)
        lexical.update({i: score for i, score in near_lexical.items() if i in fresh})
        summaries = sorted(set(fresh) - set(wanted))
        lexical.update(await _lexical(source, evidence.terms, summaries))
        extra = {i: p.record.vector for i, p in fresh.items() if p.record.vector is not None}
        semantic.update(cosines(evidence.vector, extra))
    relevance = score_pool(
        list(members),
        lexical,
        semantic,
        _symmetric(adjacency),
        policy,
        evidence.matches(members, coverage=policy.coverage_share > 0),
    )
    return members, relevance


async def _lexical(
    source: RecallSource, terms: Sequence[str], memory_ids: Sequence[str]
) -> dict[str, float]:
    if not terms or not memory_ids:
        return {}
    return await source.lexical(terms, memory_ids)


def _anchors(pooled: Iterable[Pooled]) -> list[Anchor]:
    found = []
    for member in pooled:
        key = session_key(member.record.session_id)
        if key is not None:
            found.append(Anchor(member.record.memory_id, key, member.record.ts_ms))
    return found


async def _neighbours(
    source: RecallSource,
    memory_ids: Sequence[str],
    members: Mapping[str, Pooled],
    filters: ProvenanceFilters,
) -> dict[str, Pooled]:
    """Eligible neighbours by the id the session index holds for them."""
    records = await resolved_records(source, memory_ids)
    return {
        i: Pooled(record, (CONTEXT_LANE,), (), 0.0)
        for i, record in records.items()
        if record.live and record.admitted_by(filters) and record.memory_id not in members
    }


def _symmetric(adjacency: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """Neighbourhood both ways: a memory that joined through an anchor is the
    anchor's neighbour, and the anchor is its."""
    both: dict[str, set[str]] = {}
    for memory_id, near in adjacency.items():
        for other in near:
            both.setdefault(memory_id, set()).add(other)
            both.setdefault(other, set()).add(memory_id)
    return {i: tuple(sorted(n)) for i, n in both.items()}
