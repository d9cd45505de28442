"""grimoire.streams.write.admission: every factor and band, with hand-computed expectations."""

from __future__ import annotations

import pytest

from grimoire.streams.model.records import Kind
from grimoire.streams.write.admission import (
    Action,
    AdmissionCandidate,
    AdmissionPolicy,
    AdmissionWeights,
    NearMemory,
    decide,
    detect_contradiction,
    estimate_factual_confidence,
    estimate_future_utility,
    is_phatic,
    novelty,
    recency,
)

NOW = 1_700_000_000_000
HOUR = 3_600_000
DAY = 24 * HOUR
POLICY = AdmissionPolicy()


def cand(text: str = "the pool was rebalanced today", **kw: object) -> AdmissionCandidate:
    fields: dict[str, object] = {"kind": Kind.EPISODE, "text": text, "ts_ms": NOW}
    fields.update(kw)
    return AdmissionCandidate(**fields)  # type: ignore[arg-type]


def nb(similarity: float, confidence: float = 0.5, text: str = "", mid: str = "m1") -> NearMemory:
    return NearMemory(memory_id=mid, similarity=similarity, confidence=confidence, text=text)


# --- defaults ------------------------------------------------------------------------------


def test_default_weights_and_thresholds() -> None:
    w = AdmissionWeights()
    assert (w.future_utility, w.factual_confidence, w.novelty, w.recency, w.type_prior) == (
        0.25,
        0.25,
        0.20,
        0.15,
        0.15,
    )
    p = AdmissionPolicy()
    assert (p.reject_below, p.low_confidence_below, p.low_confidence) == (0.45, 0.55, 0.3)
    assert (p.aggregate_above, p.merge_above, p.off_topic_below) == (0.95, 0.90, 0.50)
    assert (p.quarantine_factual_below, p.high_confidence) == (0.3, 0.7)
    assert p.recency_half_life_ms == DAY


def test_invalid_configuration_is_refused() -> None:
    with pytest.raises(ValueError):
        AdmissionWeights(future_utility=0.5)  # sums to 1.25
    with pytest.raises(ValueError):
        AdmissionWeights(future_utility=-0.25, factual_confidence=0.75)
    with pytest.raises(ValueError):
        AdmissionPolicy(reject_below=0.6)
    with pytest.raises(ValueError):
        AdmissionPolicy(merge_above=0.97)
    with pytest.raises(ValueError):
        AdmissionPolicy(recency_half_life_ms=0)
    with pytest.raises(ValueError):
        cand(importance=1.5)
    with pytest.raises(ValueError):
        cand(key_count=-1)


# --- recency and novelty -------------------------------------------------------------------


def test_recency_half_life() -> None:
    assert recency(NOW, NOW, DAY) == 1.0
    assert recency(NOW - DAY, NOW, DAY) == 0.5
    assert recency(NOW - 2 * DAY, NOW, DAY) == 0.25
    assert recency(NOW - DAY // 2, NOW, DAY) == pytest.approx(2**-0.5, abs=1e-9)
    assert recency(NOW + HOUR, NOW, DAY) == 1.0  # future timestamp counts as now
    with pytest.raises(ValueError):
        recency(NOW, NOW, 0)


def test_novelty_from_nearest() -> None:
    assert novelty(None) == 1.0
    assert novelty(nb(0.8)) == 0.2
    assert novelty(nb(0.0)) == 1.0
    assert novelty(nb(1.2)) == 0.0  # clamped
    assert novelty(nb(-0.3)) == 1.0


# --- type priors and standard confidence ---------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "episode_type", "prior"),
    [
        (Kind.WARNING, "observation", 0.9),
        (Kind.CAUSAL_LINK, "observation", 0.7),
        (Kind.HEURISTIC, "observation", 0.6),
        (Kind.INSIGHT, "observation", 0.5),
        (Kind.STRATEGY_FRAGMENT, "observation", 0.4),
        (Kind.SUMMARY, "observation", 0.5),
        (Kind.AGGREGATE, "observation", 0.2),
        (Kind.EPISODE, "observation", 0.2),
        (Kind.EPISODE, "report", 0.2),
        (Kind.EPISODE, "coordination", 0.2),
        (Kind.EPISODE, "action", 0.4),
        (Kind.EPISODE, "regime_shift", 0.7),
        (Kind.EPISODE, "alert", 0.9),
        (Kind.EPISODE, "something_new", 0.2),
        (Kind.WARNING, "alert", 0.9),  # episode_type is ignored for other kinds
        (Kind.INSIGHT, "alert", 0.5),
    ],
)
def test_type_priors(kind: Kind, episode_type: str, prior: float) -> None:
    assert POLICY.type_priors.prior(kind, episode_type) == prior
    decision = decide(cand(kind=kind, episode_type=episode_type), nearest=None, now_ms=NOW)
    assert decision.factors.type_prior == prior


