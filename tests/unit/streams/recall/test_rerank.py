"""grimoire.streams.recall.rerank: hand-computed multi-factor scores, tie-breaks, dedupe."""

from __future__ import annotations

import pytest

from grimoire.streams.model.decay import DAY_MS
from grimoire.streams.model.field_state import Affect
from grimoire.streams.model.records import Kind
from grimoire.streams.recall.rerank import (
    DEFAULT_RECENCY_HALF_LIFE_MS,
    Candidate,
    RerankWeights,
    affect_congruence,
    recency,
    regime_match,
    rerank,
)

NOW = 1_700_000_000_000


def cand(memory_id: str, **overrides: object) -> Candidate:
    fields: dict[str, object] = {
        "memory_id": memory_id,
        "relevance": 1 / 61,
        "effective_confidence": 0.5,
        "quality": 0.5,
        "ts_ms": NOW,
        "regime": "bull",
    }
    fields.update(overrides)
    return Candidate(**fields)  # type: ignore[arg-type]


def test_default_weights() -> None:
    w = RerankWeights()
    assert (w.prior_share, w.effective_confidence, w.quality, w.recency, w.regime_match) == (
        0.30,
        0.25,
        0.20,
        0.15,
        0.10,
    )
    assert (w.affect, w.lineage_boost) == (0.0, 1.2)
    assert DEFAULT_RECENCY_HALF_LIFE_MS == 7 * DAY_MS


def test_hand_computed_scores_and_order() -> None:
    week = 7 * DAY_MS
    a = cand("a", effective_confidence=0.8, quality=0.6)
    # relevance 1/122 -> 0.5 of max; one recency half-life old; unknown regime -> 0.5.
    b = cand("b", relevance=1 / 122, ts_ms=NOW - week, regime="")
    # lineage: a tenth of the best relevance, two half-lives old, other regime, x1.2.
    c = cand("c", relevance=0.1 / 61, ts_ms=NOW - 2 * week, regime="bear", provenance="predecessor")
    out = rerank([c, b, a], now_ms=NOW, regime="bull")
    assert [s.memory_id for s in out] == ["a", "b", "c"]
    by_id = {s.memory_id: s for s in out}
    # a: prior (.25*.8 + .20*.6 + .15*1 + .10*1) / .70 = .57/.70; score 1 * (.7 + .3*prior)
    assert by_id["a"].factors.prior == pytest.approx(0.57 / 0.70)
    assert by_id["a"].score == pytest.approx(0.7 + 0.3 * 0.57 / 0.70)
    # b: every prior 0.5, relevance 0.5 -> 0.5 * (.7 + .15)
    assert by_id["b"].score == pytest.approx(0.5 * 0.85)
    # c: prior (.25*.5 + .20*.5 + .15*.25 + 0) / .70; 1.2 * 0.1 * (.7 + .3*prior)
    c_prior = 0.2625 / 0.70
    assert by_id["c"].score == pytest.approx(1.2 * 0.1 * (0.7 + 0.3 * c_prior))
    f = by_id["c"].factors
    assert (f.relevance, f.recency, f.regime_match, f.boost) == pytest.approx((0.1, 0.25, 0.0, 1.2))
    assert by_id["b"].factors.as_dict() == pytest.approx(
        {
            "relevance": 0.5,
            "prior": 0.5,
            "effective_confidence": 0.5,
            "quality": 0.5,
            "recency": 0.5,
            "regime_match": 0.5,
            "affect": 0.5,
            # no run record: the Beta(1, 1) mean; causal utility (.4*.5 + 0 + .5 + .1) / 1.5
            "outcome": 0.5,
            "causal": 0.8 / 1.5,
            "boost": 1.0,
            "outcome_boost": 1.0,  # no outcome bias in the static weights
        }
    )


def test_priors_order_equally_relevant_memories_but_never_promote_unrelated_ones() -> None:
    fresh = cand("fresh", effective_confidence=1.0, quality=1.0)
    stale = cand("stale", effective_confidence=0.1, quality=0.1, ts_ms=NOW - 60 * DAY_MS)
    assert [s.memory_id for s in rerank([stale, fresh], now_ms=NOW)] == ["fresh", "stale"]
    # Every prior at its best cannot lift 0.6 of the relevance over 0.9 of it
    # with the worst priors: the priors scale relevance by at most 30 %.
    weak = cand("weak", relevance=0.6, effective_confidence=1.0, quality=1.0, regime="bull")
    strong = cand(
        "strong", relevance=0.9, effective_confidence=0.0, quality=0.0, ts_ms=NOW - 365 * DAY_MS
    )
    out = rerank([weak, strong], now_ms=NOW, regime="bull")
    assert [s.memory_id for s in out] == ["strong", "weak"]
    # prior_share 0 ranks on relevance alone; 1 lets the priors scale it to nothing.
    alone = rerank([weak, strong], now_ms=NOW, regime="bull", weights=RerankWeights(prior_share=0))
    assert [s.score for s in alone] == pytest.approx([1.0, 0.6 / 0.9])
    with pytest.raises(ValueError):
        RerankWeights(prior_share=1.5)


def test_bloodstain_boost_can_reorder() -> None:
    plain = cand("a")
    stain = cand("b", provenance="bloodstain")
    out = rerank([plain, stain], now_ms=NOW, regime="bull")
    assert [s.memory_id for s in out] == ["b", "a"]
    assert out[0].score == pytest.approx(1.2 * out[1].score)


