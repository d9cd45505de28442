"""Block-cadence maintenance decisions: due from ticks, postponed under pressure."""

from __future__ import annotations

import random

import pytest

from grimoire.streams.maintenance.schedule import (
    DecayOutlook,
    Ledger,
    MaintenancePolicy,
    Pressure,
    PressureSignals,
    Task,
    agent_tick,
    assess_pressure,
    plan_maintenance,
)

POLICY = MaintenancePolicy(curator_every_ticks=50, compaction_every_ticks=200)


def test_a_fresh_agent_gets_a_decay_pass_and_nothing_else_before_its_first_period() -> None:
    plan = plan_maintenance("a", 7, 1_000, Ledger(), policy=POLICY)
    assert plan.tasks == (Task.DECAY,)
    assert plan.postponed == ()


def test_the_curator_is_due_once_per_fifty_ticks() -> None:
    ledger = Ledger(decay=49, curator=None)
    assert Task.CURATOR in plan_maintenance("a", 50, 0, ledger, policy=POLICY).tasks
    done = Ledger(decay=50, curator=50)
    for tick in range(51, 100):
        assert Task.CURATOR not in plan_maintenance("a", tick, 0, done, policy=POLICY).tasks
    assert Task.CURATOR in plan_maintenance("a", 100, 0, done, policy=POLICY).tasks


def test_skipped_boundaries_run_the_curator_once_numbered_by_the_tick() -> None:
    plan = plan_maintenance("a", 173, 0, Ledger(decay=40, curator=40), policy=POLICY)
    assert plan.tasks == (Task.DECAY, Task.CURATOR)
    assert plan.curator_cycle == 3


def test_decay_runs_once_per_tick() -> None:
    assert plan_maintenance("a", 9, 0, Ledger(decay=9), policy=POLICY).tasks == ()
    assert plan_maintenance("a", 10, 0, Ledger(decay=9), policy=POLICY).tasks == (Task.DECAY,)


def test_compaction_is_periodic_or_triggered() -> None:
    ledger = Ledger(decay=199, curator=150, compaction=None)
    assert Task.COMPACTION in plan_maintenance("a", 200, 0, ledger, policy=POLICY).tasks
    quiet = Ledger(decay=210, curator=200, compaction=200)
    assert Task.COMPACTION not in plan_maintenance("a", 211, 0, quiet, policy=POLICY).tasks
    forced = plan_maintenance("a", 211, 0, quiet, force_compaction=True, policy=POLICY)
    assert Task.COMPACTION in forced.tasks
    crowded = plan_maintenance(
        "a", 211, 0, quiet, live_memories=POLICY.compaction_trigger_memories + 1, policy=POLICY
    )
    assert Task.COMPACTION in crowded.tasks
    # The count trigger fires at most once per tick.
    again = plan_maintenance(
        "a",
        211,
        0,
        Ledger(decay=211, curator=200, compaction=211),
        live_memories=POLICY.compaction_trigger_memories + 1,
        policy=POLICY,
    )
    assert again.tasks == ()


def test_pressure_postpones_without_forgetting() -> None:
    ledger = Ledger(decay=199, curator=150, compaction=0)
    throttled = plan_maintenance("a", 200, 0, ledger, pressure=Pressure.THROTTLED, policy=POLICY)
    assert throttled.tasks == (Task.DECAY,)
    assert throttled.postponed == (Task.CURATOR, Task.COMPACTION)
    paused = plan_maintenance("a", 200, 0, ledger, pressure=Pressure.PAUSED, policy=POLICY)
    assert paused.tasks == ()
    assert paused.postponed == (Task.DECAY, Task.CURATOR, Task.COMPACTION)
    # Once the pressure is gone the same tasks are still due.
    calm = plan_maintenance("a", 201, 0, ledger.advanced(Task.DECAY, 200), policy=POLICY)
    assert calm.tasks == (Task.DECAY, Task.CURATOR, Task.COMPACTION)


@pytest.mark.parametrize(
    ("signals", "expected"),
    [
        (PressureSignals(), Pressure.NORMAL),
        (PressureSignals(consumer_lag=4_999), Pressure.NORMAL),
        (PressureSignals(consumer_lag=5_000), Pressure.THROTTLED),
        (PressureSignals(consumer_lag=50_000), Pressure.PAUSED),
        (PressureSignals(dead_letters=49, ingested=0), Pressure.NORMAL),
        (PressureSignals(dead_letters=60, ingested=100), Pressure.THROTTLED),
        (PressureSignals(dead_letters=60, ingested=1_000), Pressure.NORMAL),
    ],
)
def test_pressure_levels(signals: PressureSignals, expected: Pressure) -> None:
    assert assess_pressure(signals, POLICY) is expected


