"""Recall (SPEC §5): seed lanes → daimoi walk → RRF → rerank → MMR → pack.

The flow is pure orchestration over a `RecallSource`: the storage, the query
vectors and the request's event time come in as arguments, so the same request
on the same state always gives the same items, and tests run it on an
in-memory source.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from grimoire.streams.daimoi import Circuit, Related, Seed, walk
from grimoire.streams.decay import DEFAULT_DECAY_POLICY, DecayPolicy, effective_confidence
from grimoire.streams.episodes import EpisodeSibling, attach_episodes
from grimoire.streams.field import Affect
from grimoire.streams.fusion import FusedHit, reciprocal_rank_fusion
from grimoire.streams.packing import DEFAULT_MMR_LAMBDA, PackInput, mmr, pack
from grimoire.streams.recall_options import RetrievalMode
from grimoire.streams.recall_source import LaneHit, RecallRecord, RecallSource, Vector
from grimoire.streams.requests import RecallQuery
from grimoire.streams.rerank import (
    DEFAULT_RECENCY_HALF_LIFE_MS,
    DEFAULT_RERANK_WEIGHTS,
    Candidate,
    RerankWeights,
    Scored,
    rerank,
)
from grimoire.streams.retrieval_decision import lanes_for, walks

WALK_LANE: Final = "walk"
QueryVectors = tuple[Vector | None, Vector | None]  # canonical, eidolon
DEFAULT_LANE_WEIGHTS: Final = (
    ("bm25", 1.0),
    ("canonical", 0.5),
    ("eidolon", 0.25),
    (WALK_LANE, 0.25),
)
MAX_REPLACEMENT_DEPTH: Final = 3


@dataclass(frozen=True, slots=True)
class RankingPolicy:
    rrf_k: int = 60
    weights: RerankWeights = DEFAULT_RERANK_WEIGHTS
    mmr_lambda: float = DEFAULT_MMR_LAMBDA
    decay: DecayPolicy = DEFAULT_DECAY_POLICY
    recency_half_life_ms: int = DEFAULT_RECENCY_HALF_LIFE_MS
    max_episode_siblings: int = 8
    # How far down the fused list the rerank looks: priors reorder a shortlist
    # of relevant memories, they do not promote weakly related ones into it.
    rerank_depth: int = 20
    # Exact terms (names, errors, paths) are the most precise evidence an agent's
    # memory has; the vector lanes catch paraphrase and the walk and the eidolon
    # lane associate, so they add to a lexical match rather than outvote it.
    # Measured on LoCoMo (make bench-locomo): equal weights lost 0.05-0.10 R@5.
    lane_weights: tuple[tuple[str, float], ...] = DEFAULT_LANE_WEIGHTS


@dataclass(frozen=True, slots=True)
class RecallContext:
    """A request resolved against the agent's state: nothing here reads a clock."""

    now_ms: int
    mode: RetrievalMode
    terms: tuple[str, ...]
    canonical: Vector | None = field(default=None, compare=False)
    eidolon: Vector | None = field(default=None, compare=False)
    regime: str = ""
    digest: tuple[str, ...] = ()
    affect: Affect | None = None
    circuits: tuple[Circuit, ...] = ()
    # Vectors still being computed: the BM25 lane starts first and runs in Redis
    # while the model embeds the query, instead of after it.
    pending_vectors: Callable[[], Awaitable[QueryVectors]] | None = field(
        default=None, compare=False
    )


@dataclass(frozen=True, slots=True)
class RecalledItem:
    record: RecallRecord
    score: float
    lanes: tuple[str, ...]
    reasons: tuple[str, ...]
    factors: tuple[tuple[str, float], ...]
    gist: str
    text: str | None
    tokens: int
    episode: tuple[EpisodeSibling, ...] = ()


@dataclass(frozen=True, slots=True)
class RecallOutcome:
    items: tuple[RecalledItem, ...]
    tokens_used: int
    timings_ms: tuple[tuple[str, float], ...] = ()


