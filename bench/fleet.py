"""`python -m bench fleet`: N agents (default 1,000) on the 12 s block cadence through
the real broker (tansu), Redis and worker process(es), and a search for the largest
fleet this machine keeps up with.

The workers, by default, as README "Worker roles" recommends for a small machine:
one folds the journal (`--workers`, at nice `--ingest-nice` 5), one serves recalls
(`--recall-workers`, polling the broker every `--recall-fetch-wait-ms` 10 ms);
`--recall-workers 0` runs workers with both roles.

The load (schedule and metric arithmetic in `fleet_plan.py`). Each agent, each block,
at its own offset in the block (agents spread over 80 % of it):

* publishes 4 events with the SDK (topics/client.py): the block's two events of its
  own story from `corpus.corpus_events` (a heartbeat with fresh values, then the
  run's phase event: an alert, a tool call, a user line, an assistant turn with
  thinking, tool use and answer, an action, a report) and the tick's two events of
  `event_stream.generate` in its repetitive mix (a templated heartbeat drawn from a
  handful of values, then a recurring tool call or chat line); the latter get the
  agent's id, tick, event time and an event id;
* about once every 5 blocks, recalls over Kafka (`GrimoireClient.recall`, k=5, a
  `corpus.recall_queries` question, serving its current run);
* at the last block of each run (6 blocks, staggered by agent), after any recall of
  that block, sends `run_ended` with the run's quality (README "Learning from
  outcomes").

Maintenance is the worker's own: its leader's block timer fires every
`block_interval_s`, set to the wall duration of a block, and fans a command out per
agent; what runs is decided from the agent's tick (decay every tick, curator every
50, compaction every 200).

An accelerated clock (`--speed S`) compresses a block into 12/S wall seconds: every
rate is S times the real-time one, so the run stands for `agents x S` agents at
real time (`real_time_equivalent`). `block_s` stays 12, the event-time block.

Metrics, all from one trial:

* `lag_blocks` {p50, p99, max}: per unit (one agent's events of one block), (the
  time the bench saw the last of them decided - the unit's scheduled publish
  time) / wall block. "Decided": the first decision naming the event
  (`source_event_id`) on memory-events, or a dead letter. Units of the first
  `warmup_blocks` blocks are left out (reported in `lag_blocks_all`); a unit never
  decided counts with the drain's end time and in `undecided`.
* `events_per_s`: ingest events decided / (time of the last decision - the load's
  start); `offered_events_per_s`: events published / (blocks x wall block).
* `recallable_ms` {p50, p99}: probe events (an agent of their own, `probes_per_block`
  a block, distinct texts): publish -> the first recall (record_usage false, polled
  every 50 ms once the probe's decision is on memory-events) that returns the
  probe's text. A probe not recallable within `drain_timeout_s` counts at that
  timeout (`missed`; the percentiles are then lower bounds, `lower_bound`).
* `recall_ms` {p50, p99}: the fleet's recalls, round trip through Kafka as the SDK
  sees it (request published → reply read); `recall_handler_ms` the worker's own
  time on them (the reply's `timings_ms.total`), and `recall_stages_ms` that time
  stage by stage.
* `maintenance_share`: the `elapsed_ms` of every completed maintenance task in the
  agents' (and the probe agent's) maintenance logs (tables/maintenance/ledger.py)
  summed, per block of the trial, / the wall block: the share of one worker's block
  spent in maintenance.
  `elapsed_ms` is a pass's wall time in a worker's event loop, where passes run
  beside other agents' applies: an overloaded worker stretches it, and the share
  can pass 1. `maintenance.busy_share` is the share of the load's wall time (its
  start to a block after the drain) in which at least one pass was running (each
  log entry's stream id is when it was recorded; the pass began `elapsed_ms`
  before): overlapping passes count once.
* `redis_bytes_per_memory`: `redis_stored_bytes` (a block after the drain, the
  trial's own keys by MEMORY USAGE plus its index's FT.INFO sizes) over the
  memories in the index (FT.INFO num_docs): everything the trial stored (journal
  keys, witness chains, outboxes, logs, the index) per memory. The server's
  `used_memory` would also count allocator slack and, on a shared Redis, other
  deployments' keys and garbage.
* `cpu`: per process (each worker, tansu, redis, the bench itself), CPU seconds
  (/proc/<pid>/stat utime + stime) / wall seconds over the load and drain: 1.0 is
  one core. `cpu_threads`: each worker's split of the same (`cpu_sample`): its
  event loop (the main thread), the embedder's bulk lanes and query thread, and
  any other threads. `machine`: CPUs, model, the whole machine's busy share over the same
  window (/proc/stat; other people's processes included), load averages.
* `max_agents_under_one_block`: the largest fleet (real-time agents, `agents x
  speed`) whose trial kept `lag_blocks.max` under 1 with every unit decided, found
  by doubling (or halving) from the main run's size, then bisection to 10 %, with
  short trials (`search_blocks` blocks, the same warm-up left out), each on fresh
  services when this command started them. No trial starts that would end past
  `search_cap_s` seconds after the command's start (a trial is reckoned at its
  blocks' wall time + 60 s); `search.capped` says when the cap cut it short, and
  then the answer is a lower bound (`first_failing_as_run` the upper one, if any).

Last line: one JSON object.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import subprocess
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from redis.asyncio import Redis

from bench.corpus import corpus_events, recall_queries
from bench.cpu_sample import cpu_report, find_service_pids, sample_cpu
from bench.event_stream import generate
from bench.event_tail import EventTail
from bench.fleet_plan import (
    FleetShape,
    Slot,
    agent_id,
    agent_tick,
    bytes_per_memory,
    index_bytes,
    lag_summary,
    machine_busy,
    maintenance_share,
    next_search_size,
    run_id,
    run_quality,
    schedule,
    summarise_ms,
    union_s,
)
from bench.ingest import _PROBE_WORDS
from bench.services import bench_ports, cpu_model, on_services
from grimoire.infra.local.services import LocalServices, ServicePorts
from grimoire.infra.local.worker_process import start_worker, stop_worker
from grimoire.infra.settings import Settings
from grimoire.streams.model.records import EventType
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.ledger import MaintenanceLedgerStore
from grimoire.tables.redis_client import create_redis
from grimoire.topics.client import ClientError, GrimoireClient
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import EpisodeV1, OutcomeV1

__all__ = ["FleetOptions", "run_fleet_bench", "run_trial"]

logger = logging.getLogger(__name__)

PROBE_AGENT = "fleet-probe"
_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class FleetOptions:
    agents: int = 1_000
    blocks: int = 10
    speed: float = 1.0
    # The deployment README "Worker roles" recommends for a small machine: one
    # worker folds the journal, one serves recalls.
    workers: int = 1
    # Workers that serve recalls alone (agents/roles.py); with any, the `workers`
    # fold the journal only; with none, they serve recalls too.
    recall_workers: int = 1
    # The recall workers' consumer fetch wait (None: the settings'): a worker that
    # serves recalls alone can poll sooner without slowing a fold.
    recall_fetch_max_wait_ms: int | None = 10
    # The folding workers' nice value beside recall workers (`worker_nice`).
    ingest_nice: int = 5
    recall_every_blocks: int = 5
    warmup_blocks: int = 1
    probes_per_block: int = 2
    k: int = 5
    seed: int = 7
    recall_timeout_s: float = 30.0
    drain_timeout_s: float = 180.0
    search: bool = True
    search_blocks: int = 4
    search_ceiling: int = 16_000  # agents as run (not x speed)
    search_cap_s: float = 900.0


# -- the agents' events ----------------------------------------------------------------


class _AgentStream:
    """One agent's events, block by block: its corpus story's two events of the tick
    and two of the repetitive generator, re-addressed to the agent and tick."""

    def __init__(self, topics: TopicNames, shape: FleetShape, index: int, seed: int) -> None:
        self.agent = agent_id(index)
        self._topics = topics
        self._story = corpus_events(self.agent, seed=seed * 100_003 + index)
        for _ in range(2 * agent_tick(shape, index, 0)):  # start `i mod 6` blocks in
            next(self._story)
        self._mix = generate(topics, events=1 << 62, agents=1, distinct=False, seed=seed + index)

    def block(self, block: int) -> tuple[list[tuple[str, str, bytes]], int]:
        """[(topic, event id, bytes)] for the next block and the story's event time."""
        topics = self._topics
        out: list[tuple[str, str, bytes]] = []
        ts = tick = 0
        for _ in range(2):
            event = next(self._story)
            payload = orjson.loads(event.value)
            ts, tick = int(payload["ts"]), int(payload["tick"])
            topic = {
                EventType.EPISODE: topics.episodes,
                EventType.TOOL: topics.tool_events,
                EventType.TRANSCRIPT: topics.transcripts,
            }[event.event_type]
            out.append((topic, str(payload["event_id"]), event.value))
        for serial in range(2):
            mixed = next(self._mix)
            payload = orjson.loads(mixed.value)
            event_id = f"{self.agent}-mix-{block:06d}-{serial}"
            payload.update(agent_id=self.agent, tick=tick, ts=ts + 1 + serial, event_id=event_id)
            out.append((mixed.topic, event_id, orjson.dumps(payload)))
        return out, ts