def test_the_ledger_never_moves_backwards() -> None:
    ledger = Ledger(curator=100)
    assert ledger.advanced(Task.CURATOR, 50) == ledger
    assert ledger.advanced(Task.CURATOR, 150).curator == 150


def test_agents_without_ticks_count_blocks_of_event_time() -> None:
    assert agent_tick(None, 125_000, 12_000) == 10
    assert agent_tick(42, 125_000, 12_000) == 42


def test_replaying_the_same_ticks_makes_the_same_decisions_however_the_timer_fired() -> None:
    """Two timers firing at different moments see different tick sequences; both run
    one curator cycle per crossed boundary and agree on the cycle numbers."""
    ticks = list(range(0, 501))
    runs: list[list[int]] = []
    for seed in (1, 2, 3):
        rng = random.Random(seed)
        seen = sorted({0, *rng.sample(ticks, 60), 500})
        ledger = Ledger()
        cycles: list[int] = []
        for tick in seen:
            plan = plan_maintenance("a", tick, 0, ledger, policy=POLICY)
            for task in plan.tasks:
                ledger = ledger.advanced(task, tick)
            if Task.CURATOR in plan.tasks:
                cycles.append(plan.curator_cycle)
        runs.append(cycles)
    for cycles in runs:
        assert cycles == sorted(set(cycles))  # each cycle at most once, in order
        assert cycles[-1] == 10


def test_policy_rejects_zero_periods() -> None:
    with pytest.raises(ValueError):
        MaintenancePolicy(curator_every_ticks=0)


def test_commands_from_the_sdk_schema_parse_and_bad_ones_are_rejected() -> None:
    from grimoire.streams.inbound.events import Rejection
    from grimoire.streams.inbound.maintenance_command import (
        MaintenanceCommand,
        parse_maintenance_command,
    )
    from grimoire.streams.inbound.validators import InputLimits
    from grimoire.topics.schemas import MaintenanceCommandV1

    limits = InputLimits()
    wire = MaintenanceCommandV1(agent_id="golem-1", reason="manual", force_compaction=True)
    assert parse_maintenance_command(wire.dumps_json(), limits) == MaintenanceCommand(
        "golem-1", "manual", True
    )
    for raw, reason in (
        (b"{not json", "invalid_json"),
        (b'{"reason": "block"}', "missing_field"),
        (b'{"agent_id": "a", "reason": "sometimes"}', "invalid_value"),
        (b'{"agent_id": "a", "force_compaction": "yes"}', "invalid_value"),
        (b'{"agent_id": "a", "schema": "grimoire.maintenance_command/9"}', "unsupported_schema"),
    ):
        rejected = parse_maintenance_command(raw, limits)
        assert isinstance(rejected, Rejection)
        assert rejected.reason == reason


def test_decay_is_not_due_when_its_schedule_has_nothing_due_by_the_watermark() -> None:
    assert DecayOutlook(True, None).idle(1_000)
    assert DecayOutlook(True, 1_001).idle(1_000)
    assert not DecayOutlook(True, 1_000).idle(1_000)  # due at the watermark itself
    assert not DecayOutlook(False, None).idle(1_000)  # never seeded: the pass seeds it
    idle, due = DecayOutlook(True, 5_000), DecayOutlook(True, 500)
    assert plan_maintenance("a", 7, 1_000, Ledger(), policy=POLICY, decay=idle).tasks == ()
    assert plan_maintenance("a", 7, 1_000, Ledger(), policy=POLICY, decay=due).tasks == (
        Task.DECAY,
    )
    # It only ever takes decay off: the curator's period is crossed regardless.
    crossed = plan_maintenance("a", 50, 1_000, Ledger(), policy=POLICY, decay=idle)
    assert crossed.tasks == (Task.CURATOR,)
    # And the ticks still rule: a pass done this tick is not due again.
    assert plan_maintenance("a", 7, 1_000, Ledger(decay=7), policy=POLICY, decay=due).tasks == ()