async def run_recall(
    query: RecallQuery,
    ctx: RecallContext,
    source: RecallSource,
    *,
    policy: RankingPolicy = RankingPolicy(),
    stopwatch: Callable[[], float] | None = None,
) -> RecallOutcome:
    """Answer one query; `stopwatch` (seconds, monotonic) only feeds the timings."""
    timer = _Timer(stopwatch)
    if ctx.mode is RetrievalMode.NONE or query.budgets.max_items == 0:
        return RecallOutcome((), 0, timer.laps())
    lanes = await _seed_lanes(query, ctx, source)
    timer.lap("lanes")
    ranked: dict[str, list[str]] = {
        lane: [h.memory_id for h in hits] for lane, hits in lanes.items()
    }
    related: dict[str, Related] = {}
    if walks(ctx.mode):
        for hit in await _walk(query, ctx, source, ranked, policy):
            related[hit.memory_id] = hit
        ranked[WALK_LANE] = list(related)
    timer.lap("walk")
    fused = reciprocal_rank_fusion(ranked, k=policy.rrf_k, weights=dict(policy.lane_weights))
    records = await _shortlist_records(query, source, fused, policy.rerank_depth)
    timer.lap("fetch")
    candidates, vectors, origin = _candidates(query, ctx, policy, fused, records)
    scored = rerank(
        candidates,
        now_ms=ctx.now_ms,
        regime=ctx.regime,
        affect=ctx.affect,
        weights=policy.weights,
        recency_half_life_ms=policy.recency_half_life_ms,
    )
    diverse = mmr(scored, vectors, lambda_=policy.mmr_lambda, limit=query.budgets.max_items)
    timer.lap("rank")
    packed = pack(
        [_pack_input(s, records, origin, related, query.explain) for s in diverse],
        max_items=query.budgets.max_items,
        token_budget=query.budgets.token_budget,
        full_text_items=query.budgets.full_text_items,
    )
    by_id = {s.memory_id: s for s in diverse}
    items = [
        RecalledItem(
            record=_record_for(records, p.memory_id),
            score=round(p.score, 9),
            lanes=origin[p.memory_id].lanes,
            reasons=p.reasons,
            factors=p.factors,
            gist=p.gist,
            text=p.text,
            tokens=p.tokens,
        )
        for p in packed.items
        if p.memory_id in by_id
    ]
    used = packed.tokens_used
    if query.expand_episodes and items:
        items, used = await attach_episodes(
            source,
            items,
            used,
            token_budget=query.budgets.token_budget,
            max_siblings=policy.max_episode_siblings,
            filters=query.filters,
        )
    timer.lap("pack")
    if query.record_usage and items:
        await source.touch([item.record.memory_id for item in items], ctx.now_ms)
    timer.lap("usage")
    return RecallOutcome(tuple(items), used, timer.laps())


async def _seed_lanes(
    query: RecallQuery, ctx: RecallContext, source: RecallSource
) -> dict[str, list[LaneHit]]:
    budgets, filters = query.budgets, query.filters
    lanes = lanes_for(ctx.mode)
    calls: dict[str, asyncio.Task[list[LaneHit]]] = {}
    if "bm25" in lanes and ctx.terms and budgets.bm25_k:
        calls["bm25"] = asyncio.ensure_future(source.full_text(ctx.terms, budgets.bm25_k, filters))
    canonical, eidolon = ctx.canonical, ctx.eidolon
    if ctx.pending_vectors is not None:
        canonical, eidolon = await ctx.pending_vectors()
    if "canonical" in lanes and canonical is not None and budgets.canonical_k:
        knn = source.knn("canonical", canonical, budgets.canonical_k, filters)
        calls["canonical"] = asyncio.ensure_future(knn)
    if "eidolon" in lanes and eidolon is not None and budgets.eidolon_k:
        knn = source.knn("eidolon", eidolon, budgets.eidolon_k, filters)
        calls["eidolon"] = asyncio.ensure_future(knn)
    results = await asyncio.gather(*calls.values())
    return {lane: list(hits) for lane, hits in zip(calls, results, strict=True)}


async def _walk(
    query: RecallQuery,
    ctx: RecallContext,
    source: RecallSource,
    ranked: Mapping[str, Sequence[str]],
    policy: RankingPolicy,
) -> list[Related]:
    seeds_fused = reciprocal_rank_fusion(ranked, k=policy.rrf_k, weights=dict(policy.lane_weights))
    if not seeds_fused:
        return []
    top = seeds_fused[0].score
    seeds = [Seed(hit.id, hit.score / top) for hit in seeds_fused]
    return await walk(
        seeds,
        source,
        now_ms=ctx.now_ms,
        field_digest=ctx.digest,
        budget=query.budgets.walk,
        circuits=ctx.circuits,
    )


async def _shortlist_records(
    query: RecallQuery, source: RecallSource, fused: Sequence[FusedHit], depth: int
) -> dict[str, RecallRecord]:
    """Full records, in fused order, until `depth` eligible ones are known: the
    walk may bring hundreds of ids, the rerank only looks at the best few."""
    records: dict[str, RecallRecord] = {}
    chunk = max(2 * depth, 40)
    eligible: set[str] = set()
    for start in range(0, len(fused), chunk):
        ids = [hit.id for hit in fused[start : start + chunk]]
        records.update(await _resolved_records(source, ids))
        for memory_id in ids:
            record = records.get(memory_id)
            if record is not None and record.live and record.admitted_by(query.filters):
                eligible.add(record.memory_id)
        if len(eligible) >= depth:
            break
    return records


