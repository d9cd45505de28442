"""grimoire.streams.model.field_state: field state advanced in event time, eidolon digests.

H is the focus half-life: a weight one H old counts 0.5, two H old 0.25.
"""

from __future__ import annotations

import pytest

from grimoire.streams.model.field_state import (
    DEFAULT_FOCUS_HALF_LIFE_MS,
    Affect,
    FieldState,
    FieldUpdate,
    advance,
    advance_all,
)

H = DEFAULT_FOCUS_HALF_LIFE_MS
T0 = 1_767_225_600_000
AGENT = "agent-1"


def start() -> FieldState:
    return advance(
        FieldState(AGENT),
        FieldUpdate(
            ts_ms=T0,
            keys=("err:timeout", "tool:swap"),
            tick=5,
            block=100,
            regime="calm",
            affect=Affect(pleasure=0.5),
        ),
    )


def test_the_first_event_sets_everything() -> None:
    assert start() == FieldState(
        agent_id=AGENT,
        watermark_ms=T0,
        tick=5,
        block=100,
        regime="calm",
        affect=Affect(pleasure=0.5),
        focus=(("err:timeout", 1.0), ("tool:swap", 1.0)),
    )


def test_weights_decay_by_half_per_half_life() -> None:
    state = advance(start(), FieldUpdate(ts_ms=T0 + H, keys=("err:timeout",), tick=4))
    # 1·0.5 + 1 for the repeated key, 1·0.5 for the other
    assert state.focus == (("err:timeout", 1.5), ("tool:swap", 0.5))
    assert state.watermark_ms == T0 + H
    assert state.tick == 5  # the highest tick seen, not the latest
    assert state.block == 100  # no block in the update: kept
    assert (state.regime, state.affect) == ("calm", Affect(pleasure=0.5))  # nothing new said


