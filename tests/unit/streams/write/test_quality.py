"""grimoire.streams.write.quality: each dimension, each red flag, totals computed by hand."""

from __future__ import annotations

import pytest

from grimoire.streams.model.records import Kind
from grimoire.streams.write.quality import (
    NEUTRAL_CONSISTENCY,
    RED_FLAGS,
    QualityWeights,
    actionability,
    red_flags,
    score_importance,
    score_quality,
    specificity,
    verifiability,
)

TX = "0x" + "ab" * 32
ADDRESS = "0x" + "cd" * 20


def test_defaults() -> None:
    w = QualityWeights()
    assert (w.specificity, w.actionability, w.novelty, w.verifiability, w.consistency) == (
        0.25,
        0.25,
        0.20,
        0.15,
        0.15,
    )
    assert w.red_flag_penalty == 0.1
    assert NEUTRAL_CONSISTENCY == 0.5
    assert tuple(RED_FLAGS) == (
        "empty_rhetoric",
        "weasel_words",
        "unverified_causal",
        "self_praise",
        "tautology",
    )


# --- specificity -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "token",
    [
        "https://etherscan.io/tx/123",  # one URL, its digits not counted again
        TX,
        ADDRESS,
        "2024-05-01T12:00:00Z",
        "12:30",
        "/var/log/grimoire/app.log",
        "9f86d081884c7d659a2feaa0c55ad015",
        "42",
        "3.5%",
        "$1,200",
        "swap_exact_in",
        "rebalance()",
    ],
)
def test_each_concrete_token_counts_once(token: str) -> None:
    assert specificity(f"see {token} here") == 1 / 4


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("the market moved", 0.0),
        ("gas 45 gwei at block 19000000", 2 / 4),
        ("gas 45 gwei at block 19000000 with 12 peers at 14:02", 4 / 4),
        ("1 2 3 4 5 6 7", 1.0),  # saturates at four
        ("gas 45 gwei at block 19000000 with 12 peers at 14:02, maybe", 4 / 4 - 0.25),
        ("maybe it might work, perhaps", 0.0),  # clamped, not negative
        ("it seems gas was probably 45 gwei", 1 / 4 - 0.25 * 2),
        ("i think the pool is somewhat thin", 0.0),
    ],
)
def test_specificity(text: str, expected: float) -> None:
    assert specificity(text) == pytest.approx(max(0.0, expected))


# --- actionability ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("the market was quiet", 0.0),
        ("if the pool drains then the price moves", 0.5),
        ("whenever the pool drains, the price moves", 0.5),
        ("operators should watch the logs", 0.3),
        ("avoid thin pools", 0.3),
        ("latency was above 300 ms", 0.2),
        ("when the feed is stale, pause trading", 0.5 + 0.3),
        ("If gas exceeds 150 gwei, delay non-urgent swaps", 0.5 + 0.3 + 0.2),
        ("if vol > 80% then reduce size, and never add more than 2 legs", 1.0),
    ],
)
def test_actionability(text: str, expected: float) -> None:
    assert actionability(text) == pytest.approx(expected)


# --- verifiability ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("nothing to check here", 0.0),
        (f"tx {TX} settled", 0.4),  # a tx hash is not also an address
        (f"sent to {ADDRESS} today", 0.3),
        ("it happened at block 19000000", 0.3),
        ("see https://example.org/status", 0.3),
        ("latency was 250 ms", 0.2),
        ("pool fell 40% overnight", 0.2),
        ("paid $1200 overall", 0.2),
        ("tool fetch_quotes returned: 3 quotes", 0.2),
        ("the job stopped with exit code 1", 0.2),
        (f"tx {TX} at block 19000000 paid 31 gwei", 0.9),  # 0.4 + 0.3 + 0.2
        (f"tx {TX} from {ADDRESS} at block 9, https://x.io, 5 ms, exit code 0", 1.0),  # 1.7
    ],
)
def test_verifiability(text: str, expected: float) -> None:
    assert verifiability(text) == expected  # exact: scores are rounded to 9 digits


# --- red flags -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("this strategy is a game-changer", "empty_rhetoric"),
        ("a revolutionary approach to hedging", "empty_rhetoric"),
        ("some say the pool is thin", "weasel_words"),
        ("many believe the peg holds", "weasel_words"),
        ("clearly the peg holds", "weasel_words"),
        ("obviously the peg holds", "weasel_words"),
        ("high gas always causes failed swaps", "unverified_causal"),
        ("this yield is guaranteed", "unverified_causal"),
        ("I am great at picking entries", "self_praise"),
        ("my brilliant hedge paid off", "self_praise"),
        ("it is what it is", "tautology"),
        ("a rule is a rule", "tautology"),
        ("boys will be boys", "tautology"),
    ],
)
def test_each_red_flag(text: str, code: str) -> None:
    assert red_flags(text) == (code,)
    plain = score_quality("the market was quiet", novelty=0.5)
    flagged = score_quality(text, novelty=0.5)
    # None of these texts scores on the rule-based dimensions, so only the flag differs.
    assert (flagged.specificity, flagged.actionability, flagged.verifiability) == (0, 0, 0)
    assert flagged.total == pytest.approx(plain.total - 0.1)
    assert flagged.red_flags == (code,)


