"""What block-cadence maintenance is due for one agent (docs/design.md §6), decided from ticks.

The timer that triggers maintenance fires on wall-clock time, so *when* a command
arrives is not reproducible; *what it does* must be. Every decision here is a
function of the agent's tick counter (event data) and a ledger of the ticks at
which each task last ran: a replay of the log that reaches the same ticks runs
the same curator cycles and compactions, however the timer happened to fire.

Pressure (consumer lag, a dead-letter surge) may postpone a task but never
changes what it does: a postponed task stays due, and the ledger only advances
when the task has completed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final


class Task(StrEnum):
    DECAY = "decay"
    CURATOR = "curator"
    COMPACTION = "compaction"


class Pressure(StrEnum):
    NORMAL = "normal"  # everything that is due runs
    THROTTLED = "throttled"  # only the cheap, bounded decay pass runs
    PAUSED = "paused"  # nothing runs; what is due stays due


@dataclass(frozen=True, slots=True)
class MaintenancePolicy:
    decay_every_ticks: int = 1
    curator_every_ticks: int = 50
    compaction_every_ticks: int = 200
    # A live-memory count above this makes compaction due at the next tick even
    # between its periodic boundaries ("on a trigger").
    compaction_trigger_memories: int = 50_000
    # Ingest lag (messages behind the high-water mark on the worker's partitions).
    throttle_lag: int = 5_000
    pause_lag: int = 50_000
    # Dead letters per ingested event since the previous command: a producer
    # gone bad should not also pay for maintenance on the same worker.
    dead_letter_surge_ratio: float = 0.5
    dead_letter_surge_min: int = 50

    def __post_init__(self) -> None:
        for name in ("decay_every_ticks", "curator_every_ticks", "compaction_every_ticks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")


DEFAULT_MAINTENANCE_POLICY: Final = MaintenancePolicy()


@dataclass(frozen=True, slots=True)
class PressureSignals:
    consumer_lag: int = 0
    dead_letters: int = 0  # since the previous maintenance command on this worker
    ingested: int = 0  # likewise


def assess_pressure(
    signals: PressureSignals, policy: MaintenancePolicy = DEFAULT_MAINTENANCE_POLICY
) -> Pressure:
    if signals.consumer_lag >= policy.pause_lag:
        return Pressure.PAUSED
    surge = signals.dead_letters >= policy.dead_letter_surge_min and (
        signals.dead_letters >= policy.dead_letter_surge_ratio * max(1, signals.ingested)
    )
    if surge or signals.consumer_lag >= policy.throttle_lag:
        return Pressure.THROTTLED
    return Pressure.NORMAL


@dataclass(frozen=True, slots=True)
class Ledger:
    """The tick at which each task last completed for one agent (None: never)."""

    decay: int | None = None
    curator: int | None = None
    compaction: int | None = None

    def last(self, task: Task) -> int | None:
        last: int | None = getattr(self, task.value)
        return last

    def advanced(self, task: Task, tick: int) -> Ledger:
        """Never moves backwards: a stale duplicate command cannot re-open a task."""
        last = self.last(task)
        return self if last is not None and last >= tick else replace(self, **{task.value: tick})


def agent_tick(tick: int | None, watermark_ms: int, block_interval_ms: int) -> int:
    """The agent's own tick, or, for agents that send none, the block its latest
    event time falls in: both come from the events, never from the clock."""
    if tick is not None:
        return tick
    if block_interval_ms <= 0:
        raise ValueError("block interval must be positive")
    return watermark_ms // block_interval_ms


def _period_crossed(tick: int, last: int | None, every: int) -> bool:
    if last is None:
        return tick >= every
    return tick // every > last // every


@dataclass(frozen=True, slots=True)
class DecayOutlook:
    """What an agent's decay schedule holds: whether it was ever seeded, and the
    earliest due time in it (None: nothing scheduled)."""

    seeded: bool
    next_due_ms: int | None

    def idle(self, as_of_ms: int) -> bool:
        """Nothing to decay by `as_of_ms`: a pass would read nothing and write
        nothing. An unseeded schedule is never idle (its pass seeds it)."""
        return self.seeded and (self.next_due_ms is None or self.next_due_ms > as_of_ms)


@dataclass(frozen=True, slots=True)
class MaintenancePlan:
    agent_id: str
    tick: int
    as_of_ms: int  # the agent's event-time watermark: the "now" every task uses
    pressure: Pressure
    tasks: tuple[Task, ...]
    postponed: tuple[Task, ...]
    # Cycle numbers count period boundaries, so a replay numbers them alike.
    curator_cycle: int


def plan_maintenance(
    agent_id: str,
    tick: int,
    as_of_ms: int,
    ledger: Ledger,
    *,
    live_memories: int = 0,
    force_compaction: bool = False,
    pressure: Pressure = Pressure.NORMAL,
    policy: MaintenancePolicy = DEFAULT_MAINTENANCE_POLICY,
    decay: DecayOutlook | None = None,
) -> MaintenancePlan:
    """What is due at `tick`. With the agent's `decay` outlook, a decay pass that
    would find nothing due by `as_of_ms` is not due: most ticks of a young store
    cross no band, and a pass that reads nothing still cost a ledger entry, two
    memory-events and a witness record. The outlook is the schedule as folded
    up to this command's place in the journal, so a replay skips alike."""
    due: list[Task] = []
    decay_idle = decay is not None and decay.idle(as_of_ms)
    if not decay_idle and (ledger.decay is None or tick - ledger.decay >= policy.decay_every_ticks):
        due.append(Task.DECAY)
    if _period_crossed(tick, ledger.curator, policy.curator_every_ticks):
        due.append(Task.CURATOR)
    compaction_last = ledger.compaction
    triggered = force_compaction or (
        live_memories > policy.compaction_trigger_memories
        and (compaction_last is None or tick > compaction_last)
    )
    if triggered or _period_crossed(tick, compaction_last, policy.compaction_every_ticks):
        due.append(Task.COMPACTION)
    if pressure is Pressure.PAUSED:
        runnable: list[Task] = []
    elif pressure is Pressure.THROTTLED:
        runnable = [task for task in due if task is Task.DECAY]
    else:
        runnable = due
    return MaintenancePlan(
        agent_id=agent_id,
        tick=tick,
        as_of_ms=as_of_ms,
        pressure=pressure,
        tasks=tuple(runnable),
        postponed=tuple(task for task in due if task not in runnable),
        curator_cycle=tick // policy.curator_every_ticks,
    )