# -- what the pipeline says it did -------------------------------------------------------


class _Watch(EventTail):
    """memory-events and dead-letters from their ends (assigned, no group): when the
    bench first saw each awaited event decided, and what else went by."""

    task_name = "bench-fleet-watch"

    def __init__(self, bootstrap: str, topics: TopicNames, partitions: int) -> None:
        super().__init__(bootstrap, topics, partitions)
        self.awaited: dict[str, tuple[str, int]] = {}  # event id -> unit (agent, block)
        self.remaining: Counter[tuple[str, int]] = Counter()
        self.unit_done: dict[tuple[str, int], float] = {}
        self.outcomes_awaited: set[str] = set()
        self.outcomes_seen = 0
        self.decided = 0
        self.last_decided = 0.0
        self.decisions: Counter[str] = Counter()
        self.dead_letters: Counter[str] = Counter()
        self.maintenance_events: Counter[str] = Counter()
        self.probes_decided: set[str] = set()
        self.changed = asyncio.Event()

    def expect(self, unit: tuple[str, int], event_ids: list[str]) -> None:
        for event_id in event_ids:
            self.awaited[event_id] = unit
        self.remaining[unit] += len(event_ids)

    async def batch_read(self) -> None:
        self.changed.set()

    def note(self, topic: str, event: dict[str, Any], now: float) -> None:
        if topic == self._topics.dead_letters:
            self.dead_letters[str(event.get("reason") or "unknown")] += 1
            preview = str(event.get("payload") or "")
            # Our event ids are in the payload preview (its start); settle the unit.
            for event_id in [e for e in self.awaited if e in preview]:
                self._settle(event_id, now)
            return
        kind = str(event.get("type") or "")
        if kind == "GrimoireOutcome":
            if str(event.get("source_event_id")) in self.outcomes_awaited:
                self.outcomes_awaited.discard(str(event.get("source_event_id")))
                self.outcomes_seen += 1
            return
        if kind in ("GrimoireDecay", "CuratorCycleComplete", "GrimoireCompaction"):
            self.maintenance_events[kind] += 1
            return
        source = event.get("source_event_id")
        if kind.startswith("Grimoire") and source:
            if str(source).startswith(PROBE_AGENT):
                self.probes_decided.add(str(source))
                return
            self.decisions[kind] += 1
            self._settle(str(source), now)

    def _settle(self, event_id: str, now: float) -> None:
        unit = self.awaited.pop(event_id, None)
        if unit is None:
            return  # a later candidate of the same event, or not ours
        self.decided += 1
        self.last_decided = now
        self.remaining[unit] -= 1
        if self.remaining[unit] == 0:
            self.unit_done[unit] = now

    def all_decided(self) -> bool:
        return not self.awaited


