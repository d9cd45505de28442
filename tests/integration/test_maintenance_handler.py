"""The maintenance handler against real Redis: due tasks run once per tick, a held
lease or a duplicate command runs nothing, a failed task stays due, and a bad
command is dead-lettered."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import orjson
from redis.asyncio import Redis

from grimoire.agents.maintenance.handler import MaintenanceHandler
from grimoire.agents.ports import InputMessage, MemorySink
from grimoire.streams.maintenance.schedule import (
    MaintenancePlan,
    MaintenancePolicy,
    PressureSignals,
    Task,
)
from grimoire.streams.model.field_state import FieldState
from grimoire.tables.maintenance.ledger import MaintenanceLedgerStore, known_agents
from grimoire.tables.memory.agent_state import AgentStateStore
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import MaintenanceCommandV1

POLICY = MaintenancePolicy(curator_every_ticks=5, compaction_every_ticks=10)


class Recording:
    def __init__(self, task: Task, fail_times: int = 0) -> None:
        self.task = task
        self.calls: list[tuple[int, int]] = []
        self.fail_times = fail_times

    async def __call__(self, plan: MaintenancePlan) -> Mapping[str, Any]:
        self.calls.append((plan.tick, plan.as_of_ms))
        if self.fail_times:
            self.fail_times -= 1
            raise RuntimeError("injected failure")
        return {"entries": len(self.calls)}


class Pressure:
    def __init__(self) -> None:
        self.lag = 0

    def signals(self) -> PressureSignals:
        return PressureSignals(consumer_lag=self.lag)


def _message(agent_id: str, **extra: Any) -> InputMessage:
    value = MaintenanceCommandV1(agent_id=agent_id, **extra).dumps_json()
    return InputMessage(value=value, topic="t.maintenance", partition=0, offset=0)


async def _set_tick(redis: Redis, prefix: str, agent_id: str, tick: int) -> None:
    async with redis.pipeline(transaction=False) as pipe:
        state = FieldState(agent_id=agent_id, watermark_ms=1_000_000 + tick * 12_000, tick=tick)
        AgentStateStore(redis, prefix).save_field(pipe, state)
        pipe.zadd(f"{prefix}:watermarks", {agent_id: state.watermark_ms}, gt=True)
        await pipe.execute()


def _handler(
    redis: Redis, prefix: str, runners: dict[Task, Recording], worker: str, **extra: Any
) -> tuple[MaintenanceHandler, MemorySink]:
    sink = MemorySink()

    async def live(_: str) -> int:
        return 0

    handler = MaintenanceHandler(
        ledgers=MaintenanceLedgerStore(redis, prefix),
        agent_state=AgentStateStore(redis, prefix),
        runners=runners,
        sink=sink,
        topics=TopicNames(prefix),
        worker_id=worker,
        block_interval_ms=12_000,
        live_count=live,
        policy=POLICY,
        **extra,
    )
    return handler, sink


async def test_due_tasks_run_once_per_tick_and_report(redis_client: Redis) -> None:
    prefix = f"mh{uuid.uuid4().hex[:6]}"
    agent = "golem-1"
    runners = {task: Recording(task) for task in Task}
    handler, sink = _handler(redis_client, prefix, runners, "w1")
    assert await handler.handle(_message(agent)) is None  # no events yet: nothing to do
    await _set_tick(redis_client, prefix, agent, 5)
    plan = await handler.handle(_message(agent))
    assert plan is not None and plan.tasks == (Task.DECAY, Task.CURATOR)
    assert runners[Task.CURATOR].calls == [(5, 1_060_000)]
    # The timer fires again before the agent's next tick: nothing is due.
    again = await handler.handle(_message(agent))
    assert again is not None and again.tasks == ()
    assert len(runners[Task.DECAY].calls) == 1
    events = [orjson.loads(v) for v in sink.on(TopicNames(prefix).memory_events)]
    assert [e["type"] for e in events] == [
        "GrimoireDecay",
        "CuratorCycleComplete",
        "GrimoireMaintenance",
    ]
    assert events[1]["report"]["entries"] == 1 and events[1]["worker"] == "w1"
    assert events[1]["report"]["elapsed_ms"] >= 0
    assert [agent async for agent in known_agents(redis_client, prefix)] == [agent]
    history = await MaintenanceLedgerStore(redis_client, prefix).history(agent)
    assert [(h["task"], h["tick"], h["worker"]) for h in history] == [
        ("decay", "5", "w1"),
        ("curator", "5", "w1"),
    ]


async def test_a_held_lease_means_another_worker_is_on_it(redis_client: Redis) -> None:
    prefix = f"mh{uuid.uuid4().hex[:6]}"
    agent = "golem-2"
    await _set_tick(redis_client, prefix, agent, 10)
    runners = {task: Recording(task) for task in Task}
    handler, _ = _handler(redis_client, prefix, runners, "w2")
    ledgers = MaintenanceLedgerStore(redis_client, prefix)
    assert await ledgers.acquire(agent, "w1", 60_000)
    assert await handler.handle(_message(agent)) is None
    assert all(not runner.calls for runner in runners.values())
    await ledgers.release(agent, "w1")
    plan = await handler.handle(_message(agent))
    assert plan is not None and set(plan.tasks) == set(Task)


async def test_a_failed_task_stays_due_and_pressure_postpones(redis_client: Redis) -> None:
    prefix = f"mh{uuid.uuid4().hex[:6]}"
    agent = "golem-3"
    await _set_tick(redis_client, prefix, agent, 5)
    runners = {Task.DECAY: Recording(Task.DECAY), Task.CURATOR: Recording(Task.CURATOR, 1)}
    pressure = Pressure()
    handler, _ = _handler(redis_client, prefix, runners, "w1", pressure=pressure)
    await handler.handle(_message(agent))
    ledger = await MaintenanceLedgerStore(redis_client, prefix).ledger(agent)
    assert (ledger.decay, ledger.curator) == (5, None)
    pressure.lag = POLICY.throttle_lag
    throttled = await handler.handle(_message(agent))
    assert throttled is not None and throttled.postponed == (Task.CURATOR,)
    assert len(runners[Task.CURATOR].calls) == 1
    pressure.lag = 0
    await handler.handle(_message(agent))
    ledger = await MaintenanceLedgerStore(redis_client, prefix).ledger(agent)
    assert ledger.curator == 5
    assert len(runners[Task.CURATOR].calls) == 2


async def test_a_bad_command_is_dead_lettered(redis_client: Redis) -> None:
    prefix = f"mh{uuid.uuid4().hex[:6]}"
    handler, sink = _handler(redis_client, prefix, {}, "w1")
    bad = InputMessage(value=b'{"reason": "block"}', topic="t.maintenance", partition=1, offset=9)
    assert await handler.handle(bad) is None
    (letter,) = [orjson.loads(v) for v in sink.on(TopicNames(prefix).dead_letters)]
    assert letter["reason"] == "missing_field" and letter["offset"] == 9