async def _resolved_records(
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


@dataclass(frozen=True, slots=True)
class _Origin:
    lanes: tuple[str, ...]
    ranks: tuple[tuple[str, int], ...]
    rrf: float


def _candidates(
    query: RecallQuery,
    ctx: RecallContext,
    policy: RankingPolicy,
    fused: Sequence[FusedHit],
    records: Mapping[str, RecallRecord],
) -> tuple[list[Candidate], dict[str, Vector], dict[str, _Origin]]:
    """Eligible records as rerank candidates, keyed by the id they will be returned
    under (a summary's own id when it stands in for a source)."""
    candidates: dict[str, Candidate] = {}
    vectors: dict[str, Vector] = {}
    origin: dict[str, _Origin] = {}
    for hit in fused:
        record = records.get(hit.id)
        if record is None or not record.live or not record.admitted_by(query.filters):
            continue
        memory_id = record.memory_id
        held = origin.get(memory_id)
        lanes = tuple(sorted({*hit.lanes, *(held.lanes if held else ())}))
        ranks = tuple(
            sorted({*zip(hit.lanes, hit.ranks, strict=True), *(held.ranks if held else ())})
        )
        rrf = hit.score + (held.rrf if held else 0.0)
        origin[memory_id] = _Origin(lanes, ranks, rrf)
        candidates[memory_id] = Candidate(
            memory_id=memory_id,
            rrf=rrf,
            effective_confidence=effective_confidence(
                record.confidence,
                record.last_accessed_ms if record.last_accessed_ms is not None else record.ts_ms,
                ctx.now_ms,
                kind=record.kind,
                decay_class=record.decay_class or None,
                provenance=record.provenance,
                quality=record.quality,
                strength=record.strength,
                policy=policy.decay,
            ),
            quality=record.quality,
            ts_ms=record.ts_ms,
            regime=record.regime,
            kind=record.kind,
            provenance=record.provenance,
            normalized_hash=record.normalized_hash,
            affect=record.affect,
        )
        if record.vector is not None:
            vectors[memory_id] = record.vector
        if len(candidates) >= policy.rerank_depth:
            break
    ordered = sorted(_spread(candidates.values()), key=lambda c: c.memory_id)
    return ordered, vectors, origin


def _spread(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Min-max the fused scores over the shortlist. Raw RRF sums crowd together
    (rank 1 and rank 20 of one lane differ by a quarter), which would let the
    priors of the rerank, not relevance, decide the order."""
    pool = list(candidates)
    if not pool:
        return pool
    low, high = min(c.rrf for c in pool), max(c.rrf for c in pool)
    if high <= low:
        return [replace(c, rrf=1.0) for c in pool]
    return [replace(c, rrf=(c.rrf - low) / (high - low)) for c in pool]


def _pack_input(
    scored: Scored,
    records: Mapping[str, RecallRecord],
    origin: Mapping[str, _Origin],
    related: Mapping[str, Related],
    explain: bool,
) -> PackInput:
    memory_id = scored.memory_id
    record = _record_for(records, memory_id)
    via = related.get(memory_id)
    keys = via.via_keys if via is not None else ()
    lanes = origin[memory_id].lanes
    factors: tuple[tuple[str, float], ...] = ()
    if explain:
        detail = {
            **scored.factors.as_dict(),
            "rrf_raw": origin[memory_id].rrf,
            "score": scored.score,
            **{f"rank:{lane}": float(rank) for lane, rank in origin[memory_id].ranks},
        }
        if via is not None:
            detail["walk_score"] = via.score
            detail["walk_hops"] = float(via.hops)
        factors = tuple(sorted((k, round(v, 9)) for k, v in detail.items()))
    return PackInput(
        memory_id=memory_id,
        kind=record.kind,
        text=record.text,
        score=scored.score,
        gist=record.gist,
        factors=factors,
        reasons=(*keys, *(f"lane:{lane}" for lane in lanes)),
    )


def _record_for(records: Mapping[str, RecallRecord], memory_id: str) -> RecallRecord:
    found = records.get(memory_id)
    if found is not None and found.memory_id == memory_id:
        return found
    return next(r for r in records.values() if r.memory_id == memory_id)


class _Timer:
    def __init__(self, stopwatch: Callable[[], float] | None) -> None:
        self._clock = stopwatch
        self._last = stopwatch() if stopwatch else 0.0
        self._laps: list[tuple[str, float]] = []

    def lap(self, name: str) -> None:
        if self._clock is None:
            return
        now = self._clock()
        self._laps.append((name, round((now - self._last) * 1000, 3)))
        self._last = now

    def laps(self) -> tuple[tuple[str, float], ...]:
        return tuple(self._laps)