# -- CPU ---------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _machine() -> tuple[int, int]:
    return machine_busy(Path("/proc/stat").read_text())


# -- one trial ---------------------------------------------------------------------------


@dataclass
class _Tally:
    scheduled: dict[tuple[str, int], float] = field(default_factory=dict)
    late_ms: list[float] = field(default_factory=list)  # actual - scheduled publish
    recall_ms: list[float] = field(default_factory=list)
    recall_handler_ms: list[float] = field(default_factory=list)
    recall_stages_ms: dict[str, list[float]] = field(default_factory=dict)
    recall_failures: Counter[str] = field(default_factory=Counter)
    recall_items: int = 0
    probe_ms: list[float] = field(default_factory=list)
    probes_missed: int = 0  # not recallable within the timeout (in probe_ms at it)
    events: int = 0
    outcomes: int = 0
    recalls: int = 0


async def _probe(
    client: GrimoireClient,
    watch: _Watch,
    serial: int,
    rng: random.Random,
    timeout: float,
    tally: _Tally | None,
) -> None:
    """Publish a distinct episode for the probe agent; time until a recall returns
    it. Recalls are polled only once its decision is on memory-events (nothing can
    find it before), so the probes add next to no recall load while they wait."""
    text = f"fleet probe {serial}: {' '.join(rng.sample(_PROBE_WORDS, 7))}"
    event_id = f"{PROBE_AGENT}-{serial}"
    published = time.monotonic()
    await client.publish_episode(
        EpisodeV1(
            agent_id=PROBE_AGENT,
            ts=1_790_000_000_000 + serial * 12_000,
            tick=serial,
            text=text,
            episode_type="alert",
            importance=0.9,
            event_id=event_id,
        )
    )
    deadline = published + timeout
    while event_id not in watch.probes_decided and time.monotonic() < deadline:
        await asyncio.sleep(_POLL_S)
    while time.monotonic() < deadline:
        try:
            answer = await client.recall(
                PROBE_AGENT, text, k=3, record_usage=False, timeout=deadline - time.monotonic()
            )
        except ClientError:
            break
        if any(item.text == text for item in answer.items):
            if tally is not None:
                tally.probe_ms.append((time.monotonic() - published) * 1000)
            return
        await asyncio.sleep(_POLL_S)
    if tally is not None:
        tally.probes_missed += 1
        tally.probe_ms.append(timeout * 1000)  # at least this long


