"""`python -m bench maintenance`: one due maintenance pass at 10,000 and 100,000 memories.

For each size the agent's store is grown (`bench_corpus`, the write path's own
planner) to the size minus the timed windows of new memories; a catch-up pass
brings decay, the curator and compaction up to date (untimed; the curator then
reads its episode backlog and decay drains its own, as many ticks would); then,
`REPEATS` times, `fresh` memories are written (~250 ticks of events), the decay
passes of the window's earlier ticks run (untimed: the worker runs one every
tick, so by the last tick only that tick's crossings are due), and one pass with
every task due (decay, curator cycle, compaction) is timed through the
maintenance handler the worker runs. A pass whose cost followed the store's size
instead of the work due would show as `ratios` above 1.2 (issue 24's target for
the decay pass and the whole pass).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from bench.cpu_sample import redis_cpu_s
from bench.services import corpus_on_redis, on_services, own_services
from grimoire.agents.maintenance.compaction_task import CompactionRunner
from grimoire.agents.maintenance.decay_task import DecayRunner
from grimoire.agents.maintenance.handler import MaintenanceHandler
from grimoire.agents.ports import MemorySink
from grimoire.infra.embedding.embedder import SentenceTransformerEmbedder
from grimoire.infra.runtime import Runtime
from grimoire.infra.settings import Settings
from grimoire.streams.maintenance.schedule import MaintenancePlan, Pressure, Task, agent_tick
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.curator_store import DEFAULT_MAX_EPISODES, RedisCuratorStore
from grimoire.tables.memory.agent_state import AgentStateStore

logger = logging.getLogger(__name__)

AGENT = "golem-maintenance"
DEFAULT_SIZES = (10_000, 100_000)
DEFAULT_FRESH = 500
REPEATS = 5
TARGET_RATIO = 1.2  # issue 24: decay and the whole pass, max and median
BENCH_MIN_AGE_H = 6.0
CATCH_UP_LIMIT = 10_000  # decay entries per untimed catch-up pass


async def _plan(state: AgentStateStore, block_ms: int, every: int, serial: int) -> MaintenancePlan:
    field = await state.field(AGENT)
    tick = agent_tick(field.tick, field.watermark_ms, block_ms)
    return MaintenancePlan(
        agent_id=AGENT,
        tick=tick,
        as_of_ms=field.watermark_ms,
        pressure=Pressure.NORMAL,
        tasks=tuple(Task),
        postponed=(),
        # A cycle number no earlier pass used, so the curator really runs.
        curator_cycle=tick // every + serial,
    )


@dataclass
class _PhaseClock:
    """Compaction's checkpoint hook: ms from the task's start (or the previous
    phase) to each phase, summed per pass (outbox batches add up)."""

    last: float = 0.0
    current: dict[str, float] = field(default_factory=dict)
    passes: list[dict[str, float]] = field(default_factory=list)

    def start(self) -> None:
        self.last = time.perf_counter()
        self.current = {}
        self.passes.append(self.current)

    async def __call__(self, phase: str) -> None:
        now = time.perf_counter()
        self.current[phase] = self.current.get(phase, 0.0) + (now - self.last) * 1000
        self.last = now


def _time_compaction(handler: MaintenanceHandler, clock: _PhaseClock) -> None:
    runner = handler.runners.get(Task.COMPACTION)
    if not isinstance(runner, CompactionRunner):
        return
    timed = replace(runner, task=replace(runner.task, checkpoint=clock))

    async def run(plan: MaintenancePlan) -> Any:
        clock.start()
        return await timed(plan)

    handler.runners = {**handler.runners, Task.COMPACTION: run}


async def _cpu_ms(redis: Any) -> float:
    """CPU spent so far by this process (every thread: the model's too) and by the
    bench's own Redis: unlike wall time, what a pass costs does not depend on what
    else the machine runs (wall time on a shared machine is mostly waiting)."""
    server = redis_cpu_s(await redis.info("cpu"))
    return (time.process_time() + server) * 1000


@dataclass
class _CpuMeter:
    """Each task's CPU (process + Redis) per pass, by wrapping the handler's runners."""

    redis: Any
    spent: dict[str, list[float]] = field(default_factory=dict)

    def wrap(self, handler: MaintenanceHandler) -> Mapping[Task, Any]:
        """Meter the handler's runners; returns the unmetered ones."""
        runners = handler.runners
        handler.runners = {task: self._metered(task, run) for task, run in runners.items()}
        return runners

    def _metered(self, task: Task, runner: Any) -> Any:
        async def run(plan: MaintenancePlan) -> Any:
            begun = await _cpu_ms(self.redis)
            try:
                return await runner(plan)
            finally:
                spent = await _cpu_ms(self.redis) - begun
                self.spent.setdefault(task.value, []).append(spent)

        return run


async def _catch_up(
    handler: MaintenanceHandler,
    plan: MaintenancePlan,
    later: Callable[[], Awaitable[MaintenancePlan]],
    curator_store: RedisCuratorStore,
) -> None:
    """One pass with every task, then curator cycles until one leaves its episode
    watermark where it was and decay passes until one finds nothing due: a store
    loaded at once leaves both a backlog that many ticks would drain (the curator
    reads at most `DEFAULT_MAX_EPISODES` episodes a cycle, oldest first, so a timed
    cycle would otherwise still be reading the load's episodes, not the fresh
    window's)."""
    await handler.execute(plan)
    curator = handler.runners.get(Task.CURATOR)
    for _ in range(1_000):
        if curator is None:
            break
        mark = (await curator_store.state(AGENT)).watermark_ms
        await curator(await later())
        if (await curator_store.state(AGENT)).watermark_ms == mark:
            break
    else:
        raise RuntimeError(f"the curator never caught up ({DEFAULT_MAX_EPISODES} a cycle)")
    decay = handler.runners.get(Task.DECAY)
    if decay is None:
        return
    if isinstance(decay, DecayRunner):
        decay = replace(decay, limit=CATCH_UP_LIMIT)
    for _ in range(10_000):
        report = await decay(plan)
        if int(report.get("entries_decayed", 0)) == 0:
            return
    raise RuntimeError("decay never caught up")


async def _earlier_ticks(handler: MaintenanceHandler, plan: MaintenancePlan, block_ms: int) -> int:
    """The decay passes of a window's ticks before `plan`'s: everything due by the
    previous tick, in passes of the runner's own budget (at 100,000 memories a
    window crosses ~1,100 bands, ~4 a tick: no tick's pass would reach its budget).
    How many entries they decayed."""
    decay = handler.runners.get(Task.DECAY)
    if decay is None:
        return 0
    earlier = replace(plan, as_of_ms=plan.as_of_ms - block_ms)
    done = 0
    for _ in range(10_000):
        decayed = int((await decay(earlier)).get("entries_decayed", 0))
        if decayed == 0:
            return done
        done += decayed
    raise RuntimeError("decay never caught up")


async def _run(settings: Settings, *, sizes: Sequence[int], fresh: int) -> dict[str, Any]:
    embedder = SentenceTransformerEmbedder.from_settings(settings)
    redis, store, loader = await corpus_on_redis(settings, embedder, AGENT)
    sink = MemorySink()
    runtime = Runtime(settings, sink, embedder)
    state = AgentStateStore(redis, settings.broker.topic_prefix)
    curator_store = RedisCuratorStore(redis, settings.broker.topic_prefix)
    block_ms = int(settings.worker.block_interval_s * 1000)
    every = settings.maintenance.curator_every_ticks
    schedule = Keyspace(settings.broker.topic_prefix).decay_schedule(AGENT)
    report: dict[str, Any] = {}
    serial = 0
    try:
        handler = await runtime.maintenance_handler()
        clock = _PhaseClock()
        _time_compaction(handler, clock)
        meter = _CpuMeter(redis)
        for size in sizes:
            started = time.perf_counter()
            await loader.load_until(size - REPEATS * fresh)

            async def later() -> MaintenancePlan:
                nonlocal serial
                serial += 1
                return await _plan(state, block_ms, every, serial)

            await _catch_up(handler, await later(), later, curator_store)
            clock.passes.clear()
            unmetered = meter.wrap(handler)
            cpu: list[float] = []
            samples: list[float] = []
            counts: list[float] = []
            tasks: dict[str, list[float]] = {task.value: [] for task in Task}
            work: dict[str, list[int]] = {task.value: [] for task in Task}
            episodes: list[int] = []
            between: list[int] = []
            task_cpu: dict[str, list[float]] = {}
            for repeat in range(REPEATS):
                # Each timed pass follows a window of `fresh` new memories (the
                # last one lands exactly on the size).
                await loader.load_until(size - fresh * (REPEATS - 1 - repeat))
                serial += 1
                plan = await _plan(state, block_ms, every, serial)
                between.append(await _earlier_ticks(handler, plan, block_ms))
                # The worker counts the agent's memories before it plans a pass
                # (the compaction trigger): timed apart, it is not in `execute`.
                begun = time.perf_counter()
                await handler.live_count(AGENT)
                counts.append((time.perf_counter() - begun) * 1000)
                before = len(sink.sent)
                meter.spent.clear()
                spent = await _cpu_ms(redis)
                begun = time.perf_counter()
                await handler.execute(plan)
                samples.append((time.perf_counter() - begun) * 1000)
                cpu.append(await _cpu_ms(redis) - spent)
                for name, values in meter.spent.items():
                    task_cpu.setdefault(name, []).extend(values)
                for _topic, _key, value in sink.sent[before:]:
                    _record_task_time(value, tasks, work, episodes)
            handler.runners = unmetered
            # Entries due by the last pass's time that its budget left for later ones.
            backlog = await redis.zcount(schedule, "-inf", plan.as_of_ms)
            full = await _full_decay_passes(handler, plan, redis, schedule)
            stored = await store.count(AGENT)
            keys = Keyspace(settings.broker.topic_prefix)
            curated = {
                "scheduled": await redis.zcard(keys.curator_due(AGENT)),
                "playbook": await redis.scard(keys.curator_playbook(AGENT)),
                "bookkept": await redis.hlen(keys.curator_entries(AGENT)),
            }
            label = str(size)
            report[label] = {
                "pass_ms": round(sorted(samples)[len(samples) // 2], 2),
                "passes_ms": [round(sample, 2) for sample in samples],
                "task_ms": {
                    name: round(max(values), 2) for name, values in tasks.items() if values
                },
                "task_ms_median": {
                    name: round(sorted(values)[len(values) // 2], 2)
                    for name, values in tasks.items()
                    if values
                },
                # CPU (this process + its Redis) of each pass and task: the cost
                # without the waiting a shared machine adds to wall time.
                "cpu_ms": _spread(cpu),
                "task_cpu_ms": {name: _spread(values) for name, values in task_cpu.items()},
                # What each timed pass touched: decay entries snapshotted, curated
                # entries the curator looked at, compaction sources replaced.
                "task_work": {name: done for name, done in work.items() if done},
                "curator_episodes": episodes,
                # Entries the window's earlier ticks decayed (untimed, per window).
                "decay_between": between,
                "live_count_ms": [round(ms, 2) for ms in counts],
                # A decay pass over exactly its budget of due entries (the most one
                # ever does): the same work at both sizes.
                "decay_full_pass": full,
                "compaction_phase_ms": [
                    {phase: round(ms, 1) for phase, ms in timed.items()} for timed in clock.passes
                ],
                "decay_backlog": backlog,
                # The curator's indexes after the last pass (what it could read).
                "curator_indexes": curated,
                "memories": stored,
                "total_s": round(time.perf_counter() - started, 1),
            }
            logger.info("maintenance at %d: %s", size, report[label])
    finally:
        await runtime.close()
        await redis.aclose()
        embedder.close()
    smallest, largest = report[str(min(sizes))], report[str(max(sizes))]

    def over(value: Callable[[dict[str, Any]], float]) -> float:
        return round(value(largest) / max(value(smallest), 1e-6), 3)

    ratio = over(lambda size: float(size["pass_ms"]))
    # Issue 24's targets compare the decay pass and the whole pass, at the max of
    # the passes and at their median; the other tasks are shown for where it goes.
    ratios = {
        "pass": ratio,
        "pass_max": over(lambda size: float(max(size["passes_ms"]))),
        "pass_cpu": over(lambda size: float(size["cpu_ms"]["median"])),
        "pass_cpu_max": over(lambda size: float(size["cpu_ms"]["max"])),
        "decay_full_pass": over(lambda size: float(size["decay_full_pass"]["ms"]["median"])),
        "decay_full_pass_max": over(lambda size: float(size["decay_full_pass"]["ms"]["max"])),
        "decay_full_pass_cpu": over(
            lambda size: float(size["decay_full_pass"]["cpu_ms"]["median"])
        ),
        **{
            f"{task.value}_cpu": over(
                lambda size, t=task.value: size["task_cpu_ms"].get(t, {}).get("median", 0.0)
            )
            for task in Task
        },
        **{
            f"{task.value}{suffix}": over(lambda size, t=task.value, k=key: size[k].get(t, 0.0))
            for task in Task
            for suffix, key in (("", "task_ms"), ("_median", "task_ms_median"))
        },
    }
    report["ratio"] = ratio
    report["ratios"] = ratios
    report["target_ratio"] = TARGET_RATIO
    # As issue 24 words it: the whole pass and the timed decay pass, max and median.
    # The timed decay pass takes the last tick's crossings, which an older agent has
    # more of (the 100,000 store spans ~7 days of event time, the 10,000 one ~17 h):
    # the same pass over the same number of entries is `decay_full_pass`.
    report["meets_target"] = all(
        ratios[name] <= TARGET_RATIO for name in ("pass", "pass_max", "decay", "decay_median")
    )
    report["meets_target_at_equal_decay_work"] = all(
        ratios[name] <= TARGET_RATIO
        for name in ("pass", "pass_max", "decay_full_pass", "decay_full_pass_max")
    )
    report["fresh_per_pass"] = fresh
    report["repeats"] = REPEATS
    report["compaction_min_age_h"] = BENCH_MIN_AGE_H
    report["cpus"] = os.cpu_count()
    return report


async def _full_decay_passes(
    handler: MaintenanceHandler, plan: MaintenancePlan, redis: Any, schedule: str
) -> dict[str, Any]:
    """`REPEATS` decay passes, each after the next `budget` scheduled entries were
    made due at `plan`'s time: wall and CPU ms of a pass that takes its whole budget."""
    decay = handler.runners.get(Task.DECAY)
    budget = decay.limit if isinstance(decay, DecayRunner) else 0
    if decay is None or not budget:
        return {}
    wall: list[float] = []
    cpu: list[float] = []
    taken: list[int] = []
    for _ in range(REPEATS):
        # The soonest due after now: memories whose next crossing is closest.
        upcoming = await redis.zrangebyscore(
            schedule, f"({plan.as_of_ms}", "+inf", start=0, num=budget
        )
        await redis.zadd(schedule, dict.fromkeys(upcoming, plan.as_of_ms))
        spent = await _cpu_ms(redis)
        begun = time.perf_counter()
        await decay(plan)
        wall.append((time.perf_counter() - begun) * 1000)
        cpu.append(await _cpu_ms(redis) - spent)
        taken.append(len(upcoming))  # each read, snapshotted and rescheduled
    return {"entries": taken, "ms": _spread(wall), "cpu_ms": _spread(cpu)}


def _spread(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": round(ordered[len(ordered) // 2], 2),
        "max": round(ordered[-1], 2),
        "min": round(ordered[0], 2),
    }


def _record_task_time(
    value: bytes,
    tasks: dict[str, list[float]],
    work: dict[str, list[int]],
    episodes: list[int],
) -> None:
    event = orjson.loads(value)
    names = {"GrimoireDecay": "decay", "CuratorCycleComplete": "curator"}
    names["GrimoireCompaction"] = "compaction"
    name = names.get(event.get("type", ""))
    report = event.get("report") or {}
    if name and "elapsed_ms" in report:
        tasks[name].append(float(report["elapsed_ms"]))
        counted = {"decay": "entries_decayed", "curator": "entries_seen"}
        work[name].append(int(report.get(counted.get(name, "sources"), 0)))
        if name == "curator":
            episodes.append(int(report.get("episodes_seen", 0)))


def run_maintenance_bench(
    settings: Settings, *, sizes: Sequence[int] = DEFAULT_SIZES, fresh: int = DEFAULT_FRESH
) -> dict[str, Any]:
    if len(sizes) < 2 or list(sizes) != sorted(set(sizes)) or min(sizes) <= REPEATS * fresh:
        raise ValueError(
            f"two or more increasing sizes, each larger than {REPEATS} windows of `fresh`"
        )
    services = own_services("maintenance", 20092, 17379)
    started_services = services.up()
    settings = on_services(
        settings,
        services,
        topic_prefix=f"bmaint{uuid.uuid4().hex[:6]}",
        # 10,000 memories span ~17 h of event time: with the 7-day default
        # only the larger store would have anything old enough to compact.
        maintenance_compaction_min_age_h=BENCH_MIN_AGE_H,
    )
    try:
        return asyncio.run(_run(settings, sizes=sizes, fresh=fresh))
    finally:
        if started_services:
            services.down()
