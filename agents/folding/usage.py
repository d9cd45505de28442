"""The rule for usage entries: what a served recall used, counted once per entry
and per recall request (a recall answered twice counts its first answer)."""

from __future__ import annotations

from dataclasses import dataclass

from grimoire.agents.ports import Opened, UsageApplier, WitnessPort
from grimoire.streams.journal.fold import Run
from grimoire.streams.journal.usage import decode_usage

__all__ = ["USAGE_OP", "UsageRule"]

USAGE_OP = "usage"


@dataclass(frozen=True, slots=True)
class UsageRule:
    usage: UsageApplier
    witness: WitnessPort

    async def apply(self, run: Run[Opened]) -> bool:
        item = run.items[0]
        usage = decode_usage(item.message.value)
        source = item.entry.source
        request = None if source is None else f"{source.topic}:{source.partition}:{source.offset}"
        agent_id = item.entry.agent_id
        applied = await self.usage.apply_usage(agent_id, usage, item.entry.seq, request)
        if not applied and await self.witness.witnessed(agent_id, item.journal):
            return False  # applied and witnessed before this entry was read again
        if not applied and request and await self.usage.answered(agent_id, request, item.entry.seq):
            # The recall was answered twice (its worker killed before committing the
            # request): the first answer's uses count, and were witnessed.
            return False
        await self.witness.record(
            agent_id,
            USAGE_OP,
            sorted(set(usage.memory_ids)),
            {"as_of": usage.as_of_ms, "contrarian_window": usage.contrarian_window},
            journal=item.journal,
        )
        return True
