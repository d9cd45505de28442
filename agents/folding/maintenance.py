"""The rule for maintenance entries (the block cadence's ticks): the agent's due
decay, curation and compaction, witnessed with the tasks run and postponed."""

from __future__ import annotations

from dataclasses import dataclass

from grimoire.agents.maintenance.handler import MaintenanceHandler
from grimoire.agents.ports import Opened, WitnessPort
from grimoire.streams.journal.fold import Run

__all__ = ["MAINTENANCE_OP", "MaintenanceRule"]

MAINTENANCE_OP = "maintenance"


@dataclass(frozen=True, slots=True)
class MaintenanceRule:
    maintenance: MaintenanceHandler
    witness: WitnessPort

    async def apply(self, run: Run[Opened]) -> bool:
        item = run.items[0]
        plan = await self.maintenance.handle(item.message)
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
