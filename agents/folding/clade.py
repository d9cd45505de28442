"""The rule for clade entries: a sibling's share, its withdrawal, or (at the origin)
credit for a shared entry, witnessed with what it changed."""

from __future__ import annotations

from dataclasses import dataclass

from grimoire.agents.handlers.clade import CladeReceiver
from grimoire.agents.ports import Opened, WitnessPort
from grimoire.streams.journal.fold import Run

__all__ = ["CladeRule"]


@dataclass(frozen=True, slots=True)
class CladeRule:
    receiver: CladeReceiver
    witness: WitnessPort

    async def apply(self, run: Run[Opened]) -> bool:
        item = run.items[0]
        step = await self.receiver.handle(item.message)
        if step is not None:
            op, ids, fields = step
            await self.witness.record(
                item.entry.agent_id, op, sorted(ids), dict(fields), journal=item.journal
            )
        return True