@pytest.mark.parametrize(
    ("kind", "confidence"),
    [
        (Kind.EPISODE, 0.6),
        (Kind.INSIGHT, 0.5),
        (Kind.HEURISTIC, 0.5),
        (Kind.WARNING, 0.7),
        (Kind.CAUSAL_LINK, 0.6),
        (Kind.STRATEGY_FRAGMENT, 0.5),
        (Kind.SUMMARY, 0.6),
        (Kind.AGGREGATE, 0.6),
    ],
)
def test_upper_band_admits_at_the_kinds_standard_confidence(kind: Kind, confidence: float) -> None:
    decision = decide(cand(kind=kind), nearest=None, now_ms=NOW, utility=1.0)
    assert decision.action is Action.ADMIT and decision.reason == "admitted"
    assert decision.confidence == confidence


# --- future utility --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        # routine heartbeat: 0.4·importance + observation 0.0 + one key
        (cand("heartbeat node healthy block 19000001", key_count=1), 0.4 * 0.5 + 0.0 + 0.025),
        (
            cand("gas spiked to 180 gwei", episode_type="alert", importance=0.8, key_count=2),
            0.4 * 0.8 + 0.25 + 0.025 * 2,
        ),
        (
            cand("volatility regime flipped to high", episode_type="regime_shift", importance=0.8),
            0.4 * 0.8 + 0.25,
        ),
        (cand("status report for the desk", episode_type="report"), 0.4 * 0.5 + 0.05),
        (cand("handing the hedge to agent b", episode_type="coordination"), 0.4 * 0.5 + 0.05),
        # error flag, keys capped at four
        (
            cand(
                "tool swap_exact_in returned nothing",
                episode_type="action",
                has_error=True,
                key_count=6,
            ),
            0.4 * 0.5 + 0.15 + 0.2 + 0.025 * 4,
        ),
        # error word in the text counts as error evidence
        (cand("quote request timed out after retry", episode_type="action"), 0.2 + 0.15 + 0.2),
        (cand("the swap reverted on chain again"), 0.2 + 0.2),
        # a healthy status line is not error evidence
        (cand("node healthy with no errors today"), 0.2),
        (cand("node healthy, 0 errors since start"), 0.2),
        # distilled kinds get the 0.15 type term whatever their episode_type says
        (cand("prefer limit orders in thin books", kind=Kind.HEURISTIC), 0.2 + 0.15),
        # short (< 4 words) and phatic, clamped at 0: 0.2 - 0.2 - 0.15 < 0
        (cand("ok thanks"), 0.0),
        (cand("pool drained"), 0.2 - 0.2),
        (cand("sounds good, let me look into that"), 0.2 - 0.15),
        # phatic words with a number are content, not chit-chat
        (cand("thanks, got 3 quotes back"), 0.2),
        (cand("x", importance=0.0, episode_type="observation"), 0.0),
    ],
)
def test_future_utility_estimator(candidate: AdmissionCandidate, expected: float) -> None:
    assert estimate_future_utility(candidate) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize(
    ("text", "phatic"),
    [
        ("ok thanks", True),
        ("Thanks so much, see you soon!", True),
        ("sounds good, let me look into that", True),
        # a courtesy opening a substantive line is content
        ("Thanks, Mel! My grandma gave me this necklace in Sweden", False),
        ("Hey Jon! Started a dance studio downtown after losing my job", False),
        ("the pool was rebalanced today", False),
    ],
)
def test_is_phatic_needs_courtesy_and_little_else(text: str, phatic: bool) -> None:
    assert is_phatic(text) is phatic


def test_future_utility_stays_within_unit_interval() -> None:
    strongest = cand(
        "liquidation cascade failed over 3 venues",
        episode_type="alert",
        importance=1.0,
        has_error=True,
        key_count=9,
    )
    assert estimate_future_utility(strongest) == pytest.approx(0.4 + 0.25 + 0.2 + 0.1)
    assert decide(strongest, nearest=None, now_ms=NOW, utility=1.7).factors.future_utility == 1.0
    assert decide(strongest, nearest=None, now_ms=NOW, utility=-2).factors.future_utility == 0.0


