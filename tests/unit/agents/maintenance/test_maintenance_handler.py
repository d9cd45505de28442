"""The maintenance handler without services (the reference ledger, field states in
a dict): due tasks run once per tick, a held lease or a duplicate command runs
nothing, a failed task stays due, pressure postpones, and a bad command is
dead-lettered. The Redis ledger meets the same contract
(tests/integration/test_ledger_contract.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from grimoire.agents.maintenance.handler import MaintenanceHandler
from grimoire.agents.ports import InputMessage, MemorySink
from grimoire.streams.maintenance.schedule import (
    DecayOutlook,
    Ledger,
    MaintenancePlan,
    MaintenancePolicy,
    Task,
)
from grimoire.streams.model.field_state import FieldState
from grimoire.tables.testing.maintenance_ledger import InMemoryMaintenanceLedger
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import MaintenanceCommandV1

TOPICS = TopicNames("mh")
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


def _message(agent_id: str, **extra: Any) -> InputMessage:
    value = MaintenanceCommandV1(agent_id=agent_id, **extra).dumps_json()
    return InputMessage(value=value, topic="t.maintenance", partition=0, offset=0)


class FieldStates:
    """Field states by agent: all the handler reads of them is the tick and watermark."""

    def __init__(self) -> None:
        self.states: dict[str, FieldState] = {}

    async def load_fields(self, agent_ids: Sequence[str]) -> dict[str, FieldState]:
        return {a: self.states.get(a, FieldState(agent_id=a)) for a in agent_ids}

    def set_tick(self, agent_id: str, tick: int) -> None:
        self.states[agent_id] = FieldState(
            agent_id=agent_id, watermark_ms=1_000_000 + tick * 12_000, tick=tick
        )


class World:
    def __init__(self) -> None:
        self.ledgers = InMemoryMaintenanceLedger(clock_ms=lambda: self.now_ms)
        self.fields = FieldStates()
        self.now_ms = 0


def _handler(
    world: World, runners: dict[Task, Recording], worker: str, **extra: Any
) -> tuple[MaintenanceHandler, MemorySink]:
    sink = MemorySink()

    async def live(_: str) -> int:
        return 0

    handler = MaintenanceHandler(
        ledgers=world.ledgers,
        field_states=world.fields,
        runners=runners,
        sink=sink,
        topics=TOPICS,
        worker_id=worker,
        block_interval_ms=12_000,
        live_count=live,
        policy=POLICY,
        **extra,
    )
    return handler, sink


async def test_due_tasks_run_once_per_tick_and_report() -> None:
    world = World()
    agent = "golem-1"
    runners = {task: Recording(task) for task in Task}
    handler, sink = _handler(world, runners, "w1")
    assert await handler.handle(_message(agent)) is None  # no events yet: nothing to do
    world.fields.set_tick(agent, 5)
    plan = await handler.handle(_message(agent))
    assert plan is not None and plan.tasks == (Task.DECAY, Task.CURATOR)
    assert runners[Task.CURATOR].calls == [(5, 1_060_000)]
    # The timer fires again before the agent's next tick: nothing is due.
    again = await handler.handle(_message(agent))
    assert again is not None and again.tasks == ()
    assert len(runners[Task.DECAY].calls) == 1
    events = [orjson.loads(v) for v in sink.on(TOPICS.memory_events)]
    assert [e["type"] for e in events] == [
        "GrimoireDecay",
        "CuratorCycleComplete",
        "GrimoireMaintenance",
    ]
    assert events[1]["report"]["entries"] == 1 and events[1]["worker"] == "w1"
    assert events[1]["report"]["elapsed_ms"] >= 0
    history = await world.ledgers.history(agent)
    assert [(h["task"], h["tick"], h["worker"]) for h in history] == [
        ("decay", "5", "w1"),
        ("curator", "5", "w1"),
    ]


async def test_a_held_lease_means_another_worker_is_on_it() -> None:
    world = World()
    agent = "golem-2"
    world.fields.set_tick(agent, 10)
    runners = {task: Recording(task) for task in Task}
    handler, _ = _handler(world, runners, "w2")
    ledgers = world.ledgers
    assert await ledgers.acquire(agent, "w1", 60_000)
    assert await handler.handle(_message(agent)) is None
    assert all(not runner.calls for runner in runners.values())
    await ledgers.release(agent, "w1")
    plan = await handler.handle(_message(agent))
    assert plan is not None and set(plan.tasks) == set(Task)


async def test_a_failed_task_stays_due_and_the_commands_pressure_postpones() -> None:
    # The pressure is the one the command was issued under (in the journal), never
    # the applying worker's load now: a replay decides the same.
    world = World()
    agent = "golem-3"
    world.fields.set_tick(agent, 5)
    runners = {Task.DECAY: Recording(Task.DECAY), Task.CURATOR: Recording(Task.CURATOR, 1)}
    handler, _ = _handler(world, runners, "w1")
    await handler.handle(_message(agent))
    ledger = await world.ledgers.ledger(agent)
    assert (ledger.decay, ledger.curator) == (5, None)
    throttled = await handler.handle(_message(agent, pressure="throttled"))
    assert throttled is not None and throttled.postponed == (Task.CURATOR,)
    assert len(runners[Task.CURATOR].calls) == 1
    paused = await handler.handle(_message(agent, pressure="paused"))
    assert paused is not None and paused.tasks == ()
    await handler.handle(_message(agent))
    ledger = await world.ledgers.ledger(agent)
    assert ledger.curator == 5
    assert len(runners[Task.CURATOR].calls) == 2


async def test_a_bad_command_is_dead_lettered() -> None:
    world = World()
    handler, sink = _handler(world, {}, "w1")
    bad = InputMessage(value=b'{"reason": "block"}', topic="t.maintenance", partition=1, offset=9)
    assert await handler.handle(bad) is None
    (letter,) = [orjson.loads(v) for v in sink.on(TOPICS.dead_letters)]
    assert letter["reason"] == "missing_field" and letter["offset"] == 9


async def test_an_expired_lease_lets_the_next_worker_in() -> None:
    world = World()
    agent = "golem-4"
    world.fields.set_tick(agent, 10)
    assert await world.ledgers.acquire(agent, "crashed", 60_000)
    runners = {task: Recording(task) for task in Task}
    handler, _ = _handler(world, runners, "w2")
    assert await handler.handle(_message(agent)) is None
    world.now_ms += 60_000
    plan = await handler.handle(_message(agent))
    assert plan is not None and set(plan.tasks) == set(Task)
    # The pass gave its lease back: the next worker is not held up.
    assert await world.ledgers.acquire(agent, "w3", 60_000)


async def test_a_task_another_holder_completed_is_not_reported_twice() -> None:
    world = World()
    agent = "golem-5"
    world.fields.set_tick(agent, 5)
    await world.ledgers.complete(agent, Task.DECAY, 5, "w1", {"entries": 3})
    runners = {Task.DECAY: Recording(Task.DECAY), Task.CURATOR: Recording(Task.CURATOR)}
    handler, sink = _handler(world, runners, "w2")
    plan = await handler.handle(_message(agent))
    assert plan is not None and plan.tasks == (Task.CURATOR,)
    events = [orjson.loads(v) for v in sink.on(TOPICS.memory_events)]
    assert [e["type"] for e in events] == ["CuratorCycleComplete", "GrimoireMaintenance"]
    assert events[1]["tasks"] == ["curator"]


class Outlooks:
    """The decay schedule at a glance, set by the test."""

    def __init__(self) -> None:
        self.by_agent: dict[str, DecayOutlook] = {}

    async def outlook(self, agent_ids: Sequence[str]) -> dict[str, DecayOutlook]:
        return {a: self.by_agent.get(a, DecayOutlook(False, None)) for a in agent_ids}


async def test_a_decay_pass_with_nothing_due_is_not_run_reported_or_ledgered() -> None:
    world = World()
    agent = "golem-idle"
    outlooks = Outlooks()
    runners = {task: Recording(task) for task in Task}
    handler, sink = _handler(world, runners, "w1", decay=outlooks)
    world.fields.set_tick(agent, 3)
    as_of = 1_000_000 + 3 * 12_000
    # Never seeded: the pass runs (it seeds the schedule).
    assert (await handler.handle(_message(agent))).tasks == (Task.DECAY,)  # type: ignore[union-attr]
    world.fields.set_tick(agent, 4)
    as_of += 12_000
    outlooks.by_agent[agent] = DecayOutlook(True, as_of + 1)  # first crossing after this tick
    plan = await handler.handle(_message(agent))
    assert plan is not None and plan.tasks == () and plan.postponed == ()
    assert len(runners[Task.DECAY].calls) == 1
    assert await world.ledgers.ledger(agent) == Ledger(decay=3)
    outlooks.by_agent[agent] = DecayOutlook(True, None)  # nothing scheduled at all
    assert (await handler.handle(_message(agent))).tasks == ()  # type: ignore[union-attr]
    # An entry due by the watermark: the pass runs at this tick.
    outlooks.by_agent[agent] = DecayOutlook(True, as_of)
    assert (await handler.handle(_message(agent))).tasks == (Task.DECAY,)  # type: ignore[union-attr]
    assert runners[Task.DECAY].calls[-1] == (4, as_of)
    # Only the passes that ran were reported.
    types = [orjson.loads(v)["type"] for v in sink.on(TOPICS.memory_events)]
    assert types == ["GrimoireDecay", "GrimoireMaintenance"] * 2
    # The curator's period is crossed whatever the decay schedule holds.
    world.fields.set_tick(agent, 5)
    outlooks.by_agent[agent] = DecayOutlook(True, None)
    assert (await handler.handle(_message(agent))).tasks == (Task.CURATOR,)  # type: ignore[union-attr]


async def test_wanted_names_the_agents_a_command_would_find_work_for() -> None:
    world = World()
    outlooks = Outlooks()
    runners = {task: Recording(task) for task in Task}
    handler, _ = _handler(world, runners, "w1", decay=outlooks)
    agents = ["quiet", "due", "unseeded", "curator", "done", "never"]
    for agent in agents[:-1]:
        world.fields.set_tick(agent, 4)
        outlooks.by_agent[agent] = DecayOutlook(True, 10**15)
    world.fields.set_tick("curator", 5)
    outlooks.by_agent["due"] = DecayOutlook(True, 0)
    outlooks.by_agent["unseeded"] = DecayOutlook(False, None)
    outlooks.by_agent["done"] = DecayOutlook(True, 0)
    await world.ledgers.complete("done", Task.DECAY, 4, "w1", {})
    assert await handler.wanted(agents) == ["due", "unseeded", "curator"]
    assert await handler.wanted(agents, chunk=2) == ["due", "unseeded", "curator"]
    # What `wanted` names is what the commands then run, and no more.
    for agent in agents:
        plan = await handler.handle(_message(agent))
        ran = plan is not None and bool(plan.tasks)
        assert ran == (agent in {"due", "unseeded", "curator"}), agent
    assert await handler.wanted(agents) == []


async def test_wanted_judges_the_compaction_trigger_on_estimated_counts() -> None:
    world = World()
    outlooks = Outlooks()
    policy = MaintenancePolicy(compaction_trigger_memories=100)
    handler, _ = _handler(world, {}, "w1", decay=outlooks)
    handler.policy = policy
    for agent in ("big", "small"):
        world.fields.set_tick(agent, 4)
        outlooks.by_agent[agent] = DecayOutlook(True, None)

    class Estimates:
        async def estimated_counts(self, agent_ids: Sequence[str]) -> dict[str, int]:
            return {"big": 101, "small": 100}

    assert await handler.wanted(["big", "small"]) == []  # live counts: 0
    handler.count_estimates = Estimates()
    assert await handler.wanted(["big", "small"]) == ["big"]
