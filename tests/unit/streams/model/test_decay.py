"""grimoire.streams.model.decay: half-lives, retention and effective confidence by hand."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest

from grimoire.streams.model.decay import (
    DAY_MS,
    DEFAULT_DECAY_POLICY,
    HOUR_MS,
    DecayClass,
    DecayPolicy,
    effective_confidence,
    half_life_ms,
    parse_decay_class,
    retention,
)
from grimoire.streams.model.records import Kind


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (Kind.EPISODE, 172_800_000),  # 48 h
        (Kind.INSIGHT, 604_800_000),  # 7 d
        (Kind.HEURISTIC, 1_209_600_000),  # 14 d
        (Kind.WARNING, 2_592_000_000),  # 30 d
        (Kind.CAUSAL_LINK, 14 * DAY_MS),
        (Kind.STRATEGY_FRAGMENT, 14 * DAY_MS),
        (Kind.SUMMARY, 14 * DAY_MS),
        (Kind.AGGREGATE, 7 * DAY_MS),
        ("some_future_kind", 7 * DAY_MS),  # policy default
        ("episode", 48 * HOUR_MS),  # stored string form
    ],
)
def test_half_life_by_kind(kind: Kind | str, expected: float) -> None:
    assert half_life_ms(kind) == expected


@pytest.mark.parametrize(
    ("decay_class", "expected"),
    [
        (DecayClass.STRUCTURAL, math.inf),
        (DecayClass.REGIME_CONDITIONAL, 14 * DAY_MS),
        ("regime-conditional", 14 * DAY_MS),
        ("Tactical", 7 * DAY_MS),
        (DecayClass.EPHEMERAL, 24 * HOUR_MS),
        ("", 30 * DAY_MS),  # no class: the kind (warning) decides
        (None, 30 * DAY_MS),
    ],
)
def test_decay_class_overrides_kind(decay_class: DecayClass | str | None, expected: float) -> None:
    assert half_life_ms(Kind.WARNING, decay_class) == expected


def test_unknown_decay_class_raises() -> None:
    with pytest.raises(ValueError):
        parse_decay_class("glacial")


@pytest.mark.parametrize(
    ("provenance", "quality", "expected"),
    [
        ("self", 0.5, 7 * DAY_MS),
        ("clade", 0.5, 7 * DAY_MS),
        ("predecessor", 0.5, 21 * DAY_MS),  # 3x slower
        ("bloodstain", 0.5, 21 * DAY_MS),
        ("dream", 0.5, 14 * DAY_MS),  # 2x slower
        ("dream_validated", 0.5, 14 * DAY_MS),
        ("self", 0.29, 3.5 * DAY_MS),  # 2x faster
        ("self", 0.3, 7 * DAY_MS),  # threshold is strict
        ("predecessor", 0.1, 10.5 * DAY_MS),  # 7 d * 3 / 2
        ("dream", 0.0, 7 * DAY_MS),  # 7 d * 2 / 2
    ],
)
def test_provenance_and_quality_modifiers(provenance: str, quality: float, expected: float) -> None:
    assert half_life_ms(Kind.INSIGHT, None, provenance, quality) == pytest.approx(expected)


def test_modifiers_apply_on_top_of_class() -> None:
    assert half_life_ms(Kind.EPISODE, DecayClass.TACTICAL, "bloodstain", 0.2) == 10.5 * DAY_MS
    assert half_life_ms(Kind.EPISODE, DecayClass.STRUCTURAL, "dream", 0.1) == math.inf


def test_custom_policy() -> None:
    policy = DecayPolicy(by_kind={"episode": 1000.0}, default_half_life_ms=50.0)
    assert half_life_ms(Kind.EPISODE, policy=policy) == 1000.0
    assert half_life_ms(Kind.INSIGHT, policy=policy) == 50.0


def test_retention_hand_values() -> None:
    assert retention(10.0, 10.0) == 0.5
    assert retention(20.0, 10.0) == 0.25
    assert retention(10.0, 10.0, 2.0) == pytest.approx(2**-0.5)
    assert retention(30.0, 10.0, 3.0) == 0.5
    assert retention(0.0, 10.0) == 1.0
    assert retention(-5.0, 10.0) == 1.0  # a future access is "no time passed"
    assert retention(1e18, math.inf) == 1.0


@pytest.mark.parametrize(("half_life", "strength"), [(0.0, 1.0), (-1.0, 1.0), (1.0, 0.0)])
def test_retention_rejects_non_positive(half_life: float, strength: float) -> None:
    with pytest.raises(ValueError):
        retention(1.0, half_life, strength)


def test_effective_confidence_hand_values() -> None:
    t0 = 1_700_000_000_000
    h48 = 48 * HOUR_MS
    assert effective_confidence(0.8, t0, t0 + h48) == pytest.approx(0.4)
    assert effective_confidence(0.8, t0, t0 + 2 * h48) == pytest.approx(0.2)
    # 10 half-lives: 0.8 / 1024 is below the floor.
    assert effective_confidence(0.8, t0, t0 + 10 * h48) == 0.05
    # warning, bloodstain: 90 d half-life; 90 d later half remains.
    assert effective_confidence(
        0.6, t0, t0 + 90 * DAY_MS, kind=Kind.WARNING, provenance="bloodstain"
    ) == pytest.approx(0.3)
    # strength 2 doubles the half-life: 96 h on an episode = one half-life.
    assert effective_confidence(0.8, t0, t0 + 2 * h48, strength=2.0) == pytest.approx(0.4)
    # structural never decays.
    assert effective_confidence(0.7, t0, t0 + 10_000 * DAY_MS, decay_class="structural") == 0.7
    # ephemeral + low quality: 12 h half-life.
    assert effective_confidence(
        0.9, t0, t0 + 12 * HOUR_MS, decay_class=DecayClass.EPHEMERAL, quality=0.1
    ) == pytest.approx(0.45)
    assert DEFAULT_DECAY_POLICY.floor == 0.05


def test_effective_confidence_floor_applies_even_without_decay() -> None:
    assert effective_confidence(0.01, 5, 5) == 0.05
    assert effective_confidence(0.0, 5, 5, decay_class="structural") == 0.05


_SHAPES = [
    (kind, decay_class, provenance, quality)
    for kind in Kind
    for decay_class in (None, *DecayClass)
    for provenance in ("self", "predecessor", "dream")
    for quality in (0.1, 0.9)
]
_OFFSETS = [0, 1, HOUR_MS, 24 * HOUR_MS, 7 * DAY_MS, 60 * DAY_MS, 3650 * DAY_MS]


@pytest.mark.parametrize(("kind", "decay_class", "provenance", "quality"), _SHAPES)
def test_properties_monotone_floored_and_exact_at_zero(
    kind: Kind, decay_class: DecayClass | None, provenance: str, quality: float
) -> None:
    t0 = 1_000_000
    for confidence in (0.05, 0.3, 1.0, 0.02):
        values = [
            effective_confidence(
                confidence,
                t0,
                t0 + offset,
                kind=kind,
                decay_class=decay_class,
                provenance=provenance,
                quality=quality,
                strength=1.5,
            )
            for offset in _OFFSETS
        ]
        assert all(later <= earlier for earlier, later in pairwise(values))
        assert all(value >= 0.05 for value in values)
        assert values[0] == max(0.05, confidence)
