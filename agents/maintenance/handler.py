"""Maintenance commands: decide from the agent's ticks what is due, run it, report it.

The command only says "look at this agent now"; the plan comes from the agent's
tick counter and ledger (`grimoire.streams.maintenance.schedule`), so a duplicate or late
command finds nothing due and a replay runs the same cycles.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grimoire.agents.dead_letters import dead_letter
from grimoire.agents.ports import EventSink, InputMessage
from grimoire.agents.ports.maintenance import (
    CountEstimates,
    DecayOutlooks,
    FieldStates,
    LiveCount,
    PressureProbe,
    TaskRunner,
)
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.inbound.maintenance_command import parse_maintenance_command
from grimoire.streams.inbound.validators import InputLimits
from grimoire.streams.maintenance.schedule import (
    DEFAULT_MAINTENANCE_POLICY,
    DecayOutlook,
    Ledger,
    MaintenancePlan,
    MaintenancePolicy,
    Pressure,
    PressureSignals,
    Task,
    agent_tick,
    plan_maintenance,
)
from grimoire.tables.ports.maintenance import MaintenanceLedger
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import MaintenanceEventV1

__all__ = [
    "EVENT_TYPES",
    "CountEstimates",
    "DecayOutlooks",
    "FieldStates",
    "LiveCount",
    "MaintenanceHandler",
    "NoPressure",
    "PressureProbe",
    "TaskRunner",
]

logger = logging.getLogger(__name__)

EVENT_TYPES = {
    Task.DECAY: "GrimoireDecay",
    Task.CURATOR: "CuratorCycleComplete",
    Task.COMPACTION: "GrimoireCompaction",
}


async def _no_outlooks() -> dict[str, DecayOutlook]:
    return {}


class NoPressure:
    def signals(self) -> PressureSignals:
        return PressureSignals()


@dataclass
class MaintenanceHandler:
    ledgers: MaintenanceLedger
    field_states: FieldStates
    runners: Mapping[Task, TaskRunner]
    sink: EventSink
    topics: TopicNames
    worker_id: str
    block_interval_ms: int
    live_count: LiveCount
    policy: MaintenancePolicy = DEFAULT_MAINTENANCE_POLICY
    limits: InputLimits = field(default_factory=InputLimits)
    lease_ms: int = 120_000
    # Without it every tick's decay pass runs, found something due or not.
    decay: DecayOutlooks | None = None
    # Without it `wanted` judges the compaction trigger by `live_count`, one search
    # per agent.
    count_estimates: CountEstimates | None = None

    async def handle(self, message: InputMessage) -> MaintenancePlan | None:
        """The plan that ran (None when there was nothing to look at)."""
        command = parse_maintenance_command(message.value, self.limits)
        if isinstance(command, Rejection):
            await dead_letter(self.sink, self.topics.dead_letters, message, command)
            return None
        agent_id = command.agent_id
        if not await self.ledgers.acquire(agent_id, self.worker_id, self.lease_ms):
            # Someone else is mid-pass (a rebalance moved the partition); what is
            # due stays due for the next command.
            logger.info("maintenance of %s is held by another worker", agent_id)
            return None
        try:
            return await self._run(agent_id, command.force_compaction, command.pressure)
        finally:
            await self.ledgers.release(agent_id, self.worker_id)

    async def _run(
        self, agent_id: str, force_compaction: bool, pressure: Pressure
    ) -> MaintenancePlan | None:
        state = (await self.field_states.load_fields([agent_id]))[agent_id]
        if state.tick is None and state.watermark_ms <= 0:
            return None  # nothing ingested for this agent yet
        tick = agent_tick(state.tick, state.watermark_ms, self.block_interval_ms)
        ledger, live, outlooks = await asyncio.gather(
            self.ledgers.ledger(agent_id),
            self.live_count(agent_id),
            self.decay.outlook([agent_id]) if self.decay is not None else _no_outlooks(),
        )
        plan = plan_maintenance(
            agent_id,
            tick,
            state.watermark_ms,
            ledger,
            live_memories=live,
            force_compaction=force_compaction,
            # The command's, recorded when it was issued: never this worker's load
            # now, which a replay could not see.
            pressure=pressure,
            policy=self.policy,
            decay=outlooks.get(agent_id),
        )
        await self.execute(plan)
        return plan

    async def wanted(self, agent_ids: Sequence[str], *, chunk: int = 1_000) -> list[str]:
        """The agents a command would find something due for now, in a few round
        trips for all of them. For the block timer, which need not send the rest
        a command: what runs is still decided at each command's place in the
        journal, and a command that is not sent is one that comes later (its
        agent's next block). The compaction trigger is judged on estimated
        counts, which are never below the live count."""
        if chunk < 1:
            raise ValueError("chunk must be at least 1")
        found: list[str] = []
        # A bounded read per round: a fleet's every agent in one pipeline would
        # hold its replies in memory at once.
        for start in range(0, len(agent_ids), chunk):
            found += await self._wanted(agent_ids[start : start + chunk])
        return found

    async def _wanted(self, agent_ids: Sequence[str]) -> list[str]:
        if not agent_ids:
            return []
        states, ledgers, outlooks = await asyncio.gather(
            self.field_states.load_fields(agent_ids),
            self.ledgers.ledgers(agent_ids),
            self.decay.outlook(agent_ids) if self.decay is not None else _no_outlooks(),
        )
        if self.count_estimates is not None:
            counts = await self.count_estimates.estimated_counts(agent_ids)
        else:
            counts = {agent_id: await self.live_count(agent_id) for agent_id in agent_ids}
        found = []
        for agent_id in agent_ids:
            state = states.get(agent_id)
            if state is None or (state.tick is None and state.watermark_ms <= 0):
                continue
            plan = plan_maintenance(
                agent_id,
                agent_tick(state.tick, state.watermark_ms, self.block_interval_ms),
                state.watermark_ms,
                ledgers.get(agent_id, Ledger()),
                live_memories=counts.get(agent_id, 0),
                policy=self.policy,
                decay=outlooks.get(agent_id),
            )
            if plan.tasks or plan.postponed:
                found.append(agent_id)
        return found

    async def execute(self, plan: MaintenancePlan) -> list[str]:
        """Run the plan's tasks in order; returns the ones completed. A task that
        raises is logged and stays due (its ledger entry does not advance)."""
        agent_id, tick = plan.agent_id, plan.tick
        done: list[str] = []
        for task in plan.tasks:
            runner = self.runners.get(task)
            if runner is None:
                continue
            started = time.perf_counter()
            try:
                report = dict(await runner(plan))
            except Exception:
                # Stays due: the ledger is not advanced, the next block retries.
                logger.exception("maintenance %s of %s at tick %d failed", task, agent_id, tick)
                continue
            # Operational only (never an input to a decision): what the pass cost.
            report["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 3)
            if not await self.ledgers.complete(agent_id, task, tick, self.worker_id, report):
                continue  # another holder completed it first (its report was sent)
            done.append(task.value)
            await self._emit(EVENT_TYPES[task], plan, report=report)
        if done or plan.postponed:
            await self._emit(
                "GrimoireMaintenance",
                plan,
                tasks=done,
                postponed=[task.value for task in plan.postponed],
            )
        return done

    async def _emit(
        self,
        event_type: str,
        plan: MaintenancePlan,
        *,
        report: Mapping[str, Any] | None = None,
        tasks: list[str] | None = None,
        postponed: list[str] | None = None,
    ) -> None:
        event = MaintenanceEventV1(
            type=event_type,
            agent_id=plan.agent_id,
            tick=plan.tick,
            ts=plan.as_of_ms,
            worker=self.worker_id,
            tasks=tasks,
            postponed=postponed or None,
            pressure=plan.pressure.value,
            report=dict(report) if report is not None else None,
        )
        await self.sink.send(self.topics.memory_events, plan.agent_id, event.dumps_json())
