"""The rule for command entries (retract, forget, pin, configure, import …): each
mutation a command made is witnessed; a forget in the deployment's own chain, since
the agent's chain went with everything else of it."""

from __future__ import annotations

from dataclasses import dataclass

from grimoire.agents.journal.apply import FORGET_OP, agent_sha256
from grimoire.agents.ports import CommandApplier, Opened, WitnessPort
from grimoire.streams.journal.fold import Run

__all__ = ["FORGOTTEN_CHAIN", "CommandRule"]

# A chain no agent can own (agent ids are letters, digits and `._-@+=/`).
FORGOTTEN_CHAIN = "~forgotten"


@dataclass(frozen=True, slots=True)
class CommandRule:
    commands: CommandApplier
    witness: WitnessPort

    async def apply(self, run: Run[Opened]) -> bool:
        item = run.items[0]
        for op, ids, fields in await self.commands.apply_command(item.message):
            owner = item.entry.agent_id
            if op == FORGET_OP:
                # Recorded by a hash of the id, with no content.
                fields = {"agent_sha256": agent_sha256(owner), **dict(fields)}
                owner = FORGOTTEN_CHAIN
            await self.witness.record(owner, op, sorted(ids), fields, journal=item.journal)
        return True