# --- factual confidence ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("the pool was rebalanced today", 0.4),
        ("the pool was rebalanced at 14:00", 0.4 + 0.2),
        ("sent from 0xabcdef12 to the vault", 0.4 + 0.2),
        ("see https://example.org/status for details", 0.4 + 0.2),
        ("config lives in /etc/grimoire/app.yaml", 0.4 + 0.2),
    ],
)
def test_factual_confidence_without_neighbour(text: str, expected: float) -> None:
    assert estimate_factual_confidence(cand(text), None, None, POLICY) == pytest.approx(expected)


def test_factual_confidence_alignment_boost_is_on_topic_only() -> None:
    c = cand()
    assert estimate_factual_confidence(c, nb(0.8, 0.5), None, POLICY) == pytest.approx(
        0.4 + 0.2 * 0.8 * 0.5
    )
    assert estimate_factual_confidence(c, nb(0.5, 0.6), None, POLICY) == pytest.approx(
        0.4 + 0.2 * 0.5 * 0.6
    )
    assert estimate_factual_confidence(c, nb(0.49, 0.9), None, POLICY) == 0.4


def test_factual_confidence_contradiction_penalty() -> None:
    bare, grounded = cand(), cand("block 19000050 shows the opposite")
    assert estimate_factual_confidence(bare, nb(0.9), nb(0.9, 0.8), POLICY) == pytest.approx(
        0.4 - 0.4 * 0.8
    )
    assert estimate_factual_confidence(grounded, nb(0.9), nb(0.9, 0.8), POLICY) == pytest.approx(
        0.6 - 0.4 * 0.8
    )
    assert estimate_factual_confidence(bare, nb(0.9), nb(0.9, 1.0), POLICY) == 0.0  # clamped


# --- contradiction ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "other", "similarity", "expected"),
    [
        ("the bridge is not safe", "the bridge is safe", 0.9, True),
        ("the bridge is safe", "the bridge is not safe", 0.9, True),
        ("the bridge is not safe", "the bridge is safe", 0.8, True),  # inclusive edge
        ("the bridge is not safe", "the bridge is safe", 0.79, False),
        ("the feed isn't stale", "the feed is stale", 0.9, True),
        ("the bridge is never safe", "the bridge is no longer safe", 0.9, False),  # both negated
        ("the swap succeeded", "the swap failed", 0.85, True),
        ("gas fell after the fork", "gas rose after the fork", 0.85, True),
        ("gas rose after the fork", "gas did not fall after the fork", 0.85, False),  # 2 flips
        ("price increased", "price increased again", 0.95, False),
        ("the bridge is unsafe", "the bridge is safe", 0.9, True),
    ],
)
def test_detect_contradiction(text: str, other: str, similarity: float, expected: bool) -> None:
    assert detect_contradiction(text, nb(similarity, text=other), POLICY) is expected


# --- decide: composite bands -----------------------------------------------------------------

# Neighbour at 0.8 with the same wording, confidence 0.5; fresh observation, no evidence:
# F = 0.4 + 0.2·0.8·0.5 = 0.48, N = 0.2, R = 1.0, P = 0.2, so
# composite = 0.25·U + 0.25·0.48 + 0.20·0.2 + 0.15·1.0 + 0.15·0.2 = 0.25·U + 0.34.
BAND_TEXT = "the pool was rebalanced today"
BAND_NEIGHBOUR = nb(0.8, 0.5, BAND_TEXT)


@pytest.mark.parametrize(
    ("utility", "composite", "action", "reason", "confidence"),
    [
        (0.0, 0.25 * 0.0 + 0.34, Action.REJECT, "below_threshold", 0.0),
        (0.43, 0.25 * 0.43 + 0.34, Action.REJECT, "below_threshold", 0.0),
        (0.44, 0.25 * 0.44 + 0.34, Action.ADMIT, "admitted_low_confidence", 0.3),  # = 0.45
        (0.6, 0.25 * 0.6 + 0.34, Action.ADMIT, "admitted_low_confidence", 0.3),
        (0.84, 0.25 * 0.84 + 0.34, Action.ADMIT, "admitted_low_confidence", 0.3),  # = 0.55
        (0.85, 0.25 * 0.85 + 0.34, Action.ADMIT, "admitted", 0.6),
        (1.0, 0.25 * 1.0 + 0.34, Action.ADMIT, "admitted", 0.6),
    ],
)
def test_composite_bands(
    utility: float, composite: float, action: Action, reason: str, confidence: float
) -> None:
    d = decide(cand(BAND_TEXT), nearest=BAND_NEIGHBOUR, now_ms=NOW, utility=utility)
    assert d.composite == pytest.approx(composite, abs=1e-9)
    assert (d.action, d.reason, d.confidence) == (action, reason, confidence)
    assert d.target_id is None and d.contradicted_id is None and not d.off_topic


