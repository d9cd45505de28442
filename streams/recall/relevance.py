"""How relevant each pooled candidate is to the query, from its own scores.

The lanes and the walk decide *which* memories are considered (reciprocal rank
fusion pools them); the pool is then scored on the evidence itself: the exact
lexical score of the query's terms (the BM25 lane's scorer, for every pooled
memory, not only the ones the lane returned) and the cosine between the query
and the memory's canonical vector. Ranks throw that evidence away: the lane's
first hit counts the same whether it holds every rare query term or one common
one. Measured on LoCoMo (`make bench-locomo`): a score blend of the two lanes
beat reciprocal rank fusion of the same lanes by 0.06 R@5.

A memory's context then lends it part of its neighbours' relevance: in a
session, the line before or after a strong match is usually the other half of
the same exchange (the question and its answer, the action and its result).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from grimoire.streams.recall.ports import Vector


@dataclass(frozen=True, slots=True)
class RelevancePolicy:
    # Either side alone lost 0.04-0.18 R@5 on LoCoMo against the blend. Once the
    # query's vector leaves out the actors it names (named.py) meaning is the
    # stronger side: 0.25 chosen on the tune fold (docs/benchmarks.md).
    lexical_share: float = 0.25
    # How much of its best session neighbour's relevance a memory borrows.
    context_share: float = 0.3
    # The best this many memories bring their session neighbours into the pool.
    context_anchors: int = 10
    # Memories scored on their evidence: the fused pool is cut here.
    pool_depth: int = 40
    # A "when" question: a memory whose text says when gains this share of its
    # own relevance (streams/recall/temporal.py).
    # Tuned on the LoCoMo tune fold alone (docs/benchmarks.md): 0.3-1.0 were alike.
    time_cue_share: float = 0.6
    # A query naming a window of time: a memory whose event time is in it gains
    # this share of its own relevance.
    time_window_share: float = 0.3
    # A query naming a memory's actor ("what did Maria …"): the memory gains this
    # share of its own relevance (streams/recall/named.py).
    # 0.4 on the tune fold with the actor-free query; higher gained on it but led
    # questions naming the wrong actor further astray (docs/benchmarks.md).
    actor_share: float = 0.4
    # Query-term coverage: a memory holding a larger share of the query's distinct
    # terms gains up to this share (a BM25 sum can favour one rare term repeated).
    coverage_share: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.lexical_share <= 1.0:
            raise ValueError("lexical_share must be within [0, 1]")
        if self.context_share < 0.0:
            raise ValueError("context_share must be non-negative")
        if self.context_anchors < 0 or self.pool_depth < 1:
            raise ValueError("context_anchors must be >= 0 and pool_depth >= 1")
        shares = (self.time_cue_share, self.time_window_share, self.actor_share)
        if min(*shares, self.coverage_share) < 0.0:
            raise ValueError("the time, actor and coverage shares must be non-negative")


DEFAULT_RELEVANCE_POLICY = RelevancePolicy()


@dataclass(frozen=True, slots=True)
class QueryMatch:
    """How a memory meets what the query asks beyond its words, each in [0, 1]:
    it says when (for a "when" question), its event time is in the window the
    query names, its actor is named in the query, it holds the query's terms."""

    cue: float = 0.0
    window: float = 0.0
    actor: float = 0.0
    coverage: float = 0.0  # the share of the query's distinct terms it holds

    def share(self, policy: RelevancePolicy) -> float:
        return (
            policy.time_cue_share * self.cue
            + policy.time_window_share * self.window
            + policy.actor_share * self.actor
            + policy.coverage_share * self.coverage
        )


NO_MATCH = QueryMatch()


@dataclass(frozen=True, slots=True)
class Relevance:
    """One memory's relevance and what it is made of (each part in [0, 1])."""

    lexical: float
    semantic: float
    own: float
    context: float
    total: float
    # What the query's time and actor matches added to `own` (`QueryMatch`).
    boost: float = 0.0


def cosines(query: Vector | None, vectors: Mapping[str, Vector]) -> dict[str, float]:
    """Cosine of each vector with the query; none without a query vector."""
    if query is None or not vectors:
        return {}
    ids = sorted(vectors)
    matrix = np.vstack([np.asarray(vectors[i], dtype=np.float32) for i in ids])
    q = np.asarray(query, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(q))
    dots = matrix @ q
    values = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
    return {i: float(v) for i, v in zip(ids, values, strict=True)}


def _spread(values: Mapping[str, float], ids: Sequence[str]) -> dict[str, float]:
    """Min-max over the pool: the lanes' raw scales (a BM25 sum, a cosine) differ."""
    raw = [values.get(i, 0.0) for i in ids]
    low, high = min(raw, default=0.0), max(raw, default=0.0)
    if high <= low:
        return {i: (1.0 if high > 0 else 0.0) for i in ids}
    return {i: (value - low) / (high - low) for i, value in zip(ids, raw, strict=True)}


def score_pool(
    ids: Sequence[str],
    lexical: Mapping[str, float],
    semantic: Mapping[str, float],
    neighbours: Mapping[str, Sequence[str]],
    policy: RelevancePolicy = DEFAULT_RELEVANCE_POLICY,
    matches: Mapping[str, QueryMatch] | None = None,
) -> dict[str, Relevance]:
    """Relevance of every pooled id. A side the query has nothing for (no terms,
    no vector) leaves the whole weight to the other. `neighbours` are each id's
    session neighbours; only pooled ones lend relevance, and they lend what they
    hold on the query's words and meaning alone: a time cue answers "when" in
    the line that carries it, not in the line before. `matches` are each id's
    `QueryMatch` (none: no boost)."""
    pool = sorted(set(ids))
    share = policy.lexical_share
    if not any(lexical.get(i, 0.0) > 0 for i in pool):
        share = 0.0
    elif not semantic:
        share = 1.0
    lex, sem = _spread(lexical, pool), _spread(semantic, pool)
    own = {i: share * lex[i] + (1.0 - share) * sem[i] for i in pool}
    out: dict[str, Relevance] = {}
    for i in pool:
        lent = max((own[n] for n in neighbours.get(i, ()) if n in own and n != i), default=0.0)
        context = policy.context_share * lent
        match = matches.get(i, NO_MATCH) if matches else NO_MATCH
        boost = own[i] * match.share(policy)
        out[i] = Relevance(lex[i], sem[i], own[i], context, own[i] + boost + context, boost)
    return out


def anchors(relevance: Mapping[str, Relevance], count: int) -> list[str]:
    """The `count` most relevant ids (ties on id), whose neighbours join the pool."""
    ranked = sorted(relevance, key=lambda i: (-relevance[i].own, i))
    return ranked[:count]