async def _agent_turn(
    client: GrimoireClient,
    watch: _Watch,
    streams: list[_AgentStream],
    shape: FleetShape,
    slot: Slot,
    due: float,
    query: str,
    options: FleetOptions,
    tally: _Tally,
) -> None:
    stream = streams[slot.agent]
    events, ts = stream.block(slot.block)
    unit = (stream.agent, slot.block)
    watch.expect(unit, [event_id for _, event_id, _ in events])
    tally.scheduled[unit] = due
    tally.late_ms.append((time.monotonic() - due) * 1000)
    for topic, _, value in events:
        await client.publish_raw(topic, stream.agent, value, wait=False)
    tally.events += len(events)
    rid = run_id(shape, slot.agent, slot.block)
    if slot.recall:
        tally.recalls += 1
        began = time.monotonic()
        try:
            answer = await client.recall(
                stream.agent,
                query,
                k=options.k,
                serving_run_id=rid,
                timeout=options.recall_timeout_s,
            )
            tally.recall_ms.append((time.monotonic() - began) * 1000)
            tally.recall_handler_ms.append(float(answer.timings_ms.get("total", 0.0)))
            for stage, ms in answer.timings_ms.items():
                tally.recall_stages_ms.setdefault(stage, []).append(float(ms))
            tally.recall_items += len(answer.items)
        except ClientError as exc:
            tally.recall_failures[type(exc).__name__] += 1
    if slot.ends_run:
        tick = agent_tick(shape, slot.agent, slot.block)
        outcome_id = f"{stream.agent}-end-{rid}"
        watch.outcomes_awaited.add(outcome_id)
        await client.publish_outcome(
            OutcomeV1(
                agent_id=stream.agent,
                ts=ts + 10,
                outcome="run_ended",
                run_id=rid,
                quality=run_quality(slot.agent, tick, options.seed),
                event_id=outcome_id,
            )
        )
        tally.outcomes += 1


