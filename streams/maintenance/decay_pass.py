"""When a memory's decay state next changes, and what a periodic decay pass writes.

Effective confidence is computed on read (`decay.py`), so a pass has nothing to
do for a memory until its value leaves the band it was last seen in. The band
edges are few (docs/design.md §6's curator acts at 0.4 / 0.1 and the floor is 0.05), and
since `confidence · 2^(-Δt / (half_life · strength))` is monotone in Δt, the
moment of the next band change has a closed form. A time-indexed structure keyed
by that moment lets a pass touch only the memories whose state can change.

Everything here is a function of its arguments (event times in ms), so replaying
the log schedules and plans identically.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from grimoire.streams.exceptions import StreamsError
from grimoire.streams.model.decay import (
    DEFAULT_DECAY_POLICY,
    DecayPolicy,
    effective_confidence,
    half_life_ms,
    retention,
)
from grimoire.streams.ports.maintenance import DecayInputs

logger = logging.getLogger(__name__)

# Crossings further away than this are treated as "never": beyond it the ms
# timestamps approach float precision and no deployment lives that long.
MAX_HORIZON_MS: Final = 1000 * 365 * 24 * 3_600_000


class DecayBandsError(StreamsError, ValueError):
    """Band thresholds that cannot partition (floor, 1]."""


@dataclass(frozen=True, slots=True)
class DecayBands:
    """Effective-confidence thresholds, highest first, all above the policy's floor.

    Band 0 is `≥ thresholds[0]`, band i is `[thresholds[i], thresholds[i-1])`,
    band len(thresholds) is `(floor, thresholds[-1])` and the last band is "at
    the floor", which decay never leaves.
    """

    thresholds: tuple[float, ...] = (0.4, 0.1)

    def __post_init__(self) -> None:
        if any(high <= low for high, low in itertools.pairwise(self.thresholds)):
            raise DecayBandsError(f"thresholds must be strictly descending: {self.thresholds}")
        if any(not 0.0 < t <= 1.0 for t in self.thresholds):
            raise DecayBandsError(f"thresholds must lie in (0, 1]: {self.thresholds}")

    def check(self, floor: float) -> None:
        if self.thresholds and self.thresholds[-1] <= floor:
            raise DecayBandsError(f"thresholds {self.thresholds} must lie above floor {floor}")

    @property
    def floor_band(self) -> int:
        return len(self.thresholds) + 1

    def band_of(self, effective: float, floor: float) -> int:
        if effective <= floor:
            return self.floor_band
        return sum(1 for t in self.thresholds if effective < t)

    def exit_level(self, band: int, floor: float) -> float | None:
        """The level whose crossing takes a memory out of `band` (None: the floor band)."""
        if band < len(self.thresholds):
            return self.thresholds[band]
        if band == len(self.thresholds):
            return floor
        return None


DEFAULT_DECAY_BANDS: Final = DecayBands()


@dataclass(frozen=True, slots=True)
class DecayEntry:
    """What decay depends on for one memory, plus the value the last pass stored."""

    memory_id: str
    confidence: float
    last_accessed_ms: int
    kind: str
    decay_class: str | None = None
    provenance: str = "self"
    quality: float = 0.5
    strength: float = 1.0
    stored_effective: float | None = None


@dataclass(frozen=True, slots=True)
class DecayUpdate:
    memory_id: str
    effective_before: float
    effective_after: float
    band: int
    next_due_ms: int | None


@dataclass(frozen=True, slots=True)
class DecayReport:
    """docs/design.md §6 `GrimoireDecay`: averages over the entries the pass touched."""

    entries_decayed: int
    avg_before: float
    avg_after: float


EMPTY_REPORT: Final = DecayReport(0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class DecayPassPlan:
    updates: tuple[DecayUpdate, ...]
    report: DecayReport
    # Entries whose stored fields decay cannot read (unknown class, strength ≤ 0):
    # dropped from the schedule rather than failing every later pass.
    invalid: tuple[str, ...] = ()


def effective_now(
    entry: DecayInputs, now_ms: int, policy: DecayPolicy = DEFAULT_DECAY_POLICY
) -> float:
    """Exactly the read-time value recall computes for the same stored fields."""
    return effective_confidence(
        entry.confidence,
        entry.last_accessed_ms,
        now_ms,
        kind=entry.kind,
        decay_class=entry.decay_class or None,
        provenance=entry.provenance,
        quality=entry.quality,
        strength=entry.strength,
        policy=policy,
    )


def _first_true(pred: Callable[[int], bool], lo: int, guess: int) -> int:
    """Smallest t > lo with pred(t), given pred(lo) is False and pred is monotone.

    The closed form lands within a ms or so of the answer; galloping from it and
    bisecting makes the result agree with the float arithmetic readers use."""
    hi = max(guess, lo + 1)
    step = 1
    while not pred(hi):
        lo, hi = hi, hi + step
        step *= 2
    # Gallop down from hi until a probe is false: that probe is the new lo, so
    # the bisection below spans the gallop's last step, never [lo, guess]
    # (a guess within a ms of the answer costs two or three probes, not ~30).
    step = 1
    while hi - lo > 1:
        probe = max(lo + 1, hi - step)
        if pred(probe):
            hi = probe
            step *= 2
        else:
            lo = probe
            break
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return hi


def next_crossing_ms(
    entry: DecayEntry,
    now_ms: int,
    bands: DecayBands = DEFAULT_DECAY_BANDS,
    policy: DecayPolicy = DEFAULT_DECAY_POLICY,
) -> int | None:
    """The first event time after `now_ms` at which the read-time effective
    confidence is in a lower band than at `now_ms`; None when it never will be
    (infinite half-life, already at the floor, or beyond `MAX_HORIZON_MS`).

    Solves `confidence · 2^(-(t - last) / (half_life · strength)) = level`.
    """
    bands.check(policy.floor)
    band = bands.band_of(effective_now(entry, now_ms, policy), policy.floor)
    level = bands.exit_level(band, policy.floor)
    if level is None:
        return None
    life = half_life_ms(
        entry.kind, entry.decay_class or None, entry.provenance, entry.quality, policy
    )
    scale = life * entry.strength
    if math.isinf(scale):
        return None
    # In this band the value is ≥ level > 0, so confidence > 0 and the log is finite.
    elapsed = scale * math.log2(entry.confidence / level)
    if elapsed > MAX_HORIZON_MS:
        return None
    guess = entry.last_accessed_ms + math.ceil(elapsed)

    confidence, origin, strength, floor = (
        entry.confidence,
        entry.last_accessed_ms,
        entry.strength,
        policy.floor,
    )

    def changed(t: int) -> bool:
        # `effective_confidence`'s own expression with the half-life found once
        # above (the same float operations, so the same value to the bit):
        # looking it up on every probe was most of a pass's time.
        value = max(floor, confidence * retention(t - origin, life, strength))
        return bands.band_of(value, floor) != band

    return _first_true(changed, now_ms, guess)


def initial_due_ms(
    entry: DecayEntry,
    bands: DecayBands = DEFAULT_DECAY_BANDS,
    policy: DecayPolicy = DEFAULT_DECAY_POLICY,
) -> int | None:
    """A freshly written memory's first crossing, counted from its decay origin."""
    return next_crossing_ms(entry, entry.last_accessed_ms, bands, policy)


