"""`grimoire bench maintenance`: one due maintenance pass at 10,000 and 100,000 memories.

For each size the agent's store is grown (`bench_corpus`, the write path's own
planner) to the size minus one tick-window of new memories; a catch-up pass
brings decay, the curator and compaction up to date (untimed; decay then drains
its backlog with its own passes, as its per-tick budget would over many ticks);
the last `fresh` memories are then written, as a block window's worth of new
events would be, and one pass with every task due (decay, curator cycle,
compaction) is timed through the maintenance handler the worker runs. A pass
whose cost followed the store's size instead of the work due would show as
`ratio` > 2.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from grimoire.agents.maintenance.compaction_task import CompactionRunner
from grimoire.agents.maintenance.decay_task import DecayRunner
from grimoire.agents.maintenance.handler import MaintenanceHandler
from grimoire.agents.ports import MemorySink
from grimoire.infra.bench.corpus import CorpusLoader
from grimoire.infra.embedding.embedder import SentenceTransformerEmbedder
from grimoire.infra.local.services import LocalServices, ServicePorts
from grimoire.infra.runtime import Runtime
from grimoire.infra.settings import Settings
from grimoire.streams.maintenance.schedule import MaintenancePlan, Pressure, Task, agent_tick
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.memory.agent_state import AgentStateStore
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.redis_client import create_redis

logger = logging.getLogger(__name__)

AGENT = "golem-maintenance"
DEFAULT_SIZES = (10_000, 100_000)
DEFAULT_FRESH = 500
REPEATS = 3
TARGET_RATIO = 2.0
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


async def _catch_up(handler: MaintenanceHandler, plan: MaintenancePlan) -> None:
    """One pass with every task, then decay passes until one finds nothing due:
    the per-tick budget spreads the backlog of a store loaded at once over many
    passes, and only decay has one to drain."""
    await handler.execute(plan)
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


async def _run(settings: Settings, *, sizes: Sequence[int], fresh: int) -> dict[str, Any]:
    embedder = SentenceTransformerEmbedder.from_settings(settings)
    redis = create_redis(settings.redis_url, 8)
    store = RedisMemoryStore(
        redis, settings.topic_prefix, embedder.dims, clock_ms=lambda: int(time.time() * 1000)
    )
    await store.ensure_schema()
    loader = CorpusLoader(
        store,
        embedder,
        AGENT,
        batch_size=settings.embed_batch_size,
        eidolon_weight=settings.eidolon_state_weight,
        limits=settings.input_limits,
    )
    sink = MemorySink()
    runtime = Runtime(settings, sink, embedder)
    state = AgentStateStore(redis, settings.topic_prefix)
    block_ms = int(settings.block_interval_s * 1000)
    every = settings.maintenance_curator_every_ticks
    schedule = Keyspace(settings.topic_prefix).decay_schedule(AGENT)
    report: dict[str, Any] = {}
    serial = 0
    try:
        handler = (await runtime.handlers()).applier.maintenance
        clock = _PhaseClock()
        _time_compaction(handler, clock)
        for size in sizes:
            started = time.perf_counter()
            await loader.load_until(size - REPEATS * fresh)
            serial += 1
            await _catch_up(handler, await _plan(state, block_ms, every, serial))
            clock.passes.clear()
            samples: list[float] = []
            tasks: dict[str, list[float]] = {task.value: [] for task in Task}
            work: dict[str, list[int]] = {task.value: [] for task in Task}
            for repeat in range(REPEATS):
                # Each timed pass follows a window of `fresh` new memories (the
                # last one lands exactly on the size).
                await loader.load_until(size - fresh * (REPEATS - 1 - repeat))
                serial += 1
                plan = await _plan(state, block_ms, every, serial)
                before = len(sink.sent)
                begun = time.perf_counter()
                await handler.execute(plan)
                samples.append((time.perf_counter() - begun) * 1000)
                for _topic, _key, value in sink.sent[before:]:
                    _record_task_time(value, tasks, work)
            stored = await store.count(AGENT)
            # Entries due by the last pass's time that its budget left for later ones.
            backlog = await redis.zcount(schedule, "-inf", plan.as_of_ms)
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
                # What each timed pass touched: decay entries snapshotted, curator
                # episodes read, compaction sources replaced.
                "task_work": {name: counts for name, counts in work.items() if counts},
                "compaction_phase_ms": [
                    {phase: round(ms, 1) for phase, ms in timed.items()} for timed in clock.passes
                ],
                "decay_backlog": backlog,
                "memories": stored,
                "total_s": round(time.perf_counter() - started, 1),
            }
            logger.info("maintenance at %d: %s", size, report[label])
    finally:
        await runtime.close()
        await redis.aclose()
        embedder.close()
    smallest, largest = str(min(sizes)), str(max(sizes))
    ratio = report[largest]["pass_ms"] / max(report[smallest]["pass_ms"], 1e-6)
    report["ratio"] = round(ratio, 3)
    report["target_ratio"] = TARGET_RATIO
    report["meets_target"] = ratio <= TARGET_RATIO
    report["fresh_per_pass"] = fresh
    report["repeats"] = REPEATS
    report["compaction_min_age_h"] = BENCH_MIN_AGE_H
    report["cpus"] = os.cpu_count()
    return report


def _record_task_time(
    value: bytes, tasks: dict[str, list[float]], work: dict[str, list[int]]
) -> None:
    event = orjson.loads(value)
    names = {"GrimoireDecay": "decay", "CuratorCycleComplete": "curator"}
    names["GrimoireCompaction"] = "compaction"
    name = names.get(event.get("type", ""))
    report = event.get("report") or {}
    if name and "elapsed_ms" in report:
        tasks[name].append(float(report["elapsed_ms"]))
        counted = {"decay": "entries_decayed", "curator": "episodes_seen"}
        work[name].append(int(report.get(counted.get(name, "sources"), 0)))


def run_maintenance_bench(
    settings: Settings, *, sizes: Sequence[int] = DEFAULT_SIZES, fresh: int = DEFAULT_FRESH
) -> dict[str, Any]:
    if len(sizes) < 2 or list(sizes) != sorted(set(sizes)) or min(sizes) <= REPEATS * fresh:
        raise ValueError("two or more increasing sizes, each larger than 3 windows of `fresh`")
    root = Path(os.environ.get("GRIMOIRE_STATE_DIR", ".grimoire"))
    state_dir = root / "bench-maintenance"
    ports = ServicePorts(
        kafka=int(os.environ.get("GRIMOIRE_BENCH_KAFKA_PORT", "20092")),
        redis=int(os.environ.get("GRIMOIRE_BENCH_REDIS_PORT", "17379")),
    )
    services = LocalServices(state_dir, ports, wheel_cache=root / "wheels")
    started_services = services.up()
    settings = settings.model_copy(
        update={
            "broker_url": f"kafka://{services.kafka_bootstrap}",
            "redis_url": services.redis_url,
            "topic_prefix": f"bmaint{uuid.uuid4().hex[:6]}",
            # 10,000 memories span ~17 h of event time: with the 7-day default
            # only the larger store would have anything old enough to compact.
            "maintenance_compaction_min_age_h": BENCH_MIN_AGE_H,
        }
    )
    try:
        return asyncio.run(_run(settings, sizes=sizes, fresh=fresh))
    finally:
        if started_services:
            services.down()