def test_band_edges_are_exact() -> None:
    at_reject = decide(cand(BAND_TEXT), nearest=BAND_NEIGHBOUR, now_ms=NOW, utility=0.44)
    at_upper = decide(cand(BAND_TEXT), nearest=BAND_NEIGHBOUR, now_ms=NOW, utility=0.84)
    assert at_reject.composite == 0.45
    assert at_upper.composite == 0.55


def test_full_composite_with_default_estimators() -> None:
    # Alert 12 h old (half a half-life), on-topic neighbour at 0.6 with confidence 0.6.
    text = "gas spiked to 180 gwei at block 19000031"
    c = cand(text, episode_type="alert", importance=0.8, key_count=2, ts_ms=NOW - 12 * HOUR)
    d = decide(c, nearest=nb(0.6, 0.6, "gas is elevated near block 19000020"), now_ms=NOW)
    u = 0.4 * 0.8 + 0.25 + 0.025 * 2
    f = 0.4 + 0.2 + 0.2 * 0.6 * 0.6
    expected = 0.25 * u + 0.25 * f + 0.20 * (1 - 0.6) + 0.15 * 2**-0.5 + 0.15 * 0.9
    assert d.factors.future_utility == pytest.approx(u)
    assert d.factors.factual_confidence == pytest.approx(f)
    assert d.factors.novelty == pytest.approx(0.4)
    assert d.factors.recency == pytest.approx(2**-0.5, abs=1e-9)
    assert d.factors.type_prior == 0.9
    assert d.composite == pytest.approx(expected, abs=1e-9)
    assert (d.action, d.reason, d.confidence) == (Action.ADMIT, "admitted", 0.6)


def test_empty_store_gives_full_novelty_and_no_off_topic_flag() -> None:
    # F = 0.4, N = 1.0, R = 1.0, P = 0.2: 0.25·0.2 + 0.25·0.4 + 0.2 + 0.15 + 0.03 = 0.53
    d = decide(cand(), nearest=None, now_ms=NOW)
    assert d.composite == pytest.approx(0.25 * 0.2 + 0.25 * 0.4 + 0.20 * 1.0 + 0.15 + 0.15 * 0.2)
    assert d.action is Action.ADMIT and d.reason == "admitted_low_confidence"
    assert not d.off_topic


def test_old_events_lose_recency() -> None:
    fresh = decide(cand(), nearest=None, now_ms=NOW)
    old = decide(cand(ts_ms=NOW - DAY), nearest=None, now_ms=NOW)
    assert old.factors.recency == 0.5
    assert fresh.composite - old.composite == pytest.approx(0.15 * (1.0 - 0.5))


# --- decide: novelty bands -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("similarity", "action", "reason"),
    [
        (0.99, Action.AGGREGATE, "duplicate"),
        (0.9500001, Action.AGGREGATE, "duplicate"),
        (0.95, Action.MERGE, "near_duplicate"),
        (0.9000001, Action.MERGE, "near_duplicate"),
    ],
)
def test_duplicates_aggregate_or_merge(similarity: float, action: Action, reason: str) -> None:
    d = decide(cand(BAND_TEXT), nearest=nb(similarity, 0.5, BAND_TEXT, "dup"), now_ms=NOW)
    assert (d.action, d.reason, d.target_id, d.confidence) == (action, reason, "dup", 0.0)


def test_duplicates_win_over_a_high_composite() -> None:
    d = decide(cand(BAND_TEXT), nearest=nb(0.97, 0.5, BAND_TEXT), now_ms=NOW, utility=1.0)
    assert d.action is Action.AGGREGATE