def test_plain_statements_raise_no_flags() -> None:
    for text in ("the price is high", "gas rose because the mint drew demand", "it is late"):
        assert red_flags(text) == ()


def test_each_flag_counts_once_and_flags_add_up() -> None:
    assert red_flags("clearly, obviously, many believe it") == ("weasel_words",)
    two = score_quality("clearly this is a game-changer", novelty=1.0, consistency=1.0)
    assert two.red_flags == ("empty_rhetoric", "weasel_words")
    assert two.total == pytest.approx(0.20 * 1.0 + 0.15 * 1.0 - 0.1 * 2)


# --- totals and clamping ---------------------------------------------------------------------


def test_total_by_hand() -> None:
    q = score_quality("If gas exceeds 150 gwei, delay non-urgent swaps", novelty=0.5)
    # one concrete token, trigger + directive + threshold, one number with a unit
    assert (q.specificity, q.actionability, q.verifiability) == (0.25, 1.0, 0.2)
    assert (q.novelty, q.consistency, q.red_flags) == (0.5, 0.5, ())
    assert q.total == pytest.approx(0.25 * 0.25 + 0.25 * 1.0 + 0.20 * 0.5 + 0.15 * 0.2 + 0.15 * 0.5)


def test_consistency_is_passed_in_and_weights_can_change() -> None:
    q = score_quality("the market was quiet", novelty=0.2, consistency=1.0)
    assert q.total == pytest.approx(0.20 * 0.2 + 0.15 * 1.0)
    only_novelty = QualityWeights(0.0, 0.0, 1.0, 0.0, 0.0, red_flag_penalty=0.5)
    assert score_quality("clearly quiet", novelty=0.8, weights=only_novelty).total == (
        pytest.approx(0.8 - 0.5)
    )


def test_total_is_clamped_to_the_unit_interval() -> None:
    awful = "clearly a revolutionary game-changer, it is what it is, I am brilliant, guaranteed"
    q = score_quality(awful, novelty=0.0, consistency=0.0)
    assert len(q.red_flags) == 5 and q.total == 0.0
    best = (
        f"If gas exceeds 150 gwei at block 19000000, delay swaps: tx {TX} from {ADDRESS} "
        "https://etherscan.io/tx/1"
    )
    top = score_quality(best, novelty=1.0, consistency=1.0)
    assert (top.specificity, top.actionability, top.verifiability) == (1.0, 1.0, 1.0)
    assert top.total == 1.0
    clamped = score_quality("quiet", novelty=1.5, consistency=-0.2)
    assert (clamped.novelty, clamped.consistency) == (1.0, 0.0)


def test_scores_are_deterministic_values() -> None:
    text = "when the feed is stale for 30 s, pause trading"
    assert score_quality(text, novelty=0.3) == score_quality(text, novelty=0.3)
    assert hash(score_quality(text, novelty=0.3)) == hash(score_quality(text, novelty=0.3))


# --- importance ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("episode_type", "expected"),
    [
        ("observation", 0.3),
        ("report", 0.4),
        ("coordination", 0.4),
        ("action", 0.5),
        ("regime_shift", 0.8),
        ("alert", 0.9),
        ("unheard_of", 0.3),
    ],
)
def test_importance_by_episode_type(episode_type: str, expected: float) -> None:
    assert score_importance(episode_type=episode_type) == expected


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (Kind.WARNING, 0.9),
        (Kind.CAUSAL_LINK, 0.7),
        (Kind.HEURISTIC, 0.7),
        (Kind.INSIGHT, 0.6),
        (Kind.STRATEGY_FRAGMENT, 0.5),
        (Kind.SUMMARY, 0.5),
        (Kind.AGGREGATE, 0.3),
    ],
)
def test_importance_by_kind(kind: Kind, expected: float) -> None:
    assert score_importance(kind=kind, episode_type="alert") == expected


def test_explicit_importance_wins_and_errors_set_a_floor() -> None:
    assert score_importance(episode_type="alert", explicit=0.2) == 0.2
    assert score_importance(explicit=1.5) == 1.0
    assert score_importance(explicit=0.2, has_error=True) == 0.7
    assert score_importance(explicit=0.95, has_error=True) == 0.95
    assert score_importance(episode_type="action", has_error=True) == 0.7
    assert score_importance(episode_type="alert", has_error=True) == 0.9
