"""Outcomes that arrive before their memory (`InMemoryHeldOutcomes`), as
`RedisHeldOutcomes` holds them: per memory id until the write path writes it. Both
the write path and learning reach them, so both concerns' classes are built on
this one."""

from __future__ import annotations

from collections.abc import Sequence

from grimoire.streams.learn.outcomes import Outcome
from grimoire.tables.codec.held_outcome import held_for
from grimoire.tables.testing.memory_core import InMemoryMemoryConcern

__all__ = ["InMemoryHeldOutcomes"]


class InMemoryHeldOutcomes(InMemoryMemoryConcern):
    """Each agent's held outcomes, a list per memory id."""

    async def missing_memories(self, pairs: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        return {(a, m) for a, m in pairs if m not in self.core.records}

    async def hold_outcome(self, outcome: Outcome, memory_ids: Sequence[str]) -> None:
        held = self.core.held.setdefault(outcome.agent_id, {})
        for memory_id in memory_ids:
            waiting = held.setdefault(memory_id, [])
            part = held_for(outcome, memory_id)
            if all(o.outcome_id != part.outcome_id for o in waiting):
                waiting.append(part)

    async def held_outcomes(self, agent_id: str, memory_ids: Sequence[str]) -> list[Outcome]:
        held = self.core.held.get(agent_id, {})
        return [o for memory_id in memory_ids for o in held.get(memory_id, [])]

    async def release_held_outcomes(self, agent_id: str, memory_ids: Sequence[str]) -> None:
        held = self.core.held.get(agent_id, {})
        for memory_id in memory_ids:
            held.pop(memory_id, None)