async def _maintenance_ms(
    redis: Redis, prefix: str, agents: list[str], window: tuple[float, float]
) -> dict[str, Any]:
    """The agents' maintenance logs: time per task, passes, and how much of `window`
    (epoch seconds) some pass was running (a log entry's stream id is when it was
    recorded, in ms; the pass began `elapsed_ms` before)."""
    ledger = MaintenanceLedgerStore(redis, prefix)
    per_task: dict[str, float] = {}
    passes: Counter[str] = Counter()
    intervals: list[tuple[float, float]] = []
    for start in range(0, len(agents), 16):
        logs = await asyncio.gather(
            *(redis.xrange(ledger.log_key(a)) for a in agents[start : start + 16])
        )
        for log in logs:
            for entry_id, raw in log or ():
                entry = {_text(k): _text(v) for k, v in (raw or {}).items()}
                task = entry.get("task", "?")
                passes[task] += 1
                with contextlib.suppress(ValueError):
                    elapsed = float(entry.get("elapsed_ms", "0"))
                    per_task[task] = per_task.get(task, 0.0) + elapsed
                    end = int(_text(entry_id).split("-", 1)[0]) / 1000
                    intervals.append((end - elapsed / 1000, end))
    busy = union_s(intervals, *window)
    return {
        "busy_share": round(busy / (window[1] - window[0]), 4),
        "total_ms": round(sum(per_task.values()), 1),
        "ms_by_task": {k: round(v, 1) for k, v in sorted(per_task.items())},
        "passes_by_task": dict(sorted(passes.items())),
    }


async def _stored(redis: Redis, prefix: str) -> tuple[int, int]:
    """What the trial's deployment holds in Redis, in bytes (every key under its
    prefix by MEMORY USAGE, pipelined, and its memory index), and the memories in
    that index (FT.INFO num_docs). Bytes are taken from the deployment's own keys,
    not from `used_memory` before and after, because the Redis may be shared:
    another deployment dropped meanwhile, or RediSearch collecting an earlier
    index's garbage, shrinks the whole server under a small trial."""
    keyspace = Keyspace(prefix)
    total = 0
    cursor = 0
    while True:
        cursor, keys = await redis.scan(cursor, match=keyspace.deployment_pattern, count=1000)
        if keys:
            async with redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.memory_usage(key, samples=0)
                total += sum(int(size or 0) for size in await pipe.execute())
        if cursor == 0:
            break
    try:
        info = await redis.ft(keyspace.index_name).info()
    except Exception:  # no index yet: nothing stored
        return total, 0
    return total + index_bytes(info), int(float(info.get("num_docs", 0)))


