"""The rule for fact entries: a bi-temporal assertion, witnessed with the ids it
asserted and closed."""

from __future__ import annotations

from dataclasses import dataclass

from grimoire.agents.folding.due import owed_record
from grimoire.agents.handlers.facts import FACT_OP, FactHandler
from grimoire.agents.ports import Opened, WitnessPort
from grimoire.streams.journal.fold import Run
from grimoire.tables.ports.journal import WitnessDueReader

__all__ = ["FactRule"]


@dataclass(frozen=True, slots=True)
class FactRule:
    facts: FactHandler
    witness: WitnessPort
    due: WitnessDueReader

    async def apply(self, run: Run[Opened]) -> bool:
        item = run.items[0]
        asserted = await self.facts.handle(item.message, item.journal)
        if asserted is None:  # applied before: witnessed then, or owed now
            owed = await owed_record(self.due, self.witness, item)
            asserted = None if owed is None else (owed.ids, owed.fields)
        if asserted is not None:
            ids, fields = asserted
            await self.witness.record(
                item.entry.agent_id, FACT_OP, sorted(ids), fields, journal=item.journal
            )
        return True