def due_ms(
    entry: DecayEntry,
    now_ms: int,
    bands: DecayBands = DEFAULT_DECAY_BANDS,
    policy: DecayPolicy = DEFAULT_DECAY_POLICY,
) -> int | None:
    """When a pass should next look at an entry whose fields may just have changed
    (an access, an outcome, a migration): now if its band already differs from
    the stored snapshot (or, without one, from its stored confidence), else its
    next crossing."""
    seen = entry.stored_effective
    if seen is None:
        seen = max(policy.floor, entry.confidence)
    current = effective_now(entry, now_ms, policy)
    if bands.band_of(current, policy.floor) != bands.band_of(seen, policy.floor):
        return now_ms
    return next_crossing_ms(entry, now_ms, bands, policy)


def plan_decay_pass(
    entries: Iterable[DecayEntry],
    now_ms: int,
    bands: DecayBands = DEFAULT_DECAY_BANDS,
    policy: DecayPolicy = DEFAULT_DECAY_POLICY,
) -> DecayPassPlan:
    """Snapshot each due entry's read-time value at `now_ms` and find its next due time."""
    bands.check(policy.floor)
    updates: list[DecayUpdate] = []
    invalid: list[str] = []
    for entry in entries:
        try:
            after = effective_now(entry, now_ms, policy)
            next_due = next_crossing_ms(entry, now_ms, bands, policy)
        except ValueError as exc:
            logger.warning("decay skips %s: %s", entry.memory_id, exc)
            invalid.append(entry.memory_id)
            continue
        before = entry.stored_effective if entry.stored_effective is not None else entry.confidence
        updates.append(
            DecayUpdate(
                memory_id=entry.memory_id,
                effective_before=before,
                effective_after=after,
                band=bands.band_of(after, policy.floor),
                next_due_ms=next_due,
            )
        )
    return DecayPassPlan(tuple(updates), summarize(updates), tuple(invalid))


def summarize(updates: Iterable[DecayUpdate]) -> DecayReport:
    touched = list(updates)
    if not touched:
        return EMPTY_REPORT
    count = len(touched)
    # fsum: the averages do not depend on summation order.
    return DecayReport(
        entries_decayed=count,
        avg_before=math.fsum(u.effective_before for u in touched) / count,
        avg_after=math.fsum(u.effective_after for u in touched) / count,
    )