async def run_trial(
    base: Settings,
    shape: FleetShape,
    options: FleetOptions,
    *,
    log_dir: Path,
    service_pids: dict[str, int] | None = None,
    warmup_blocks: int | None = None,
) -> dict[str, Any]:
    """One fleet run against running services (`base` names them): its own topic
    prefix and worker process(es), started here and stopped at the end."""
    trial_id = uuid.uuid4().hex[:6]
    prefix = f"fleet{trial_id}"
    warmup = options.warmup_blocks if warmup_blocks is None else warmup_blocks
    warmup = min(warmup, shape.blocks - 1)
    settings = base.with_values(
        topic_prefix=prefix,
        app_id=f"grimoire-{prefix}",
        block_interval_s=shape.wall_block_s,
        maintenance_enabled=True,
    )
    topics = TopicNames(prefix)
    began = time.monotonic()
    # Each process by its name in the report, with what sets it apart.
    split = options.recall_workers > 0
    folding: dict[str, Any] = {"worker_roles": "ingest", "worker_nice": options.ingest_nice}
    recalling: dict[str, Any] = {"worker_roles": "recall"}
    if options.recall_fetch_max_wait_ms is not None:
        recalling["consumer_fetch_max_wait_ms"] = options.recall_fetch_max_wait_ms
    both: dict[str, Any] = {"worker_roles": "ingest,recall"}
    layout = [(f"worker-{n}", folding if split else both) for n in range(options.workers)] + [
        (f"recall-{n}", recalling) for n in range(options.recall_workers)
    ]
    workers: list[subprocess.Popen[bytes]] = []
    for n, (_, update) in enumerate(layout):
        data_dir = log_dir / f"data-{prefix}-{n}"
        data_dir.mkdir(parents=True, exist_ok=True)
        own = settings.with_values(**update, data_dir=data_dir)
        workers.append(start_worker(own, log_dir / f"worker-{prefix}-{n}.log"))
    redis = create_redis(settings.redis.url, 16)
    tally = _Tally()
    rng = random.Random(options.seed)
    recall_count = sum(1 for s in schedule(shape) if s.recall)
    queries = recall_queries(max(1, min(recall_count, 2_000)), seed=options.seed)
    agents = [agent_id(i) for i in range(shape.agents)]
    try:
        async with GrimoireClient(
            settings.bootstrap_servers, prefix, partitions=settings.broker.partitions
        ) as client:
            await client.wait_until_ready(timeout=240)
            watch = _Watch(settings.bootstrap_servers, topics, settings.broker.partitions)
            await watch.start()
            try:
                probe_timeout = options.drain_timeout_s
                # Untimed: the probe agent's first event pays for its keys.
                await _probe(client, watch, 0, rng, probe_timeout, None)
                streams = [
                    _AgentStream(topics, shape, i, options.seed) for i in range(shape.agents)
                ]
                ready_s = time.monotonic() - began
                pids = {name: w.pid for (name, _), w in zip(layout, workers, strict=True)}
                pids.update(service_pids or {})
                pids["bench"] = os.getpid()
                workers_named = [name for name, _ in layout]
                cpu_before = sample_cpu(pids, split=workers_named)
                machine_before = _machine()
                t0 = time.monotonic()
                epoch0 = time.time()
                turns: list[asyncio.Task[None]] = []
                probes: list[asyncio.Task[None]] = []
                probe_times = sorted(
                    (b + (p + 0.5) / options.probes_per_block) * shape.wall_block_s
                    for b in range(shape.blocks)
                    for p in range(options.probes_per_block)
                )
                serial = 0
                for slot in schedule(shape):
                    while probe_times and probe_times[0] <= slot.at_s:
                        serial += 1
                        probes.append(
                            asyncio.create_task(
                                _probe(client, watch, serial, rng, probe_timeout, tally)
                            )
                        )
                        probe_times.pop(0)
                    due = t0 + slot.at_s
                    delay = due - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    query = queries[len(turns) % len(queries)]
                    turns.append(
                        asyncio.create_task(
                            _agent_turn(
                                client, watch, streams, shape, slot, due, query, options, tally
                            )
                        )
                    )
                await asyncio.gather(*turns)
                await client.flush()
                published_s = time.monotonic() - t0
                deadline = time.monotonic() + options.drain_timeout_s
                while not (watch.all_decided() and not watch.outcomes_awaited):
                    if time.monotonic() >= deadline:
                        break
                    watch.changed.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(watch.changed.wait(), 1.0)
                await asyncio.gather(*probes)
                drained = time.monotonic()
                cpu_after = sample_cpu(pids, split=workers_named)
                machine_after = _machine()
                # Maintenance passes of the last blocks land after the drain: a block's
                # wall time for them, then the store's size.
                await asyncio.sleep(min(shape.wall_block_s, 12.0))
                stored_bytes, memories = await _stored(redis, prefix)
                maintenance = await _maintenance_ms(
                    redis, prefix, [*agents, PROBE_AGENT], (epoch0, time.time())
                )
            finally:
                await watch.stop()
    finally:
        await redis.aclose()
        for worker in workers:
            stop_worker(worker)

    wall = drained - t0
    cpu_split = cpu_report(cpu_before, cpu_after, wall)
    cpu = dict(cpu_split.processes)
    busy = (machine_after[0] - machine_before[0]) / max(1, machine_after[1] - machine_before[1])
    cpus = os.cpu_count() or 1
    measured = {u: at for u, at in tally.scheduled.items() if u[1] >= warmup}
    lag = lag_summary(measured, watch.unit_done, wall_block_s=shape.wall_block_s, now=drained)
    lag_all = lag_summary(
        tally.scheduled, watch.unit_done, wall_block_s=shape.wall_block_s, now=drained
    )
    decided_window = (watch.last_decided or drained) - t0
    recall = summarise_ms(tally.recall_ms)
    probe = summarise_ms(tally.probe_ms)
    share = maintenance_share(maintenance["total_ms"], shape.blocks, shape.wall_block_s)
    ours = sum(v for v in cpu.values() if v is not None)
    report: dict[str, Any] = {
        "agents": shape.agents,
        "block_s": shape.block_s,
        "blocks": shape.blocks,
        "speed": shape.speed,
        "wall_block_s": round(shape.wall_block_s, 3),
        "workers": options.workers,
        "recall_workers": options.recall_workers,
        "recall_fetch_max_wait_ms": options.recall_fetch_max_wait_ms,
        "ingest_nice": options.ingest_nice if split else 0,
        "real_time_equivalent": {
            "agents": round(shape.agents * shape.speed, 1),
            "note": "every rate is speed x the real-time one: this run stands for "
            "agents x speed agents on a 12 s block",
        },
        "events_per_s": round(watch.decided / decided_window, 1) if decided_window > 0 else None,
        "offered_events_per_s": round(tally.events / (shape.blocks * shape.wall_block_s), 1),
        "lag_blocks": lag,
        "lag_blocks_all": lag_all,
        "warmup_blocks": warmup,
        "recallable_ms": {
            **probe,
            "missed": tally.probes_missed,
            # Missed probes count at the timeout: the percentiles are then lower bounds.
            "lower_bound": tally.probes_missed > 0,
        },
        "recall_ms": {**recall, "failures": dict(tally.recall_failures)},
        # The worker's own time on each of those recalls (the reply's timings_ms
        # total): the rest of a round trip is the broker and waiting for the loop.
        "recall_handler_ms": summarise_ms(tally.recall_handler_ms),
        # Where that time went, stage by stage (p50 and p99 of each, apart).
        "recall_stages_ms": {
            stage: {part: summary[part] for part in ("p50", "p99")}
            for stage, summary in (
                (stage, summarise_ms(values))
                for stage, values in sorted(tally.recall_stages_ms.items())
            )
        },
        "maintenance_share": round(share, 4),
        "maintenance": {
            **maintenance,
            "ms_per_block": round(maintenance["total_ms"] / shape.blocks, 1),
            "events_seen": dict(sorted(watch.maintenance_events.items())),
        },
        "redis_bytes_per_memory": (
            None if (per := bytes_per_memory(stored_bytes, memories)) is None else round(per, 1)
        ),
        "redis_stored_bytes": stored_bytes,
        "memories": memories,
        "counts": {
            "events_published": tally.events,
            "events_decided": watch.decided,
            "events_undecided": len(watch.awaited),
            "units": len(tally.scheduled),
            "recalls": tally.recalls,
            "recalls_answered": len(tally.recall_ms),
            "recall_items": tally.recall_items,
            "outcomes_sent": tally.outcomes,
            "outcomes_reported": watch.outcomes_seen,
            "probes": len(tally.probe_ms) + tally.probes_missed,
            "decisions": dict(sorted(watch.decisions.items())),
            "dead_letters": dict(sorted(watch.dead_letters.items())),
        },
        "publish_late_ms": summarise_ms(tally.late_ms),
        "cpu": cpu,
        "cpu_threads": {name: dict(kinds) for name, kinds in cpu_split.threads.items()},
        "machine": {
            "cpus": cpus,
            "model": cpu_model(),
            "busy_share": round(busy, 3),
            "busy_cores": round(busy * cpus, 3),
            "others_cores": round(busy * cpus - ours, 3),
            "loadavg": list(os.getloadavg()),
        },
        "timings_s": {
            "startup": round(ready_s, 1),
            "publish": round(published_s, 1),
            "drain": round(drained - t0 - published_s, 1),
            "trial": round(time.monotonic() - began, 1),
        },
        "topic_prefix": prefix,
    }
    return report


