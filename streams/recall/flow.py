"""Recall (docs/design.md §5): seed lanes → daimoi walk → RRF pool → relevance → rerank
→ MMR → pack.

The flow is pure orchestration over a `RecallSource`: the storage, the query
vectors and the request's event time come in as arguments, so the same request
on the same state always gives the same items, and tests run it on an
in-memory source.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from grimoire.streams.inbound.recall_request import RecallQuery
from grimoire.streams.learn.hedge import LEARNED_FACTORS, RANK
from grimoire.streams.model.decay import DEFAULT_DECAY_POLICY, DecayPolicy
from grimoire.streams.model.field_state import Affect
from grimoire.streams.ports.recall import RecallSource
from grimoire.streams.recall.anti_rumination import (
    CONTRARIAN_REASON,
    DEFAULT_CONTRARIAN_POLICY,
    ContrarianPolicy,
    contrarian_candidates,
    inject,
)
from grimoire.streams.recall.entity_lane import (
    DEFAULT_ENTITY_LANE,
    EntityLanePolicy,
    entity_hits,
)
from grimoire.streams.recall.episodes import EpisodeSibling, attach_episodes
from grimoire.streams.recall.evidence_first import (
    DEFAULT_EVIDENCE_FIRST_POLICY,
    EVIDENCE_REASON,
    EvidenceFirstPolicy,
    evidence_first,
)
from grimoire.streams.recall.fusion import reciprocal_rank_fusion
from grimoire.streams.recall.mode_decision import lanes_for, walks
from grimoire.streams.recall.options import RetrievalMode
from grimoire.streams.recall.packing import DEFAULT_MMR_LAMBDA, PackInput, mmr, pack
from grimoire.streams.recall.pool import Evidence, Pooled, assess, gather_pool
from grimoire.streams.recall.ports import LaneHit, RecallRecord, Vector
from grimoire.streams.recall.relevance import DEFAULT_RELEVANCE_POLICY, Relevance, RelevancePolicy
from grimoire.streams.recall.rerank import (
    DEFAULT_RECENCY_HALF_LIFE_MS,
    DEFAULT_RERANK_WEIGHTS,
    Candidate,
    RerankFactors,
    RerankWeights,
    Scored,
    rerank,
)
from grimoire.streams.recall.temporal import NO_TIME_INTENT, TimeIntent
from grimoire.streams.recall.walk.daimoi import Circuit, Related, Seed, walk

WALK_LANE: Final = "walk"
ENTITY_LANE: Final = "entity"
# A memory injected from past the pool (anti-rumination) was never scored on evidence.
UNSCORED: Final = Relevance(lexical=0.0, semantic=0.0, own=0.0, context=0.0, total=0.0)
QueryVectors = tuple[Vector | None, Vector | None]  # canonical, eidolon
DEFAULT_LANE_WEIGHTS: Final = (
    ("bm25", 1.0),
    ("canonical", 0.5),
    ("eidolon", 0.25),
    (WALK_LANE, 0.25),
    (ENTITY_LANE, 0.5),
)


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
    # Scores the pooled memories on their evidence (see relevance.py).
    relevance: RelevancePolicy = DEFAULT_RELEVANCE_POLICY
    # Exact terms (names, errors, paths) are the most precise evidence an agent's
    # memory has; the vector lanes catch paraphrase and the walk and the eidolon
    # lane associate, so they add to a lexical match rather than outvote it.
    # Measured on LoCoMo (make bench-locomo): equal weights lost 0.05-0.10 R@5.
    lane_weights: tuple[tuple[str, float], ...] = DEFAULT_LANE_WEIGHTS
    contrarian: ContrarianPolicy = DEFAULT_CONTRARIAN_POLICY
    # A situation's evidence entries lead the reply when the query matches it.
    evidence_first: EvidenceFirstPolicy = DEFAULT_EVIDENCE_FIRST_POLICY
    # The memories under the entities a query names (streams/recall/entity_lane.py).
    entity_lane: EntityLanePolicy = DEFAULT_ENTITY_LANE
    # The query's vector leaves out the actors it names (streams/recall/named.py).
    actor_free_query: bool = True


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
    # This recall opens a new anti-rumination window (streams/recall/anti_rumination.py):
    # it carries memories of the valence opposite to `affect`.
    contrarian_due: bool = False
    # What the query asks of time, resolved against `now_ms` (streams/recall/temporal.py).
    time: TimeIntent = NO_TIME_INTENT
    # The query's words as written, for the actors it names (streams/recall/named.py).
    named: frozenset[str] = frozenset()
    # The entity keys the query names (streams/recall/entity_lane.py).
    entity_keys: tuple[str, ...] = ()
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
    # An evidence entry that led the reply: its action's pooled (successes, failures).
    pooled: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class RecallOutcome:
    items: tuple[RecalledItem, ...]
    tokens_used: int
    timings_ms: tuple[tuple[str, float], ...] = ()
    contrarian: tuple[str, ...] = ()  # the memories injected against the mood
    # What counts as used (the items, unless the request is a probe): recall is a
    # read, so the caller records the use (a journal entry) once the answer is out.
    used_ids: tuple[str, ...] = ()
    # The learnable factor values that ranked each used memory (`LEARNED_FACTORS`):
    # a run's outcome charges them to the factors (grimoire.streams.learn.hedge).
    used_factors: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()


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
    lanes, canonical = await _seed_lanes(query, ctx, source, policy)
    timer.lap("lanes")
    ranked: dict[str, list[str]] = {
        lane: [h.memory_id for h in hits] for lane, hits in lanes.items()
    }
    related: dict[str, Related] = {}
    if walks(ctx.mode):
        # The lanes' memories make most of the pool: their records load while
        # the walk (mostly interpreter work) runs, instead of after it.
        lane_ids = sorted({hit.memory_id for hits in lanes.values() for hit in hits})
        preload = asyncio.ensure_future(source.records(lane_ids))
        try:
            for hit in await _walk(query, ctx, source, ranked, policy):
                related[hit.memory_id] = hit
        finally:
            await preload
        ranked[WALK_LANE] = list(related)
    timer.lap("walk")
    fused = reciprocal_rank_fusion(ranked, k=policy.rrf_k, weights=dict(policy.lane_weights))
    pool = await gather_pool(source, fused, query.filters, policy.relevance.pool_depth)
    timer.lap("fetch")
    lexical_hits = {h.memory_id: h.score for h in lanes.get("bm25", ())}
    evidence = Evidence(ctx.terms, lexical_hits, canonical, ctx.time, ctx.named)
    members, relevance = await assess(source, pool, evidence, query.filters, policy.relevance)
    timer.lap("relevance")
    candidates, vectors = _candidates(ctx, policy, members, relevance)
    shortlisted = {c.memory_id for c in candidates}
    against: list[str] = []
    if ctx.contrarian_due and ctx.affect is not None and query.budgets.max_items > 1:
        members, against = await contrarian_candidates(
            source,
            query.filters,
            ctx.affect,
            policy.contrarian,
            fused,
            members,
            relevance,
            candidates,
        )
        candidates = candidates + [
            _candidate(
                ctx, policy, members[i].record, relevance[i].total if i in relevance else 0.0
            )
            for i in against
            if i not in shortlisted
        ]
    scored = rerank(
        candidates,
        now_ms=ctx.now_ms,
        regime=ctx.regime,
        affect=ctx.affect,
        weights=policy.weights,
        recency_half_life_ms=policy.recency_half_life_ms,
    )
    main = [s for s in scored if s.memory_id in shortlisted] if against else scored
    lead = evidence_first(
        main,
        {s.memory_id: members[s.memory_id].record for s in main},
        {i: r.total for i, r in relevance.items()},
        policy.evidence_first,
    )
    first = lead.items[: query.budgets.max_items]
    led = {s.memory_id for s in first}
    diverse = [
        *first,
        *mmr(
            [s for s in main if s.memory_id not in led],
            vectors,
            lambda_=policy.mmr_lambda,
            limit=query.budgets.max_items - len(first),
        ),
    ]
    injected: tuple[str, ...] = ()
    if against and ctx.affect is not None:
        diverse, injected = inject(
            diverse, scored, against, ctx.affect, policy.contrarian, query.budgets.max_items
        )
    timer.lap("rank")
    packed = pack(
        [
            _pack_input(
                s,
                members[s.memory_id],
                relevance.get(s.memory_id, UNSCORED),
                related.get(s.memory_id),
                query.explain,
                contrarian=s.memory_id in injected,
                evidence=s.memory_id in led,
            )
            for s in diverse
        ],
        max_items=query.budgets.max_items,
        token_budget=query.budgets.token_budget,
        full_text_items=query.budgets.full_text_items,
    )
    items = [
        RecalledItem(
            record=members[p.memory_id].record,
            score=round(p.score, 9),
            lanes=members[p.memory_id].lanes,
            reasons=p.reasons,
            factors=p.factors,
            gist=p.gist,
            text=p.text,
            tokens=p.tokens,
            pooled=lead.pooled.get(p.memory_id),
        )
        for p in packed.items
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
    kept = {item.record.memory_id for item in items}
    by_id = {s.memory_id: s for s in scored}
    used_ids = tuple(item.record.memory_id for item in items) if query.record_usage else ()
    return RecallOutcome(
        tuple(items),
        used,
        timer.laps(),
        tuple(i for i in injected if i in kept),
        used_ids=used_ids,
        used_factors=tuple(
            (memory_id, (*_learnable(by_id[memory_id].factors), (RANK, float(rank))))
            for rank, memory_id in enumerate(used_ids)
            if memory_id in by_id
        ),
    )


async def _seed_lanes(
    query: RecallQuery, ctx: RecallContext, source: RecallSource, policy: RankingPolicy
) -> tuple[dict[str, list[LaneHit]], Vector | None]:
    """Each lane's hits, and the query's canonical vector (once computed)."""
    budgets, filters = query.budgets, query.filters
    lanes = lanes_for(ctx.mode)
    calls: dict[str, asyncio.Task[list[LaneHit]]] = {}
    if "bm25" in lanes and ctx.terms and budgets.bm25_k:
        calls["bm25"] = asyncio.ensure_future(source.full_text(ctx.terms, budgets.bm25_k, filters))
    if walks(ctx.mode) and ctx.entity_keys:
        # Unfiltered like the walk: the pool admits only what the filters allow.
        found = entity_hits(source, ctx.entity_keys, policy.entity_lane)
        calls[ENTITY_LANE] = asyncio.ensure_future(found)
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
    hits = {lane: list(found) for lane, found in zip(calls, results, strict=True)}
    return hits, canonical


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


def _candidates(
    ctx: RecallContext,
    policy: RankingPolicy,
    members: Mapping[str, Pooled],
    relevance: Mapping[str, Relevance],
) -> tuple[list[Candidate], dict[str, Vector]]:
    """The most relevant pooled memories as rerank candidates: priors reorder a
    shortlist of relevant memories, they do not promote weakly related ones."""
    ranked = sorted(relevance, key=lambda i: (-relevance[i].total, i))[: policy.rerank_depth]
    candidates: list[Candidate] = []
    vectors: dict[str, Vector] = {}
    for memory_id in sorted(ranked):
        record = members[memory_id].record
        candidates.append(_candidate(ctx, policy, record, relevance[memory_id].total))
        if record.vector is not None:
            vectors[memory_id] = record.vector
    return candidates, vectors


def _candidate(
    ctx: RecallContext, policy: RankingPolicy, record: RecallRecord, relevance: float
) -> Candidate:
    return Candidate(
        memory_id=record.memory_id,
        relevance=relevance,
        effective_confidence=record.effective_confidence(ctx.now_ms, policy.decay),
        quality=record.quality,
        ts_ms=record.ts_ms,
        regime=record.regime,
        kind=record.kind,
        provenance=record.provenance,
        normalized_hash=record.normalized_hash,
        affect=record.affect,
        validated=record.validated_count,
        contradicted=record.contradicted_count,
        causal_uplift=record.causal_uplift,
        latency_ms=record.latency_ms,
    )


def _pack_input(
    scored: Scored,
    member: Pooled,
    relevance: Relevance,
    via: Related | None,
    explain: bool,
    *,
    contrarian: bool = False,
    evidence: bool = False,
) -> PackInput:
    record = member.record
    keys = via.via_keys if via is not None else ()
    factors: tuple[tuple[str, float], ...] = ()
    if explain:
        detail = {
            **scored.factors.as_dict(),
            "lexical": relevance.lexical,
            "semantic": relevance.semantic,
            "context": relevance.context,
            "relevance_raw": relevance.total,
            "rrf_raw": member.rrf,
            "score": scored.score,
            **{f"rank:{lane}": float(rank) for lane, rank in member.ranks},
        }
        if relevance.boost:
            # What the time cue, the named window and the actor added (QueryMatch).
            detail["query_match"] = relevance.boost
        if via is not None:
            detail["walk_score"] = via.score
            detail["walk_hops"] = float(via.hops)
        if contrarian:
            detail["contrarian"] = 1.0
        factors = tuple(sorted((k, round(v, 9)) for k, v in detail.items()))
    return PackInput(
        memory_id=record.memory_id,
        kind=record.kind,
        text=record.text,
        score=scored.score,
        gist=record.gist,
        factors=factors,
        reasons=(
            *keys,
            *(f"lane:{lane}" for lane in member.lanes),
            *((CONTRARIAN_REASON,) if contrarian else ()),
            *((EVIDENCE_REASON,) if evidence else ()),
        ),
    )


def _learnable(factors: RerankFactors) -> tuple[tuple[str, float], ...]:
    values = factors.as_dict()
    return tuple((name, round(values[name], 9)) for name in LEARNED_FACTORS)


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
