"""Learned retrieval weights (docs/design.md §7): exponential weights (Hedge) over the rerank
factors, per agent.

Each rerank factor is an expert that votes for the memories it scores high. When
a run that recalled memories ends, each factor is charged a loss for what it said
about the memories the run acted on (`value`: how much the factor favoured one
over the rest of its reply, see `grimoire.streams.learn.runs`): on a success,
`1 - value` (it should have favoured them), on a failure, `value` (it should not
have). Hedge multiplies each weight
by `exp(-eta · mean loss)` and renormalises, so weight flows to the factors that
tell what worked from what did not, in the agent's own experience.

Bounded, so one streak of luck cannot take over ranking:
- a fixed share `mix` of every update goes back to the initial weights (Herbster
  and Warmuth's fixed-share Hedge: a factor that lost its weight can regain it
  when it starts being right again);
- relevance keeps at least `relevance_floor` of the total: priors reorder
  relevant memories, they never make an unrelated one win.

Deterministic: a pure function of the previous weights and the observations, in
a fixed factor order, rounded to 9 decimals, so a replay learns the same weights.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from grimoire.streams.recall.rerank import RerankWeights

__all__ = [
    "DEFAULT_HEDGE_POLICY",
    "LEARNED_FACTORS",
    "RANK",
    "HedgePolicy",
    "LearnedWeights",
    "Observation",
    "hedge_update",
    "initial_weights",
    "rerank_weights",
]

LEARNED_FACTORS: Final = (
    "relevance",
    "effective_confidence",
    "quality",
    "recency",
    "regime_match",
    "outcome",
    "causal",
)
_PRIORS: Final = LEARNED_FACTORS[1:]
# Recorded beside the factor values: the memory's place in the reply (0 = top).
RANK: Final = "rank"


@dataclass(frozen=True, slots=True)
class HedgePolicy:
    # A run moves a factor's weight by at most e^-eta: an agent's runs are few
    # (tens, not thousands), so learning has to show within them.
    eta: float = 1.0
    mix: float = 0.02
    relevance_floor: float = 0.4
    # What the two learned-only factors start with, on the scale of the static
    # prior weights (effective_confidence 0.25 ... regime_match 0.10): the run
    # record as much as confidence, the causal utility less until edges exist.
    outcome_seed: float = 0.25
    causal_seed: float = 0.10

    def __post_init__(self) -> None:
        if self.eta <= 0.0 or not 0.0 <= self.mix < 1.0:
            raise ValueError("eta must be > 0 and mix within [0, 1)")
        if not 0.0 <= self.relevance_floor < 1.0:
            raise ValueError("relevance_floor must be within [0, 1)")


DEFAULT_HEDGE_POLICY: Final = HedgePolicy()


@dataclass(frozen=True, slots=True)
class Observation:
    """One recalled memory's factor values, and whether the run that recalled it
    succeeded."""

    factors: Mapping[str, float]
    success: bool
    weight: float = 1.0  # how much it counts: the agent acts on the top of a reply


@dataclass(frozen=True, slots=True)
class LearnedWeights:
    weights: tuple[tuple[str, float], ...]  # LEARNED_FACTORS order, summing to 1
    updates: int = 0  # runs learned from

    def weight(self, factor: str) -> float:
        return dict(self.weights).get(factor, 0.0)

    def to_wire(self) -> dict[str, float]:
        return dict(self.weights)


def initial_weights(
    base: RerankWeights, policy: HedgePolicy = DEFAULT_HEDGE_POLICY
) -> LearnedWeights:
    """The static weights as a learned vector: relevance holds `1 - prior_share`, the
    priors share the rest in their static proportions, plus the two seeds."""
    raw = {
        "effective_confidence": base.effective_confidence,
        "quality": base.quality,
        "recency": base.recency,
        "regime_match": base.regime_match,
        "outcome": policy.outcome_seed,
        "causal": policy.causal_seed,
    }
    total = sum(raw.values())
    share = base.prior_share
    weights = {"relevance": 1.0 - share}
    for name in _PRIORS:
        weights[name] = share * raw[name] / total if total > 0 else 0.0
    return LearnedWeights(_ordered(weights))


def hedge_update(
    current: LearnedWeights,
    observations: Sequence[Observation],
    initial: LearnedWeights,
    *,
    active: frozenset[str] = frozenset(LEARNED_FACTORS),
    policy: HedgePolicy = DEFAULT_HEDGE_POLICY,
) -> LearnedWeights:
    """One Hedge step from a run's observations; factors not `active` (causal with
    causal scoring off) keep their weight. No observation: unchanged."""
    if not observations:
        return current
    weights = dict(current.weights)
    # An inactive factor is no expert this round: its weight is set aside and the
    # active ones share the rest (renormalising it with them would reward it for
    # losing nothing).
    idle = {n: w for n, w in weights.items() if n not in active}
    for name in LEARNED_FACTORS:
        if name not in active:
            continue
        losses = [
            o.weight
            * (
                (1.0 - _unit(o.factors.get(name, 0.5)))
                if o.success
                else _unit(o.factors.get(name, 0.5))
            )
            for o in observations
        ]
        total = sum(o.weight for o in observations)
        if total > 0:
            weights[name] *= math.exp(-policy.eta * sum(losses) / total)
    share = 1.0 - sum(idle.values())
    start = _within({n: w for n, w in initial.weights if n not in idle}, share)
    weights = _within({n: w for n, w in weights.items() if n not in idle}, share)
    weights = {n: (1.0 - policy.mix) * weights[n] + policy.mix * start[n] for n in weights}
    if weights["relevance"] < policy.relevance_floor:
        rest = share - weights["relevance"]
        scale = (share - policy.relevance_floor) / rest if rest > 0 else 0.0
        weights = {n: w * scale for n, w in weights.items()}
        weights["relevance"] = policy.relevance_floor
    return LearnedWeights(_ordered({**weights, **idle}), current.updates + 1)


def rerank_weights(base: RerankWeights, learned: LearnedWeights, *, causal: bool) -> RerankWeights:
    """The rerank weights the learned vector stands for: relevance's weight is what
    the priors cannot take (`prior_share = 1 - relevance`); the priors keep their
    learned proportions; affect (a caller's opt-in) keeps its static proportion."""
    w = dict(learned.weights)
    priors_total = sum(w[n] for n in _PRIORS if causal or n != "causal")
    static_total = base.effective_confidence + base.quality + base.recency + base.regime_match
    affect = base.affect * priors_total / static_total if static_total > 0 else 0.0
    return replace(
        base,
        prior_share=_unit(1.0 - w["relevance"]),
        effective_confidence=w["effective_confidence"],
        quality=w["quality"],
        recency=w["recency"],
        regime_match=w["regime_match"],
        outcome=w["outcome"],
        causal=w["causal"] if causal else 0.0,
        affect=affect,
    )


def _unit(value: float) -> float:
    return min(1.0, max(0.0, value))


def _within(weights: Mapping[str, float], total: float) -> dict[str, float]:
    """`weights` scaled to sum to `total` (equal shares if they sum to nothing)."""
    whole = sum(weights.values())
    if whole <= 0.0:
        return {n: total / len(weights) for n in weights}
    return {n: w * total / whole for n, w in weights.items()}


def _ordered(weights: Mapping[str, float]) -> tuple[tuple[str, float], ...]:
    return tuple((n, round(weights[n], 9)) for n in LEARNED_FACTORS)