def _passes(report: dict[str, Any]) -> bool:
    lag = report["lag_blocks"]
    return lag["undecided"] == 0 and lag["max"] is not None and lag["max"] < 1.0


# -- the command -------------------------------------------------------------------------


def _search(run: Any, options: FleetOptions, main: dict[str, Any], began: float) -> dict[str, Any]:
    """Doubling / halving from the main run's size, then bisection (`next_search_size`)."""
    good: int | None = options.agents if _passes(main) else None
    bad: int | None = None if good is not None else options.agents
    trials: list[dict[str, Any]] = []
    capped = False
    while True:
        size = next_search_size(good, bad, start=options.agents, ceiling=options.search_ceiling)
        if size is None:
            break
        # A trial costs its blocks, a worker's start and a drain: do not begin one
        # that would surely end past the cap.
        expected = options.search_blocks * 12.0 / options.speed + 60.0
        if time.monotonic() - began + expected > options.search_cap_s:
            capped = True
            break
        report = run(FleetShape(size, options.search_blocks, speed=options.speed), None)
        passed = _passes(report)
        logger.info(
            "fleet search: %d agents, lag max %s blocks, %s",
            size,
            report["lag_blocks"]["max"],
            "passed" if passed else "failed",
        )
        trials.append(
            {
                "agents": size,
                "real_time_agents": round(size * options.speed, 1),
                "passed": passed,
                "lag_blocks": report["lag_blocks"],
                "events_per_s": report["events_per_s"],
                "recall_ms_p99": report["recall_ms"]["p99"],
                # The machine is shared: what others used during the trial.
                "cpu": report["cpu"],
                "others_cores": report["machine"]["others_cores"],
                "elapsed_s": report["timings_s"]["trial"],
            }
        )
        if passed:
            good = size
        else:
            bad = size
    return {
        "best_as_run": good,
        "max_agents_under_one_block": round(good * options.speed) if good else 0,
        "first_failing_as_run": bad,
        "trials": trials,
        "capped": capped,
        "cap_s": options.search_cap_s,
        "blocks_per_trial": options.search_blocks,
        "rule": "lag_blocks.max < 1 with every unit decided; doubling or halving from "
        "the main run's size, then bisection to 10 %",
    }