def test_decay_is_rounded_to_nine_digits() -> None:
    state = advance(start(), FieldUpdate(ts_ms=T0 + H // 2))
    # 2^(-1/2) = 0.70710678118...
    assert state.focus == (("err:timeout", 0.707106781), ("tool:swap", 0.707106781))


def test_a_custom_half_life() -> None:
    state = advance(start(), FieldUpdate(ts_ms=T0 + 2_000), half_life_ms=1_000)
    assert state.focus == (("err:timeout", 0.25), ("tool:swap", 0.25))


def test_a_late_event_adds_decayed_weight_and_keeps_the_clock() -> None:
    now = advance(start(), FieldUpdate(ts_ms=T0 + 2 * H))  # weights 0.25 each
    late = advance(
        now,
        FieldUpdate(
            ts_ms=T0 + H,  # one half-life behind the watermark
            keys=("path:/etc/x", "tool:swap"),
            tick=9,
            regime="storm",
            affect=Affect(pleasure=-0.9),
        ),
    )
    assert late.watermark_ms == T0 + 2 * H
    assert late.focus == (("err:timeout", 0.25), ("path:/etc/x", 0.5), ("tool:swap", 0.75))
    # Regime and affect only come from events at or after the watermark; ticks are a max.
    assert (late.regime, late.affect) == ("calm", Affect(pleasure=0.5))
    assert late.tick == 9


def test_an_event_at_the_watermark_counts_as_newer() -> None:
    state = advance(
        start(), FieldUpdate(ts_ms=T0, keys=("tool:swap",), regime="storm", affect=Affect())
    )
    assert state.focus == (("err:timeout", 1.0), ("tool:swap", 2.0))  # no decay
    assert (state.regime, state.affect) == ("storm", Affect())


def test_an_empty_regime_or_missing_affect_keeps_the_current_one() -> None:
    state = advance(start(), FieldUpdate(ts_ms=T0 + 1, regime="", affect=None))
    assert (state.regime, state.affect) == ("calm", Affect(pleasure=0.5))


def test_a_key_repeated_in_one_event_counts_once() -> None:
    state = advance(FieldState(AGENT), FieldUpdate(ts_ms=T0, keys=("tag:x", "tag:x")))
    assert state.focus == (("tag:x", 1.0),)


def test_only_the_heaviest_keys_are_tracked() -> None:
    state = advance(FieldState(AGENT), FieldUpdate(ts_ms=T0, keys=("tag:b", "tag:c")), max_keys=2)
    state = advance(state, FieldUpdate(ts_ms=T0, keys=("tag:b", "tag:a")), max_keys=2)
    # b = 2, then a and c tie at 1 and a wins on the key
    assert state.focus == (("tag:a", 1.0), ("tag:b", 2.0))


# --- digest --------------------------------------------------------------------------


def test_digest_orders_by_weight_then_key() -> None:
    state = FieldState(
        AGENT,
        focus=(("err:timeout", 1.5), ("path:/etc/x", 0.5), ("tag:a", 2.0), ("tool:swap", 0.5)),
    )
    assert state.digest() == ("tag:a", "err:timeout", "path:/etc/x", "tool:swap")
    assert state.digest(2) == ("tag:a", "err:timeout")


def test_digest_keeps_eight_keys_by_default() -> None:
    state = FieldState(AGENT, focus=tuple((f"tag:k{i}", float(i)) for i in range(10)))
    assert state.digest() == tuple(f"tag:k{i}" for i in range(9, 1, -1))


def test_digest_parts_format() -> None:
    state = FieldState(
        AGENT,
        regime="storm",
        affect=Affect(
            pleasure=0.5,
            arousal=-0.5,
            dominance=0.1,
            drives=(("SEEKING", 0.8), ("CARE", 0.8), ("RAGE", 0.9), ("PLAY", 0.4)),
        ),
        focus=(("err:timeout", 1.5), ("path:/etc/x", 0.5), ("tool:swap", 0.5)),
    )
    # Paths do not condition the vector; the chosen keys are named alphabetically.
    assert state.digest_parts() == (
        "regime storm",
        "swap",
        "timeout",
        "mood pleased calm rage care",
    )
    assert state.digest_parts(1) == ("regime storm", "timeout", "mood pleased calm rage care")


def test_digest_parts_ignore_ids_and_weight_order() -> None:
    state = FieldState(
        AGENT,
        focus=(
            ("session:s-1", 9.0),
            ("run:r-7", 8.0),
            ("entity:eth", 1.0),
            ("tool:swap", 3.0),
            ("tag:ops/deploy", 2.0),
        ),
    )
    assert state.digest_parts() == ("eth", "ops/deploy", "swap")
    reweighted = FieldState(
        AGENT, focus=(("entity:eth", 5.0), ("tool:swap", 1.0), ("tag:ops/deploy", 2.0))
    )
    assert reweighted.digest_parts() == state.digest_parts()


def test_digest_parts_leave_out_empty_parts() -> None:
    assert FieldState(AGENT).digest_parts() == ()
    assert FieldState(AGENT, focus=(("tag:ops/disk", 1.0),)).digest_parts() == ("ops/disk",)
    assert FieldState(AGENT, affect=Affect(dominance=0.34)).digest_parts() == ("mood in control",)


def test_digest_parts_keep_their_order_at_any_size() -> None:
    state = FieldState(
        AGENT,
        regime="storm",
        affect=Affect(pleasure=0.5),
        focus=(("err:timeout", 1.5), ("path:/etc/x", 0.5), ("tool:swap", 0.5)),
    )
    assert state.digest_parts() == ("regime storm", "swap", "timeout", "mood pleased")
    assert state.digest_parts(1) == ("regime storm", "timeout", "mood pleased")


def test_a_key_under_two_types_is_one_part() -> None:
    state = FieldState(AGENT, focus=(("entity:eth", 2.0), ("tag:eth", 1.0), ("tool:swap", 1.5)))
    # Both eth keys are among the conditioning ones; eth weighs once in the vector.
    assert state.digest_parts() == ("eth", "swap")
    heavier = FieldState(AGENT, focus=(("entity:eth", 2.0), ("tag:eth", 1.9), ("tool:swap", 1.0)))
    assert heavier.digest_parts(2) == ("eth",)


def test_a_state_changing_one_key_shares_the_other_parts() -> None:
    before = FieldState(AGENT, regime="calm", focus=(("tag:a", 3.0), ("tag:b", 2.0)))
    after = advance(before, FieldUpdate(ts_ms=T0, keys=("tag:c",)))
    assert before.digest_parts() != after.digest_parts()
    assert set(before.digest_parts()) & set(after.digest_parts()) == {"regime calm", "a", "b"}


@pytest.mark.parametrize(
    ("affect", "words"),
    [
        (Affect(), ""),
        (Affect(pleasure=0.34), "pleased"),
        (Affect(pleasure=0.33), ""),
        (Affect(pleasure=-0.34), "unhappy"),
        (Affect(arousal=0.9, dominance=-0.9), "excited submissive"),
        (Affect(drives=(("SEEKING", 0.5), ("FEAR", 0.49))), "seeking"),
    ],
)
def test_affect_words(affect: Affect, words: str) -> None:
    assert affect.describe() == words


def test_advancing_is_deterministic_and_order_of_keys_is_irrelevant() -> None:
    updates = [
        FieldUpdate(ts_ms=T0, keys=("tag:a", "tag:b"), regime="calm"),
        FieldUpdate(ts_ms=T0 + 10_000, keys=("tag:b",), affect=Affect(arousal=0.6)),
        FieldUpdate(ts_ms=T0 + 5_000, keys=("tag:c",), regime="late"),
    ]
    first = advance_all(FieldState(AGENT), updates)
    assert advance_all(FieldState(AGENT), updates) == first
    swapped = [FieldUpdate(ts_ms=T0, keys=("tag:b", "tag:a"), regime="calm"), *updates[1:]]
    assert advance_all(FieldState(AGENT), swapped) == first
    assert first.regime == "calm"
    # a decayed over 10 s, the late c only over the 5 s it is behind: b > c > a
    assert first.digest() == ("tag:b", "tag:c", "tag:a")
    assert first.digest_parts() == ("regime calm", "a", "b", "c", "mood excited")


def test_agent_stats_derive_rate_and_quality_from_the_counters() -> None:
    from grimoire.tables.memory.agent_state import AgentStats

    stats = AgentStats.from_counters(
        {
            "candidates": 10,
            "admit": 3,
            "quarantine": 1,
            "reject": 4,
            "merge": 1,
            "aggregate": 1,
            "quality_sum": 2.0,
        }
    )
    assert stats.stored == 4
    assert stats.admission_rate == 4 / 10
    assert stats.average_quality == 2.0 / 4
    assert AgentStats().admission_rate == 0.0
    assert AgentStats().average_quality == 0.0
