"""The rule for maintenance entries (the block cadence's ticks): the agent's due
decay, curation and compaction, witnessed with the tasks run and postponed."""

from __future__ import annotations

from dataclasses import dataclass

from grimoire.agents.handlers.clade import AutoShare, journaled_route
from grimoire.agents.maintenance.handler import MaintenanceHandler
from grimoire.agents.ports import Opened, WitnessPort
from grimoire.streams.journal.fold import Run
from grimoire.streams.maintenance.schedule import Task

__all__ = ["MAINTENANCE_OP", "MaintenanceRule"]

MAINTENANCE_OP = "maintenance"


@dataclass(frozen=True, slots=True)
class MaintenanceRule:
    maintenance: MaintenanceHandler
    witness: WitnessPort
    # Clades: what the curator promoted for an agent with `share_policy` auto
    # reaches its clades after the tick (None: nothing is shared on promotion).
    auto_share: AutoShare | None = None

    async def apply(self, run: Run[Opened]) -> bool:
        item = run.items[0]
        plan = await self.maintenance.handle(item.message)
        if plan is not None and Task.CURATOR in plan.tasks and self.auto_share is not None:
            route, _ = journaled_route(item.message.value, self.maintenance.limits)
            agent = item.entry.agent_id
            shared = await self.auto_share.promoted(agent, route, plan.as_of_ms, "auto")
            for op, ids, fields in shared:
                journal = item.journal
                await self.witness.record(agent, op, sorted(ids), dict(fields), journal=journal)
        if plan is not None and (plan.tasks or plan.postponed):
            await self.witness.record(
                item.entry.agent_id,
                MAINTENANCE_OP,
                (),
                {
                    "tick": plan.tick,
                    "tasks": [t.value for t in plan.tasks],
                    "postponed": [t.value for t in plan.postponed],
                },
                journal=item.journal,
            )
        return True