def _ports() -> ServicePorts:
    return bench_ports(19651, 16951, name="fleet")


def run_fleet_bench(settings: Settings, options: FleetOptions) -> dict[str, Any]:
    """Its own broker and Redis (ports GRIMOIRE_BENCH_FLEET_KAFKA_PORT / _REDIS_PORT,
    default 19651 / 16951), restarted between trials when started here, stopped at
    the end."""
    began = time.monotonic()
    state_dir = Path(os.environ.get("GRIMOIRE_STATE_DIR", ".grimoire")).resolve()
    fleet_dir = state_dir / "bench-fleet"
    ports = _ports()
    services = LocalServices(
        fleet_dir, ports, wheel_cache=state_dir / "wheels", ready_timeout=120.0
    )
    started = services.up()
    base = on_services(settings, services)
    log_dir = fleet_dir / "log"
    trials_run = 0

    def run(shape: FleetShape, warmup: int | None) -> dict[str, Any]:
        nonlocal started, trials_run
        if trials_run and started:
            services.down()  # a clean broker and Redis for every trial
            services.up()
        trials_run += 1
        return asyncio.run(
            run_trial(
                base,
                shape,
                options,
                log_dir=log_dir,
                service_pids=find_service_pids(fleet_dir, ports),
                warmup_blocks=warmup,
            )
        )

    try:
        shape = FleetShape(options.agents, options.blocks, speed=options.speed)
        report = run(shape, None)
        logger.info(
            "fleet: %d agents x %d blocks, lag p99 %s max %s blocks, recall p99 %s ms",
            options.agents,
            options.blocks,
            report["lag_blocks"]["p99"],
            report["lag_blocks"]["max"],
            report["recall_ms"]["p99"],
        )
        if options.search:
            search = _search(run, options, report, began)
            report["max_agents_under_one_block"] = search["max_agents_under_one_block"]
            report["search"] = search
        else:
            report["max_agents_under_one_block"] = None
            report["search"] = {"skipped": True}
    finally:
        if started:
            services.down()
    report["elapsed_s"] = round(time.monotonic() - began, 1)
    report["shared_services"] = not started
    return report