def test_equal_scores_tie_break_on_id() -> None:
    out = rerank([cand("m2"), cand("m10"), cand("m1")], now_ms=NOW, regime="bull")
    assert [s.memory_id for s in out] == ["m1", "m10", "m2"]


def test_factors_are_clamped_and_future_timestamps_are_fresh() -> None:
    out = rerank(
        [cand("a", effective_confidence=1.7, quality=-0.2, ts_ms=NOW + 5_000)],
        now_ms=NOW,
        regime="bull",
    )
    f = out[0].factors
    assert (f.effective_confidence, f.quality, f.recency) == (1.0, 0.0, 1.0)


def test_zero_relevance_everywhere_and_empty_input() -> None:
    out = rerank([cand("a", relevance=0.0)], now_ms=NOW, regime="bull")
    assert out[0].factors.relevance == 0.0
    assert rerank([], now_ms=NOW) == []


def test_regime_match_values() -> None:
    assert regime_match("bull", "bull") == 1.0
    assert regime_match(" Bull", "bull") == 1.0
    assert regime_match("bull", "bear") == 0.0
    assert regime_match("", "bear") == 0.5
    assert regime_match("bull", "") == 0.5


def test_recency_values() -> None:
    assert recency(0, 100) == 1.0
    assert recency(100, 100) == 0.5
    assert recency(-50, 100) == 1.0
    with pytest.raises(ValueError):
        recency(1, 0)


def test_affect_congruence_and_weight() -> None:
    happy = Affect(pleasure=0.8, arousal=0.2)
    sad = Affect(pleasure=-0.8, arousal=-0.2)
    assert affect_congruence(happy, happy) == pytest.approx(1.0)
    assert affect_congruence(happy, sad) == pytest.approx(0.0)
    assert affect_congruence(None, happy) == 0.5
    assert affect_congruence(Affect(), happy) == 0.5
    weights = RerankWeights(affect=0.1)
    out = rerank(
        [cand("a", affect=sad), cand("b", affect=happy)],
        now_ms=NOW,
        regime="bull",
        affect=happy,
        weights=weights,
    )
    assert [s.memory_id for s in out] == ["b", "a"]
    # (.25*.5 + .20*.5 + .15*1 + .10*1 + .1*affect) / .8, affect 1 or 0
    assert out[0].factors.prior == pytest.approx(0.575 / 0.8)
    assert out[0].score == pytest.approx(0.7 + 0.3 * 0.575 / 0.8)
    assert out[1].score == pytest.approx(0.7 + 0.3 * 0.475 / 0.8)
    # the weight defaults to 0, so affect alone never reorders
    plain = rerank([cand("a", affect=sad), cand("b", affect=happy)], now_ms=NOW, affect=happy)
    assert [s.memory_id for s in plain] == ["a", "b"]


def test_dedupe_by_hash_prefers_summary_then_aggregate() -> None:
    strong_episode = cand("e", normalized_hash="h", effective_confidence=1.0)
    aggregate = cand("g", normalized_hash="h", kind=Kind.AGGREGATE, effective_confidence=0.1)
    summary = cand("s", normalized_hash="h", kind="summary", effective_confidence=0.0)
    out = rerank([strong_episode, aggregate, summary], now_ms=NOW, regime="bull")
    assert [s.memory_id for s in out] == ["s"]
    out = rerank([strong_episode, aggregate], now_ms=NOW, regime="bull")
    assert [s.memory_id for s in out] == ["g"]


def test_dedupe_by_hash_keeps_best_score_then_smallest_id() -> None:
    weak = cand("a", normalized_hash="h", quality=0.1)
    strong = cand("b", normalized_hash="h", quality=0.9)
    other = cand("c", normalized_hash="k")
    unhashed = [cand("x"), cand("y")]
    out = rerank([weak, strong, other, *unhashed], now_ms=NOW, regime="bull")
    assert sorted(s.memory_id for s in out) == ["b", "c", "x", "y"]
    tied = rerank([cand("z", normalized_hash="h"), cand("y", normalized_hash="h")], now_ms=NOW)
    assert [s.memory_id for s in tied] == ["y"]


def test_duplicate_id_keeps_best_and_relevance_normalised_before_dedupe() -> None:
    out = rerank([cand("a", relevance=0.02), cand("a", relevance=0.01)], now_ms=NOW, regime="bull")
    assert len(out) == 1
    assert out[0].factors.relevance == 1.0
    low_only = rerank(
        [
            cand("a", relevance=0.01),
            cand("b", relevance=0.02, normalized_hash="h"),
            cand("c", relevance=0.0, normalized_hash="h", kind=Kind.SUMMARY),
        ],
        now_ms=NOW,
        regime="bull",
    )
    assert {s.memory_id: s.factors.relevance for s in low_only} == {"a": 0.5, "c": 0.0}


def test_deterministic_regardless_of_input_order() -> None:
    items = [cand(f"m{i}", quality=(i % 3) / 3, relevance=1 / (61 + i % 4)) for i in range(12)]
    first = rerank(items, now_ms=NOW, regime="bull")
    second = rerank(list(reversed(items)), now_ms=NOW, regime="bull")
    assert first == second
