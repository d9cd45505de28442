"""Multi-factor rerank of pooled candidates (docs/design.md §5 step 3).

    prior = (0.25·effective_confidence + 0.20·quality + 0.15·recency
             + 0.10·regime_match [+ w_affect·affect] [+ w_outcome·outcome]
             [+ w_causal·causal_utility]) / (sum of those weights)
    score = boost · outcome_boost · relevance · (1 - prior_share + prior_share · prior)
    outcome_boost = 1 + outcome_bias · (2 · outcome - 1)

`outcome` is the memory's record of the runs it took part in (or was recalled
for), (validated + 1) / (validated + contradicted + 2), 0.5 with no record. It
acts twice: as a prior the learned weights can grow, and as the learned outcome
bias, a premium like the bloodstain boost: with `outcome_bias` 0.5 a memory of
one successful run scores 1.17x, of one failed run 0.83x, within [0.5, 1.5]
however long the record; a memory with no record is unchanged. A prior alone
could not keep the docs/design.md §7 promise (successful runs above failed ones): priors
scale relevance by at most `prior_share`, so a slightly better-worded memory
of a failed run would still win.
`causal_utility` is docs/design.md §5's `alpha*sim + beta*causal_uplift - gamma*latency` mapped onto
[0, 1] (its least possible value to 0, its greatest to 1), with `sim` the
normalised relevance, `causal_uplift` from the causal graph
(`grimoire.streams.learn.causal`) and `latency` a tool call's latency as
`ms / (ms + latency_scale_ms)`. Both weigh 0 unless the agent learns: its learned
weights (`grimoire.streams.learn.hedge`) set every weight above, `prior_share`
included.

`relevance` is the evidence that a memory answers the query (`relevance.py`:
lexical and semantic scores plus session context; in docs/design.md §5 step 3 it
stands where the fused score, rrf, stood),
divided by the best in the list. Every factor is in [0, 1].

The first plan's additive form (0.30·rrf + the priors) lets a confident, recent,
on-regime memory that barely matches the query outrank the one that answers
it: the priors hold 70 % of the score and vary as much across a shortlist as
relevance does. Here the priors keep their proportions but scale a
memory's relevance by at most `prior_share` (0.30), so they order memories
that are about equally relevant and never promote an unrelated one. Measured
on LoCoMo (`make bench-locomo`, R@5 over categories 1-4): additive weights
0.49, additive 0.6/0.4 0.58, relevance alone 0.609, this form 0.608.

Each result keeps its factor breakdown so `explain` can show why it ranked where
it did. Ordering is (-score, memory_id): the same request on the same state gives
the same list (docs/design.md §5 step 5).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from grimoire.streams.model.decay import DAY_MS, LINEAGE_PROVENANCES, recency
from grimoire.streams.model.field_state import Affect
from grimoire.streams.model.records import Kind

# Recency is a retrieval preference, not forgetting (that is decay's job), so
# it uses one half-life for every kind; a week keeps last week's lessons visible.
DEFAULT_RECENCY_HALF_LIFE_MS: Final = 7 * DAY_MS

# Which record survives when several share a normalized_hash: a summary stands in
# for the sources it replaced and an aggregate carries their repeat count, so
# both say more than any single copy (docs/design.md §5 step 1 "prefer summaries/aggregates").
_KIND_PREFERENCE: Final = {Kind.SUMMARY.value: 0, Kind.AGGREGATE.value: 1}
_OTHER_KIND: Final = 2


@dataclass(frozen=True, slots=True)
class RerankWeights:
    # How much the priors can scale relevance down: 0 ranks on relevance alone.
    prior_share: float = 0.30
    effective_confidence: float = 0.25
    quality: float = 0.20
    recency: float = 0.15
    regime_match: float = 0.10
    affect: float = 0.0  # mood-congruent retrieval; off unless a caller opts in
    lineage_boost: float = 1.2  # predecessor "bloodstain" premium, multiplies the score
    outcome: float = 0.0  # the run record as a prior; set by learned weights
    outcome_bias: float = 0.0  # the run record as a premium; on when the agent learns
    causal: float = 0.0  # causal utility; set by learned weights when causal scoring is on
    causal_alpha: float = 0.4
    causal_beta: float = 0.5
    causal_gamma: float = 0.1
    latency_scale_ms: float = 1000.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.prior_share <= 1.0:
            raise ValueError("prior_share must be within [0, 1]")
        if min(self.causal_alpha, self.causal_beta, self.causal_gamma) < 0.0:
            raise ValueError("causal alpha, beta and gamma must be >= 0")
        if not 0.0 <= self.outcome_bias <= 1.0:
            raise ValueError("outcome_bias must be within [0, 1]")
        if self.latency_scale_ms <= 0.0:
            raise ValueError("latency_scale_ms must be > 0")


DEFAULT_RERANK_WEIGHTS: Final = RerankWeights()


@dataclass(frozen=True, slots=True)
class Candidate:
    """One pooled memory with what the reranker needs; `relevance` is unscaled."""

    memory_id: str
    relevance: float
    effective_confidence: float
    quality: float
    ts_ms: int
    regime: str = ""
    kind: Kind | str = Kind.EPISODE
    provenance: str = "self"
    normalized_hash: str = ""
    affect: Affect | None = None
    validated: int = 0  # runs it took part in that succeeded
    contradicted: int = 0  # ... and that failed
    causal_uplift: float = 0.0  # in [-1, 1], from its out-edges in the causal graph
    latency_ms: float | None = None  # a tool call's latency


@dataclass(frozen=True, slots=True)
class RerankFactors:
    """Per-factor values in [0, 1] (before weighting) plus the applied boost."""

    relevance: float
    effective_confidence: float
    quality: float
    recency: float
    regime_match: float
    affect: float
    boost: float
    prior: float = 1.0  # the weighted mean of the priors (the factors after relevance)
    outcome: float = 0.5
    causal: float = 0.5
    outcome_boost: float = 1.0

    def as_dict(self) -> dict[str, float]:
        return {
            "relevance": self.relevance,
            "prior": self.prior,
            "effective_confidence": self.effective_confidence,
            "quality": self.quality,
            "recency": self.recency,
            "regime_match": self.regime_match,
            "affect": self.affect,
            "outcome": self.outcome,
            "causal": self.causal,
            "boost": self.boost,
            "outcome_boost": self.outcome_boost,
        }


@dataclass(frozen=True, slots=True)
class Scored:
    candidate: Candidate
    score: float
    factors: RerankFactors

    @property
    def memory_id(self) -> str:
        return self.candidate.memory_id


def _unit(value: float) -> float:
    # Inputs come from stored fields; clamping keeps one bad value from
    # outweighing every other factor.
    return min(1.0, max(0.0, value))


def regime_match(candidate_regime: str, query_regime: str) -> float:
    """1 for the same regime, 0.5 when either side is unknown (""), else 0."""
    mine = candidate_regime.strip().casefold()
    theirs = query_regime.strip().casefold()
    if not mine or not theirs:
        return 0.5
    return 1.0 if mine == theirs else 0.0


def affect_congruence(memory: Affect | None, state: Affect | None) -> float:
    """PAD cosine mapped to [0, 1]; 0.5 (neutral) when either side is missing or zero."""
    if memory is None or state is None:
        return 0.5
    a = (memory.pleasure, memory.arousal, memory.dominance)
    b = (state.pleasure, state.arousal, state.dominance)
    norm = math.hypot(*a) * math.hypot(*b)
    if norm == 0.0:
        return 0.5
    cosine = sum(x * y for x, y in zip(a, b, strict=True)) / norm
    return _unit((1.0 + cosine) / 2.0)


def outcome_bias(validated: int, contradicted: int) -> float:
    """The run record as a Beta(1/2, 1/2) (Jeffreys) posterior mean: 0.5 with no
    record, 0.75 after one success, 0.25 after one failure. The lighter prior lets
    a single run say something, as one run is often all an agent has of a
    situation."""
    v, c = max(validated, 0), max(contradicted, 0)
    return (v + 0.5) / (v + c + 1.0)


def causal_utility(
    similarity: float, uplift: float, latency_ms: float | None, weights: RerankWeights
) -> float:
    """`alpha*sim + beta*uplift - gamma*latency` mapped onto [0, 1] by its range."""
    alpha, beta, gamma = weights.causal_alpha, weights.causal_beta, weights.causal_gamma
    span = alpha + 2.0 * beta + gamma
    if span <= 0.0:
        return 0.5
    latency = 0.0
    if latency_ms is not None and latency_ms > 0.0:
        latency = latency_ms / (latency_ms + weights.latency_scale_ms)
    raw = alpha * _unit(similarity) + beta * min(1.0, max(-1.0, uplift)) - gamma * latency
    return _unit((raw + beta + gamma) / span)


def _score(
    candidate: Candidate,
    *,
    max_relevance: float,
    now_ms: int,
    regime: str,
    affect: Affect | None,
    weights: RerankWeights,
    recency_half_life_ms: float,
) -> Scored:
    relevance = _unit(candidate.relevance / max_relevance) if max_relevance > 0 else 0.0
    factors = RerankFactors(
        # Dividing by the list's best makes the top hit 1.0, on the same scale
        # as the other factors.
        relevance=relevance,
        effective_confidence=_unit(candidate.effective_confidence),
        quality=_unit(candidate.quality),
        recency=recency(now_ms - candidate.ts_ms, recency_half_life_ms),
        regime_match=regime_match(candidate.regime, regime),
        affect=affect_congruence(candidate.affect, affect),
        boost=(
            weights.lineage_boost
            if candidate.provenance.strip().casefold() in LINEAGE_PROVENANCES
            else 1.0
        ),
        outcome=outcome_bias(candidate.validated, candidate.contradicted),
        causal=causal_utility(relevance, candidate.causal_uplift, candidate.latency_ms, weights),
    )
    priors = (
        (weights.effective_confidence, factors.effective_confidence),
        (weights.quality, factors.quality),
        (weights.recency, factors.recency),
        (weights.regime_match, factors.regime_match),
        (weights.affect, factors.affect),
        (weights.outcome, factors.outcome),
        (weights.causal, factors.causal),
    )
    total_weight = sum(weight for weight, _ in priors)
    prior = (
        sum(weight * value for weight, value in priors) / total_weight if total_weight > 0 else 1.0
    )
    outcome_boost = 1.0 + weights.outcome_bias * (2.0 * factors.outcome - 1.0)
    factors = replace(factors, prior=prior, outcome_boost=outcome_boost)
    scale = 1.0 - weights.prior_share + weights.prior_share * prior
    return Scored(
        candidate=candidate,
        score=factors.boost * outcome_boost * factors.relevance * scale,
        factors=factors,
    )


def _survivor_key(scored: Scored) -> tuple[int, float, str]:
    preference = _KIND_PREFERENCE.get(str(scored.candidate.kind), _OTHER_KIND)
    return (preference, -scored.score, scored.memory_id)


def dedupe(scored: Iterable[Scored]) -> list[Scored]:
    """One result per memory_id (best score) and per non-empty normalized_hash.

    Within a hash group the survivor is a summary, else an aggregate, else the
    best-scoring copy; ties go to the smaller memory_id. Output order is
    unspecified; callers sort.
    """
    by_id: dict[str, Scored] = {}
    for item in scored:
        held = by_id.get(item.memory_id)
        if held is None or _survivor_key(item) < _survivor_key(held):
            by_id[item.memory_id] = item
    by_hash: dict[str, Scored] = {}
    unhashed: list[Scored] = []
    for item in by_id.values():
        digest = item.candidate.normalized_hash
        if not digest:
            unhashed.append(item)
            continue
        held = by_hash.get(digest)
        if held is None or _survivor_key(item) < _survivor_key(held):
            by_hash[digest] = item
    return [*by_hash.values(), *unhashed]


def rerank(
    candidates: Sequence[Candidate],
    *,
    now_ms: int,
    regime: str = "",
    affect: Affect | None = None,
    weights: RerankWeights = DEFAULT_RERANK_WEIGHTS,
    recency_half_life_ms: float = DEFAULT_RECENCY_HALF_LIFE_MS,
) -> list[Scored]:
    """Score, dedupe (see `dedupe`) and sort by (-score, memory_id).

    `now_ms` is the request's event time (`as_of`), never the wall clock.
    Relevance is normalised over the whole input, before dedupe, so dropping a
    copy never rescales the others.
    """
    max_relevance = max((c.relevance for c in candidates), default=0.0)
    scored = [
        _score(
            c,
            max_relevance=max_relevance,
            now_ms=now_ms,
            regime=regime,
            affect=affect,
            weights=weights,
            recency_half_life_ms=recency_half_life_ms,
        )
        for c in candidates
    ]
    result = dedupe(scored)
    result.sort(key=lambda s: (-s.score, s.memory_id))
    return result