def test_similarity_of_exactly_090_is_not_a_merge() -> None:
    # F = 0.4 + 0.2·0.9·0.5 = 0.49, N = 0.1: composite = 0.25·U + 0.1225 + 0.02 + 0.15 + 0.03
    d = decide(cand(BAND_TEXT), nearest=nb(0.90, 0.5, BAND_TEXT), now_ms=NOW, utility=1.0)
    assert d.composite == pytest.approx(0.25 * 1.0 + 0.25 * 0.49 + 0.20 * 0.1 + 0.15 + 0.03)
    assert (d.action, d.reason) == (Action.ADMIT, "admitted")


@pytest.mark.parametrize(
    ("similarity", "off_topic"), [(0.2, True), (0.4999, True), (0.5, False), (0.7, False)]
)
def test_off_topic_is_a_flag_only(similarity: float, off_topic: bool) -> None:
    alert = cand("bridge paused all withdrawals", episode_type="alert", importance=0.9, key_count=2)
    d = decide(alert, nearest=nb(similarity, 0.5, "unrelated"), now_ms=NOW)
    assert d.off_topic is off_topic
    assert d.action is Action.ADMIT  # an off-topic alert still goes through the composite


def test_off_topic_chit_chat_is_rejected_on_its_score() -> None:
    # U = 0, F = 0.4, N = 0.7: 0 + 0.1 + 0.14 + 0.15 + 0.03 = 0.42
    d = decide(cand("ok thanks"), nearest=nb(0.3, 0.5, "gas report"), now_ms=NOW)
    assert d.composite == pytest.approx(0.25 * 0.0 + 0.25 * 0.4 + 0.20 * 0.7 + 0.15 + 0.03)
    assert (d.action, d.off_topic) == (Action.REJECT, True)


# --- decide: quarantine ----------------------------------------------------------------------

SAFE = "the bridge is safe to use"
NOT_SAFE = "the bridge is not safe to use"


def test_low_confidence_contradiction_of_a_high_confidence_entry_is_quarantined() -> None:
    d = decide(cand(NOT_SAFE), nearest=nb(0.92, 0.8, SAFE, "belief"), now_ms=NOW)
    assert (d.action, d.reason, d.target_id) == (Action.QUARANTINE, "contradiction", "belief")
    assert d.contradicted_id == "belief"
    assert d.factors.factual_confidence == pytest.approx(0.4 - 0.4 * 0.8)
    assert d.confidence == d.factors.factual_confidence
    assert d.factors.novelty == 1.0  # the opposite claim is new information


def test_high_confidence_boundary_is_inclusive() -> None:
    d = decide(cand(NOT_SAFE), nearest=nb(0.92, 0.7, SAFE), now_ms=NOW)
    assert d.action is Action.QUARANTINE
    below = decide(cand(NOT_SAFE), nearest=nb(0.92, 0.69, SAFE), now_ms=NOW)
    assert below.action is not Action.QUARANTINE


def test_contradicting_a_low_confidence_entry_is_scored_not_merged() -> None:
    # Similarity 0.92 would merge, but a contradiction must not reinforce what it denies.
    # U = 0.2, F = 0.4 - 0.4·0.6 = 0.16, N = 1.0: 0.05 + 0.04 + 0.2 + 0.15 + 0.03 = 0.47
    d = decide(cand(NOT_SAFE), nearest=nb(0.92, 0.6, SAFE, "weak"), now_ms=NOW)
    assert d.composite == pytest.approx(0.25 * 0.2 + 0.25 * 0.16 + 0.20 * 1.0 + 0.15 + 0.03)
    assert (d.action, d.reason, d.confidence) == (Action.ADMIT, "admitted_low_confidence", 0.3)
    assert d.contradicted_id == "weak" and d.target_id is None


def test_grounded_contradiction_is_not_quarantined() -> None:
    # Evidence lifts F to 0.6 - 0.4·0.7 = 0.32 >= 0.3: new evidence, the curator downvotes.
    text = "the bridge is not safe: exploit at block 19000050"
    d = decide(cand(text, key_count=2), nearest=nb(0.88, 0.7, SAFE, "belief"), now_ms=NOW)
    assert d.factors.factual_confidence == pytest.approx(0.6 - 0.4 * 0.7)
    assert d.action is Action.ADMIT and d.contradicted_id == "belief"


def test_factual_confidence_of_exactly_03_is_not_quarantined() -> None:
    text = "the bridge is not safe since block 19000050"
    d = decide(cand(text), nearest=nb(0.9, 0.75, SAFE), now_ms=NOW)
    assert d.factors.factual_confidence == 0.3  # 0.6 - 0.4·0.75
    assert d.action is not Action.QUARANTINE


