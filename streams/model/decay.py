"""Ebbinghaus decay with strength (docs/design.md §6 "Decay"), computed on read.

`retention = 2^(-Δt / (half_life · strength))` and
`effective_confidence = max(floor, confidence · retention)`, with Δt the event
time since `last_accessed`. Nothing here reads the clock: callers pass the
request's `as_of` (or the agent's watermark), so a replay decays identically.
The stored confidence is never rewritten by decay, which is why a maintenance
pass does not have to touch every record.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from grimoire.streams.model.records import Kind

HOUR_MS: Final = 3_600_000
DAY_MS: Final = 24 * HOUR_MS


class DecayClass(StrEnum):
    """How time-sensitive a memory is; when set it overrides the kind's half-life."""

    STRUCTURAL = "structural"  # protocol mechanics, constants: never fade
    REGIME_CONDITIONAL = "regime_conditional"  # holds while a market regime lasts
    TACTICAL = "tactical"  # operational conditions that change week to week
    EPHEMERAL = "ephemeral"  # one-off levels and events


# Provenances whose knowledge was paid for by a dead predecessor: a costly,
# unfakeable signal, so it fades slower than the kind alone would say.
LINEAGE_PROVENANCES: Final = frozenset({"predecessor", "bloodstain", "death_reflection"})
# Provenances that survived offline (dream) validation: independent but weaker
# evidence than live confirmation, hence a smaller slowdown than lineage.
DREAM_PROVENANCES: Final = frozenset({"dream", "dream_validated"})


def _kind_defaults() -> MappingProxyType[str, float]:
    return MappingProxyType(
        {
            Kind.EPISODE.value: 48 * HOUR_MS,  # raw experience: scaffolding once distilled
            Kind.INSIGHT.value: 7 * DAY_MS,
            Kind.HEURISTIC.value: 14 * DAY_MS,
            Kind.WARNING.value: 30 * DAY_MS,  # forgetting danger costs the most
            # Not in the source table; chosen by analogy and documented here:
            Kind.CAUSAL_LINK.value: 14 * DAY_MS,  # a learned rule of the world, like a heuristic
            Kind.STRATEGY_FRAGMENT.value: 14 * DAY_MS,  # actionable, like a heuristic
            Kind.SUMMARY.value: 14 * DAY_MS,  # stands in for deleted sources; must outlive them
            Kind.AGGREGATE.value: 7 * DAY_MS,  # a repeat count: insight-like evidence
        }
    )


def _class_defaults() -> MappingProxyType[str, float]:
    return MappingProxyType(
        {
            DecayClass.STRUCTURAL.value: math.inf,
            DecayClass.REGIME_CONDITIONAL.value: 14 * DAY_MS,
            DecayClass.TACTICAL.value: 7 * DAY_MS,
            DecayClass.EPHEMERAL.value: 24 * HOUR_MS,
        }
    )


@dataclass(frozen=True, slots=True)
class DecayPolicy:
    """Half-lives (ms) and modifiers; the defaults are docs/design.md §6's.

    `default_half_life_ms` covers a kind missing from `by_kind` (e.g. a kind
    added later) so decay never fails on read.
    """

    by_kind: Mapping[str, float] = field(default_factory=_kind_defaults)
    by_class: Mapping[str, float] = field(default_factory=_class_defaults)
    default_half_life_ms: float = 7 * DAY_MS
    lineage_slowdown: float = 3.0
    dream_slowdown: float = 2.0
    low_quality_threshold: float = 0.3
    low_quality_speedup: float = 2.0
    floor: float = 0.05


DEFAULT_DECAY_POLICY: Final = DecayPolicy()


def parse_decay_class(value: DecayClass | str | None) -> DecayClass | None:
    """Read a stored decay class; "" / None mean "use the kind's half-life".

    Hyphens are accepted ("regime-conditional" is how docs/design.md §6 spells it).
    An unknown class raises rather than silently decaying at the wrong rate.
    """
    if value is None or isinstance(value, DecayClass):
        return value
    text = value.strip().casefold().replace("-", "_")
    if not text:
        return None
    return DecayClass(text)


def half_life_ms(
    kind: Kind | str,
    decay_class: DecayClass | str | None = None,
    provenance: str = "self",
    quality: float = 0.5,
    policy: DecayPolicy = DEFAULT_DECAY_POLICY,
) -> float:
    """The effective half-life in ms; `math.inf` means the memory never decays.

    The class (when set) replaces the kind's base; then provenance and quality
    modifiers multiply it, so e.g. a low-quality bloodstain warning gets
    30 d · 3 / 2 = 45 d.
    """
    cls = parse_decay_class(decay_class)
    if cls is not None:
        base = policy.by_class[cls.value]
    else:
        base = policy.by_kind.get(str(kind), policy.default_half_life_ms)
    origin = provenance.strip().casefold()
    if origin in LINEAGE_PROVENANCES:
        base *= policy.lineage_slowdown
    elif origin in DREAM_PROVENANCES:
        base *= policy.dream_slowdown
    if quality < policy.low_quality_threshold:
        base /= policy.low_quality_speedup
    return base


def retention(elapsed_ms: float, half_life_ms: float, strength: float = 1.0) -> float:
    """`2^(-Δt / (half_life · strength))`, in (0, 1].

    Δt ≤ 0 (an access stamped after `now`, e.g. a late event) counts as no time
    passed rather than growing confidence above its stored value.
    """
    if half_life_ms <= 0:
        raise ValueError("half-life must be positive")
    if strength <= 0:
        raise ValueError("strength must be positive")
    if elapsed_ms <= 0 or math.isinf(half_life_ms):
        return 1.0
    return float(2.0 ** (-elapsed_ms / (half_life_ms * strength)))


def recency(age_ms: float, half_life_ms: float) -> float:
    """`2^(-age / half_life)` at strength 1: the one recency curve every ranking shares.

    A timestamp in the future counts as age 0."""
    return retention(age_ms, half_life_ms)


def effective_confidence(
    confidence: float,
    last_accessed_ms: int,
    now_ms: int,
    *,
    kind: Kind | str = Kind.EPISODE,
    decay_class: DecayClass | str | None = None,
    provenance: str = "self",
    quality: float = 0.5,
    strength: float = 1.0,
    policy: DecayPolicy = DEFAULT_DECAY_POLICY,
) -> float:
    """`max(floor, confidence · retention)`: discounted but never fully forgotten."""
    life = half_life_ms(kind, decay_class, provenance, quality, policy)
    kept = retention(now_ms - last_accessed_ms, life, strength)
    return max(policy.floor, confidence * kept)
