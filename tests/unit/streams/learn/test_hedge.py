"""Learned rerank weights (streams/learn/hedge.py): the static weights as a learned
vector, one Hedge step by hand, its bounds (relevance floor, fixed share), an
inactive factor, determinism and the sum."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from grimoire.streams.learn.hedge import (
    DEFAULT_HEDGE_POLICY,
    LEARNED_FACTORS,
    HedgePolicy,
    LearnedWeights,
    Observation,
    hedge_update,
    initial_weights,
    rerank_weights,
)
from grimoire.streams.recall.rerank import DEFAULT_RERANK_WEIGHTS, Candidate, rerank

BASE = DEFAULT_RERANK_WEIGHTS
PRIORS = ("effective_confidence", "quality", "recency", "regime_match")
ALL = frozenset(LEARNED_FACTORS)


def vector(**weights: float) -> LearnedWeights:
    return LearnedWeights(tuple((n, weights[n]) for n in LEARNED_FACTORS))


def seen(success: bool, **factors: float) -> Observation:
    return Observation(factors, success)


# --- initial weights and the rerank they stand for -------------------------------------


def test_initial_weights_by_hand() -> None:
    # relevance 1 - prior_share = 0.7; the priors share 0.3 in proportion to
    # 0.25 : 0.20 : 0.15 : 0.10 plus the seeds 0.25 (outcome) and 0.10 (causal),
    # total 1.05: effective_confidence 0.3·0.25/1.05 = 0.071428571, ...
    learned = initial_weights(BASE)
    assert dict(learned.weights) == pytest.approx(
        {
            "relevance": 0.7,
            "effective_confidence": 0.071428571,
            "quality": 0.057142857,
            "recency": 0.042857143,
            "regime_match": 0.028571429,
            "outcome": 0.071428571,
            "causal": 0.028571429,
        },
        abs=1e-9,
    )
    assert [n for n, _ in learned.weights] == list(LEARNED_FACTORS)
    assert learned.updates == 0
    assert sum(learned.to_wire().values()) == pytest.approx(1.0, abs=1e-8)


@pytest.mark.parametrize(
    "base",
    [
        BASE,
        replace(BASE, prior_share=0.5, effective_confidence=0.4, quality=0.1, recency=0.3),
        replace(BASE, prior_share=0.0),
        replace(BASE, prior_share=1.0, regime_match=0.0),
    ],
)
@pytest.mark.parametrize("causal", [True, False])
def test_initial_weights_give_back_the_static_prior_share_and_proportions(
    base: object, causal: bool
) -> None:
    assert isinstance(base, type(BASE))
    back = rerank_weights(base, initial_weights(base), causal=causal)
    assert back.prior_share == pytest.approx(base.prior_share, abs=1e-8)
    static = {n: getattr(base, n) for n in PRIORS}
    learned = {n: getattr(back, n) for n in PRIORS}
    if base.prior_share == 0.0:  # relevance alone: the priors weigh nothing
        assert sum(learned.values()) == 0.0
        return
    # The four static priors keep their proportions (the rerank normalises the
    # priors by their total, so only proportions matter).
    assert {n: w / sum(learned.values()) for n, w in learned.items()} == pytest.approx(
        {n: w / sum(static.values()) for n, w in static.items()}, abs=1e-8
    )
    assert back.causal == (pytest.approx(initial_weights(base).weight("causal")) if causal else 0.0)
    # What the learned vector does not hold is the base's.
    assert (back.lineage_boost, back.outcome_bias, back.causal_alpha) == (
        base.lineage_boost,
        base.outcome_bias,
        base.causal_alpha,
    )


def test_affect_keeps_its_static_proportion_of_the_priors() -> None:
    base = replace(BASE, affect=0.2)
    back = rerank_weights(base, initial_weights(base), causal=False)
    # static: affect / (0.25 + 0.20 + 0.15 + 0.10) = 0.2 / 0.7
    # learned: priors without causal = 0.3 - 0.028571429 = 0.271428571;
    # affect = 0.2 · 0.271428571 / 0.7 = 0.077551020
    assert back.affect == pytest.approx(0.077551020, abs=1e-8)
    priors = sum(getattr(back, n) for n in (*PRIORS, "outcome"))
    assert back.affect / priors == pytest.approx(0.2 / 0.7, abs=1e-8)


def test_without_seeds_the_learned_start_ranks_exactly_as_the_static_weights() -> None:
    # With the two learned-only factors seeded at 0, the initial vector is the
    # static rerank: same scores, same order.
    policy = HedgePolicy(outcome_seed=0.0, causal_seed=0.0)
    learned = rerank_weights(BASE, initial_weights(BASE, policy), causal=True)
    candidates = [
        Candidate(f"m{i}", relevance=r, effective_confidence=c, quality=q, ts_ms=ts,
                  regime="deploy" if i % 2 else "", validated=i, contradicted=3 - i,
                  causal_uplift=0.5 - i / 4)
        for i, (r, c, q, ts) in enumerate(
            [(0.9, 0.2, 0.3, 1_000), (0.8, 0.9, 0.9, 9_000), (0.85, 0.5, 0.1, 5_000),
             (0.4, 1.0, 1.0, 10_000)]
        )
    ]  # fmt: skip
    static = rerank(candidates, now_ms=10_000, regime="deploy", weights=BASE)
    again = rerank(candidates, now_ms=10_000, regime="deploy", weights=learned)
    assert [s.memory_id for s in again] == [s.memory_id for s in static]
    assert [s.score for s in again] == pytest.approx([s.score for s in static], abs=1e-9)


# --- one step -------------------------------------------------------------------------

FLAT = vector(relevance=0.4, effective_confidence=0.1, quality=0.1, recency=0.1,
              regime_match=0.1, outcome=0.1, causal=0.1)  # fmt: skip
PLAIN = HedgePolicy(eta=1.0, mix=0.0, relevance_floor=0.0)


def test_one_step_by_hand() -> None:
    # A success where quality scored its memory 1 (loss 0) and every other factor
    # said nothing (0.5: loss 0.5). Others · e^-0.5 = 0.606530660; the total is
    # 0.9·0.606530660 + 0.1 = 0.645877594; quality 0.1 / 0.645877594 = 0.154828099;
    # relevance 0.4·0.606530660 / 0.645877594 = 0.375631956; the rest
    # 0.1·0.606530660 / 0.645877594 = 0.093907989 each.
    after = hedge_update(FLAT, [seen(True, quality=1.0)], FLAT, policy=PLAIN)
    assert dict(after.weights) == pytest.approx(
        {"relevance": 0.375631956, "quality": 0.154828099}
        | {n: 0.093907989 for n in ("effective_confidence", "recency", "regime_match", "outcome",
                                 "causal")},
        abs=1e-9,
    )  # fmt: skip
    assert after.updates == 1


@pytest.mark.parametrize(
    ("observations", "winner"),
    [
        # on a success the factor that scored the memory high was right
        ([seen(True, recency=1.0)], "recency"),
        # on a failure the factor that scored it low was right
        ([seen(False, **{n: 1.0 for n in LEARNED_FACTORS if n != "outcome"}, outcome=0.0)],
         "outcome"),
        # over several memories the mean loss counts: quality 1, 1 vs confidence 1, 0
        ([seen(True, quality=1.0, effective_confidence=1.0),
          seen(True, quality=1.0, effective_confidence=0.0)], "quality"),
    ],
)  # fmt: skip
def test_weight_moves_to_the_factor_with_the_lower_loss(
    observations: list[Observation], winner: str
) -> None:
    start = initial_weights(BASE)
    after = hedge_update(start, observations, start)
    gains = {n: after.weight(n) / start.weight(n) for n in LEARNED_FACTORS}
    assert max(gains, key=lambda n: gains[n]) == winner
    assert gains[winner] > 1.0


def test_values_outside_the_unit_interval_count_as_its_ends() -> None:
    start = initial_weights(BASE)
    clamped = hedge_update(start, [seen(True, quality=1.0, recency=0.0)], start)
    wild = hedge_update(start, [seen(True, quality=7.0, recency=-3.0)], start)
    assert wild == clamped


def test_no_observation_changes_nothing() -> None:
    start = initial_weights(BASE)
    assert hedge_update(start, [], start) is start


# --- bounds ---------------------------------------------------------------------------


def test_relevance_never_falls_below_its_floor() -> None:
    # Relevance is wrong every time (it scored 0 what succeeded): it sinks to the
    # floor and stays there; the rest share 1 - floor.
    start = initial_weights(BASE)
    weights = start
    for _ in range(40):
        weights = hedge_update(weights, [seen(True, relevance=0.0)], start)
        assert weights.weight("relevance") >= DEFAULT_HEDGE_POLICY.relevance_floor - 1e-9
    assert weights.weight("relevance") == pytest.approx(0.4, abs=1e-9)
    assert sum(w for n, w in weights.weights if n != "relevance") == pytest.approx(0.6, abs=1e-8)
    assert weights.updates == 40


def test_fixed_share_keeps_every_factor_within_reach() -> None:
    # Relevance is always right, every prior always wrong: each prior keeps at
    # least mix · its initial weight (here 0.02 · w0), so it can come back.
    policy = HedgePolicy(mix=0.02)
    start = initial_weights(BASE, policy)
    weights = start
    for _ in range(200):
        observation = seen(True, relevance=1.0, **{n: 0.0 for n in LEARNED_FACTORS[1:]})
        weights = hedge_update(weights, [observation], start, policy=policy)
    for name in LEARNED_FACTORS[1:]:
        assert weights.weight(name) >= 0.02 * start.weight(name) - 1e-9
        assert weights.weight(name) < 0.1 * start.weight(name)  # it did lose
    # ... and comes back when it starts being right again.
    low = weights.weight("quality")
    for _ in range(30):
        weights = hedge_update(weights, [seen(True, quality=1.0)], start, policy=policy)
    assert weights.weight("quality") > 5 * low


def test_with_half_mix_a_step_is_halfway_back_to_the_start() -> None:
    # mix 0.5: the Hedge step (one_step_by_hand's) averaged with the start.
    policy = HedgePolicy(eta=1.0, mix=0.5, relevance_floor=0.0)
    after = hedge_update(FLAT, [seen(True, quality=1.0)], FLAT, policy=policy)
    # quality (0.154828099 + 0.1) / 2 = 0.127414050;
    # relevance (0.375631956 + 0.4) / 2 = 0.387815978
    assert after.weight("quality") == pytest.approx(0.127414050, abs=1e-8)
    assert after.weight("relevance") == pytest.approx(0.387815978, abs=1e-8)


def test_the_floor_rescales_the_priors_in_proportion() -> None:
    # one_step_by_hand with a floor of 0.4: relevance 0.375631956 → 0.4; the priors
    # scaled by 0.6 / 0.624368044 = 0.960971667: quality 0.148785416, the rest
    # 0.090242917.
    policy = HedgePolicy(eta=1.0, mix=0.0, relevance_floor=0.4)
    after = hedge_update(FLAT, [seen(True, quality=1.0)], FLAT, policy=policy)
    assert after.weight("relevance") == pytest.approx(0.4, abs=1e-9)
    assert after.weight("quality") == pytest.approx(0.148785416, abs=1e-8)
    assert after.weight("recency") == pytest.approx(0.090242917, abs=1e-8)


@pytest.mark.parametrize(
    "policy",
    [dict(eta=0.0), dict(eta=-1.0), dict(mix=1.0), dict(mix=-0.1), dict(relevance_floor=1.0)],
)
def test_a_policy_out_of_range_is_refused(policy: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        HedgePolicy(**policy)


# --- inactive factors ------------------------------------------------------------------


def test_an_inactive_factors_values_are_ignored() -> None:
    # causal off: whatever causal scored, the step is the same.
    start = initial_weights(BASE)
    active = ALL - {"causal"}
    steps = {
        hedge_update(start, [seen(True, quality=0.9, causal=value)], start, active=active)
        for value in (0.0, 0.5, 1.0)
    }
    assert len(steps) == 1
    # with causal active its value matters
    on = {hedge_update(start, [seen(True, causal=v)], start) for v in (0.0, 1.0)}
    assert len(on) == 2


def test_an_inactive_factor_keeps_its_weight() -> None:
    # Every factor says nothing (0.5 on a success): every active one takes the same
    # loss, so nothing has been learned and nothing should move; causal is off.
    start = initial_weights(BASE)
    weights = start
    for _ in range(20):
        observation = seen(True, **{n: 0.5 for n in LEARNED_FACTORS})
        weights = hedge_update(weights, [observation], start, active=ALL - {"causal"})
    assert weights.weight("causal") == pytest.approx(start.weight("causal"), abs=1e-6)
    back = rerank_weights(BASE, weights, causal=False)
    assert back.prior_share == pytest.approx(BASE.prior_share, abs=1e-6)


# --- determinism and the sum -----------------------------------------------------------


def _observations(rng: random.Random) -> list[Observation]:
    return [
        Observation({n: rng.random() for n in LEARNED_FACTORS}, rng.random() < 0.5)
        for _ in range(rng.randint(1, 6))
    ]


@pytest.mark.parametrize("seed", range(12))
def test_steps_sum_to_one_and_repeat_exactly(seed: int) -> None:
    rng = random.Random(seed)
    start = initial_weights(BASE)
    runs = [_observations(rng) for _ in range(15)]
    active = ALL if seed % 2 else ALL - {"causal"}
    first = start
    second = start
    for observations in runs:
        first = hedge_update(first, observations, start, active=active)
        second = hedge_update(second, list(observations), start, active=active)
        assert math.isclose(sum(w for _, w in first.weights), 1.0, abs_tol=1e-8)
        assert all(w >= 0.0 for _, w in first.weights)
        assert first.weight("relevance") >= DEFAULT_HEDGE_POLICY.relevance_floor - 1e-9
    assert first == second
    assert first.updates == 15
    # every weight is rounded to 9 decimals (what a replay stores and reads back)
    assert all(round(w, 9) == w for _, w in first.weights)


def test_observations_count_by_their_weight() -> None:
    start = initial_weights(BASE)
    alone = hedge_update(start, [seen(True, quality=1.0)], start)
    # a weight-0 observation counts nothing
    ignored = Observation({"quality": 0.0}, True, 0.0)
    assert hedge_update(start, [seen(True, quality=1.0), ignored], start) == alone
    # weights 3 and 1: quality's mean loss (3·0 + 1·1) / 4 = 0.25, the same as four
    # equal observations, three right and one wrong
    weighted = [Observation({"quality": 1.0}, True, 3.0), Observation({"quality": 0.0}, True)]
    equal = [seen(True, quality=1.0)] * 3 + [seen(True, quality=0.0)]
    assert hedge_update(start, weighted, start) == hedge_update(start, equal, start)