def test_quarantine_wins_over_duplicates() -> None:
    d = decide(cand(NOT_SAFE), nearest=nb(0.97, 0.9, SAFE), now_ms=NOW)
    assert d.action is Action.QUARANTINE


# --- determinism and the realistic stream ----------------------------------------------------


def test_decisions_are_deterministic_values() -> None:
    c = cand("gas spiked to 180 gwei", episode_type="alert", key_count=2)
    n = nb(0.7, 0.6, "gas is elevated")
    first, second = decide(c, nearest=n, now_ms=NOW), decide(c, nearest=n, now_ms=NOW)
    assert first == second and hash(first) == hash(second)


def ep(text: str, episode_type: str = "observation", **kw: object) -> AdmissionCandidate:
    return cand(text, episode_type=episode_type, ts_ms=NOW - 60_000, **kw)


def test_realistic_stream_admits_between_40_and_60_percent() -> None:
    hb = "heartbeat: node healthy, block {}, peers {}, no errors"
    # (candidate, similarity of the nearest memory, its text when it differs): neighbours
    # repeat the candidate's wording, so the only contradiction is the one written out.
    stream: list[tuple[AdmissionCandidate, float, str | None]] = [
        (ep(hb.format(19000001, 12), key_count=1), 0.97, None),
        (ep(hb.format(19000002, 12), key_count=1), 0.96, None),
        (ep(hb.format(19000005, 11), key_count=1), 0.93, None),
        (ep("heartbeat: node healthy, block 19000009, mempool 4120", key_count=1), 0.88, None),
        (ep("heartbeat: node healthy, block 19000014, mempool 3900", key_count=1), 0.86, None),
        (ep("heartbeat: node healthy, block 19000020, gas 31 gwei", key_count=1), 0.82, None),
        (ep("status check complete, all services nominal"), 0.80, None),
        (ep("polling price feed, nothing new", key_count=1), 0.78, None),
        (ep("ok thanks"), 0.30, None),
        (ep("sounds good, let me look into that for you"), 0.35, None),
        (
            ep("gas spiked to 180 gwei at block 19000031", "alert", importance=0.8, key_count=2),
            0.62,
            None,
        ),
        (
            ep(
                "ETH/USDC pool liquidity dropped 40% in 3 blocks",
                "alert",
                importance=0.9,
                key_count=2,
            ),
            0.55,
            None,
        ),
        (
            ep(
                "volatility regime changed to high, 30d realized vol 85%",
                "regime_shift",
                importance=0.8,
                key_count=2,
            ),
            0.58,
            None,
        ),
        (
            ep(
                "tool swap_exact_in failed: execution reverted, slippage 1.2%",
                "action",
                key_count=3,
                has_error=True,
            ),
            0.66,
            None,
        ),
        (
            ep(
                "tool fetch_quotes failed: timeout after 5000 ms",
                "action",
                key_count=3,
                has_error=True,
            ),
            0.70,
            None,
        ),
        (
            ep("rebalanced: sold 2.5 ETH for 8400 USDC at block 19000040", "action", key_count=3),
            0.60,
            None,
        ),
        (ep("funding rates on perps turned negative across three venues", key_count=2), 0.52, None),
        (ep("report: daily pnl +1.8%, 14 trades, 2 failed", "report", key_count=2), 0.75, None),
        (
            cand(
                "When gas exceeds 150 gwei, delay non-urgent swaps by 10 blocks",
                kind=Kind.HEURISTIC,
                key_count=2,
            ),
            0.65,
            None,
        ),
        (ep("the bridge is not safe to use"), 0.91, "the bridge is safe to use"),
    ]
    decisions = []
    for candidate, similarity, other in stream:
        neighbour = nb(similarity, 0.8 if other else 0.6, other or candidate.text)
        decisions.append(decide(candidate, nearest=neighbour, now_ms=NOW))
    admitted = [d for d in decisions if d.action is Action.ADMIT]
    assert 0.40 <= len(admitted) / len(stream) <= 0.60
    # Heartbeats and chit-chat never become new records; alerts, errors, actions do.
    assert all(d.action is not Action.ADMIT for d in decisions[:10])
    assert all(d.action is Action.ADMIT for d in decisions[10:16])
    assert [d.action for d in decisions[:3]] == [Action.AGGREGATE, Action.AGGREGATE, Action.MERGE]
    assert decisions[-1].action is Action.QUARANTINE
