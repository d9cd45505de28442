"""The decay schedule: band edges, exact crossing times, and what a pass plans."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from grimoire.streams.maintenance.decay_pass import (
    DecayBands,
    DecayBandsError,
    DecayEntry,
    DecayReport,
    _first_true,
    due_ms,
    effective_now,
    initial_due_ms,
    next_crossing_ms,
    plan_decay_pass,
)
from grimoire.streams.model.decay import DAY_MS, HOUR_MS, DecayPolicy
from grimoire.streams.recall.ports import RecallRecord

T0 = 1_700_000_000_000
BANDS = DecayBands()
KINDS = ("episode", "insight", "heuristic", "warning", "causal_link", "summary", "aggregate")
CLASSES = (None, "structural", "regime_conditional", "tactical", "ephemeral")
PROVENANCES = ("self", "clade", "predecessor", "bloodstain", "dream", "dream_validated")


def entry(**overrides: object) -> DecayEntry:
    values: dict[str, object] = {
        "memory_id": "m1",
        "confidence": 0.8,
        "last_accessed_ms": T0,
        "kind": "episode",
    }
    values.update(overrides)
    return DecayEntry(**values)  # type: ignore[arg-type]


def crossings(e: DecayEntry, limit: int = 10) -> list[int]:
    """Successive band changes from the decay origin."""
    times: list[int] = []
    now = e.last_accessed_ms
    while len(times) < limit and (t := next_crossing_ms(e, now)) is not None:
        times.append(t)
        now = t
    return times


# ---- hand-computed values -------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "half_life"),
    [("episode", 48 * HOUR_MS), ("insight", 7 * DAY_MS), ("heuristic", 14 * DAY_MS),
     ("warning", 30 * DAY_MS)],
)  # fmt: skip
def test_each_kind_halves_at_its_half_life(kind: str, half_life: int) -> None:
    e = entry(kind=kind)
    assert effective_now(e, T0 + half_life) == 0.4
    assert effective_now(e, T0 + 2 * half_life) == 0.2
    assert effective_now(e, T0 + 4 * half_life) == 0.05  # 0.8 / 16: exactly the floor
    # Band edges: still 0.4 (band 0) at one half-life, below it 1 ms later; 0.1 at
    # three half-lives (log2(0.8/0.1) = 3); the floor at four.
    assert crossings(e) == [T0 + half_life + 1, T0 + 3 * half_life + 1, T0 + 4 * half_life]


@pytest.mark.parametrize(
    ("decay_class", "half_life"),
    [("regime_conditional", 14 * DAY_MS), ("tactical", 7 * DAY_MS), ("ephemeral", 24 * HOUR_MS),
     ("regime-conditional", 14 * DAY_MS)],
)  # fmt: skip
def test_each_class_overrides_the_kind(decay_class: str, half_life: int) -> None:
    for kind in ("episode", "warning"):
        e = entry(kind=kind, decay_class=decay_class)
        assert effective_now(e, T0 + half_life) == 0.4
        assert crossings(e) == [T0 + half_life + 1, T0 + 3 * half_life + 1, T0 + 4 * half_life]


def test_structural_never_decays_nor_comes_due() -> None:
    e = entry(kind="episode", decay_class="structural", confidence=0.7)
    assert effective_now(e, T0 + 10_000 * DAY_MS) == 0.7
    assert next_crossing_ms(e, T0) is None
    assert initial_due_ms(e) is None
    assert plan_decay_pass([e], T0 + DAY_MS).updates[0].next_due_ms is None


@pytest.mark.parametrize(
    ("overrides", "half_life"),
    [
        ({"provenance": "predecessor"}, 3 * 48 * HOUR_MS),
        ({"provenance": "bloodstain"}, 3 * 48 * HOUR_MS),
        ({"provenance": "dream"}, 2 * 48 * HOUR_MS),
        ({"provenance": "dream_validated"}, 2 * 48 * HOUR_MS),
        ({"quality": 0.2}, 24 * HOUR_MS),
        ({"quality": 0.3}, 48 * HOUR_MS),  # the threshold itself is not "low"
        ({"strength": 2.0}, 96 * HOUR_MS),
        ({"strength": 3.0, "provenance": "dream"}, 6 * 48 * HOUR_MS),
        # Low-quality bloodstain warning: 30 d · 3 / 2.
        ({"kind": "warning", "provenance": "bloodstain", "quality": 0.1}, 45 * DAY_MS),
        ({"decay_class": "ephemeral", "provenance": "predecessor"}, 72 * HOUR_MS),
    ],
)
def test_modifiers_scale_the_half_life(overrides: dict[str, object], half_life: int) -> None:
    e = entry(**overrides)
    assert effective_now(e, T0 + half_life) == 0.4
    assert effective_now(e, T0 + half_life - HOUR_MS) > 0.4
    assert next_crossing_ms(e, T0) == T0 + half_life + 1


def test_floor() -> None:
    e = entry()
    assert effective_now(e, T0 + 100 * DAY_MS) == 0.05
    assert next_crossing_ms(e, T0 + 100 * DAY_MS) is None
    low = entry(confidence=0.03)
    assert effective_now(low, T0) == 0.05
    assert initial_due_ms(low) is None


def test_non_power_of_two_ratio() -> None:
    # A heuristic at 0.3 sits in band 1; it leaves it when 0.3 · 2^(-Δt/14d) < 0.1,
    # i.e. Δt > 14 d · log2(3) ≈ 22.189 d.
    e = entry(kind="heuristic", confidence=0.3)
    t = next_crossing_ms(e, T0)
    assert t is not None
    assert abs((t - T0) - 14 * DAY_MS * math.log2(3)) <= 1
    assert effective_now(e, t - 1) >= 0.1 > effective_now(e, t)


def test_access_in_the_future_counts_from_the_access() -> None:
    e = entry(last_accessed_ms=T0 + DAY_MS)
    assert next_crossing_ms(e, T0) == T0 + DAY_MS + 48 * HOUR_MS + 1


# ---- the pass ---------------------------------------------------------------------


def test_plan_reports_averages_over_touched_entries() -> None:
    a = entry(memory_id="a", confidence=0.8)  # no snapshot yet: before = confidence
    b = entry(memory_id="b", confidence=0.6, stored_effective=0.5)
    plan = plan_decay_pass([a, b], T0 + 48 * HOUR_MS + 1)
    after_a = effective_now(a, T0 + 48 * HOUR_MS + 1)
    after_b = effective_now(b, T0 + 48 * HOUR_MS + 1)
    assert [u.memory_id for u in plan.updates] == ["a", "b"]
    assert [u.effective_before for u in plan.updates] == [0.8, 0.5]
    assert plan.report == DecayReport(2, 0.65, (after_a + after_b) / 2)
    assert [u.band for u in plan.updates] == [1, 1]
    assert plan.updates[0].next_due_ms == T0 + 3 * 48 * HOUR_MS + 1


def test_empty_pass() -> None:
    assert plan_decay_pass([], T0).report == DecayReport(0, 0.0, 0.0)


def test_unreadable_entries_are_reported_not_raised() -> None:
    good = entry(memory_id="good")
    bad_class = entry(memory_id="bad-class", decay_class="geological")
    bad_strength = entry(memory_id="bad-strength", strength=0.0)
    plan = plan_decay_pass([good, bad_class, bad_strength], T0 + DAY_MS)
    assert [u.memory_id for u in plan.updates] == ["good"]
    assert plan.invalid == ("bad-class", "bad-strength")
    assert plan.report.entries_decayed == 1


def test_due_is_now_when_the_band_left_the_snapshot() -> None:
    # Snapshot 0.3 (band 1), but an access reset the origin: now back in band 0.
    e = entry(stored_effective=0.3, last_accessed_ms=T0)
    assert due_ms(e, T0 + HOUR_MS) == T0 + HOUR_MS
    # Same band as the snapshot: the next crossing.
    same = entry(stored_effective=0.8)
    assert due_ms(same, T0 + HOUR_MS) == next_crossing_ms(same, T0 + HOUR_MS)
    # No snapshot: compared with the stored confidence.
    assert due_ms(entry(), T0 + 50 * HOUR_MS) == T0 + 50 * HOUR_MS


def test_bands_validate() -> None:
    with pytest.raises(DecayBandsError):
        DecayBands((0.1, 0.4))
    with pytest.raises(DecayBandsError):
        DecayBands((1.5, 0.4))
    with pytest.raises(DecayBandsError):
        next_crossing_ms(entry(), T0, DecayBands((0.4, 0.04)))
    assert BANDS.band_of(0.4, 0.05) == 0
    assert BANDS.band_of(0.39, 0.05) == 1
    assert BANDS.band_of(0.1, 0.05) == 1
    assert BANDS.band_of(0.099, 0.05) == 2
    assert BANDS.band_of(0.05, 0.05) == 3


def test_custom_bands_and_policy() -> None:
    bands = DecayBands((0.5,))
    policy = DecayPolicy(floor=0.1)
    e = entry(confidence=1.0)
    assert next_crossing_ms(e, T0, bands, policy) == T0 + 48 * HOUR_MS + 1
    # 1.0 → 0.1 takes log2(10) half-lives.
    t = next_crossing_ms(e, T0 + 48 * HOUR_MS + 1, bands, policy)
    assert t is not None and abs(t - T0 - 48 * HOUR_MS * math.log2(10)) <= 1
    assert effective_now(e, t, policy) == 0.1


# ---- properties over many seeded random cases -------------------------------------


def random_entry(rng: random.Random, index: int) -> DecayEntry:
    return DecayEntry(
        memory_id=f"m{index}",
        confidence=rng.choice([rng.random(), rng.uniform(0.3, 1.0), 0.4, 0.1, 0.05, 1.0]),
        last_accessed_ms=T0 + rng.randrange(-30 * DAY_MS, 30 * DAY_MS),
        kind=rng.choice(KINDS),
        decay_class=rng.choice(CLASSES),
        provenance=rng.choice(PROVENANCES),
        quality=rng.choice([rng.random(), 0.29, 0.3, 0.9]),
        strength=rng.choice([1.0, 1.5, 2.0, rng.uniform(0.2, 8.0)]),
        stored_effective=rng.choice([None, rng.uniform(0.05, 1.0)]),
    )


def test_property_never_increases_and_never_below_floor() -> None:
    rng = random.Random(20240611)
    for i in range(3000):
        e = random_entry(rng, i)
        times = sorted(T0 + rng.randrange(-40 * DAY_MS, 400 * DAY_MS) for _ in range(6))
        values = [effective_now(e, t) for t in times]
        assert all(v >= 0.05 for v in values)
        assert all(a >= b for a, b in itertools.pairwise(values)), (e, times)


def test_property_crossings_are_exact() -> None:
    rng = random.Random(7)
    checked = 0
    for i in range(2000):
        e = random_entry(rng, i)
        now = T0 + rng.randrange(-10 * DAY_MS, 30 * DAY_MS)
        band = BANDS.band_of(effective_now(e, now), 0.05)
        t = next_crossing_ms(e, now)
        if t is None:
            assert e.decay_class == "structural" or band == BANDS.floor_band
            continue
        checked += 1
        assert t > now
        assert BANDS.band_of(effective_now(e, t - 1), 0.05) == band
        assert BANDS.band_of(effective_now(e, t), 0.05) == band + 1
    assert checked > 1000


def test_property_pass_stores_the_read_time_value() -> None:
    rng = random.Random(99)
    entries = [random_entry(rng, i) for i in range(500)]
    now = T0 + 20 * DAY_MS
    plan = plan_decay_pass(entries, now)
    assert len(plan.updates) == len(entries)
    for e, update in zip(entries, plan.updates, strict=True):
        # What recall reads for the same stored fields, through the record recall
        # ranks (streams/recall), not through the schedule module.
        same = ("memory_id", "kind", "confidence", "quality", "strength", "provenance")
        stored = RecallRecord(
            **{name: getattr(e, name) for name in same},
            layer="observation",
            text="",
            ts_ms=e.last_accessed_ms,
            last_accessed_ms=e.last_accessed_ms,
            decay_class=e.decay_class or "",
        )
        read = stored.effective_confidence(now)
        assert update.effective_after == read
        assert update.band == BANDS.band_of(read, 0.05)
        if update.next_due_ms is not None:
            assert update.next_due_ms > now
    n = len(entries)
    befores = [
        e.stored_effective if e.stored_effective is not None else e.confidence for e in entries
    ]
    assert plan.report.avg_before == pytest.approx(sum(befores) / n)
    assert plan.report.avg_after == pytest.approx(sum(u.effective_after for u in plan.updates) / n)


def test_property_following_the_schedule_sees_every_band_once() -> None:
    # Passes at exactly the due times walk a memory down through each band in order.
    rng = random.Random(3)
    for i in range(300):
        e = random_entry(rng, i)
        if e.decay_class == "structural":
            continue
        start = BANDS.band_of(effective_now(e, e.last_accessed_ms), 0.05)
        seen = [BANDS.band_of(effective_now(e, t), 0.05) for t in crossings(e)]
        assert seen == list(range(start + 1, start + 1 + len(seen)))
        assert not seen or seen[-1] == BANDS.floor_band


def test_first_true_finds_the_smallest_true_time_from_any_guess() -> None:
    """Against a linear reference: the guess only changes how many probes it takes."""
    rng = random.Random(11)
    for _ in range(2_000):
        answer = rng.randrange(1, 5_000)
        lo = rng.randrange(0, answer)
        guess = rng.randrange(-10, 10_000)
        assert _first_true(lambda t, a=answer: t >= a, lo, guess) == answer


@pytest.mark.parametrize("offset", [0, 1, -1, 3])
def test_first_true_near_a_good_guess_takes_a_few_probes(offset: int) -> None:
    """The closed form lands within a ms or so: the search must not bisect the whole
    range from `lo` (it did, ~30 probes an entry, most of a decay pass's time)."""
    lo, answer = T0, T0 + 40 * DAY_MS
    probes: list[int] = []

    def pred(t: int) -> bool:
        probes.append(t)
        return t >= answer

    assert _first_true(pred, lo, answer + offset) == answer
    assert len(probes) <= 6


def test_a_crossing_costs_a_few_evaluations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each probe is one retention; a crossing needs a handful of them."""
    import grimoire.streams.maintenance.decay_pass as module

    calls = 0
    original = module.retention

    def counting(elapsed_ms: float, half_life_ms: float, strength: float = 1.0) -> float:
        nonlocal calls
        calls += 1
        return original(elapsed_ms, half_life_ms, strength)

    monkeypatch.setattr(module, "retention", counting)
    rng = random.Random(5)
    entries = [
        entry(memory_id=f"m{i}", confidence=rng.uniform(0.2, 1.0), kind=rng.choice(KINDS[:4]))
        for i in range(200)
    ]
    crossings = [next_crossing_ms(e, T0 + HOUR_MS) for e in entries]
    assert all(c is not None for c in crossings)
    assert 0 < calls <= 6 * len(entries)
