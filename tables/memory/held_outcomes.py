"""Outcomes that arrive before their memory (`RedisHeldOutcomes`): held per memory id
until the write path writes it. Both the write path (`MemoryWrites`) and learning
(`OutcomeEffects`) reach them, so both concerns' classes are built on this one."""

from __future__ import annotations

from collections.abc import Sequence

from grimoire.streams.learn.outcomes import Outcome
from grimoire.tables.codec.held_outcome import held_for, outcomes_from_json, outcomes_to_json
from grimoire.tables.memory.core import RedisMemoryConcern
from grimoire.tables.transaction import agent_transaction

__all__ = ["RedisHeldOutcomes"]


class RedisHeldOutcomes(RedisMemoryConcern):
    """Each agent's held outcomes, one hash field per memory id."""

    async def missing_memories(self, pairs: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Those (agent, memory id) pairs with no memory hash at all (another agent's
        memory is not missing: it is someone else's, never this agent's), in one
        round trip whatever the agents."""
        if not pairs:
            return set()
        async with self.core.redis.pipeline(transaction=False) as pipe:
            for agent_id, memory_id in pairs:
                pipe.exists(self.core.key(agent_id, memory_id))
            found = await pipe.execute()
        return {pair for pair, exists in zip(pairs, found, strict=True) if not exists}

    async def hold_outcome(self, outcome: Outcome, memory_ids: Sequence[str]) -> None:
        """Keep the part of `outcome` naming each of `memory_ids` until it is written."""
        key = self.core.keys.pending_outcomes(outcome.agent_id)
        held = await self.core.redis.hmget(key, list(memory_ids)) if memory_ids else []
        async with agent_transaction(self.core.redis, outcome.agent_id) as pipe:
            for memory_id, raw in zip(memory_ids, held, strict=True):
                waiting = outcomes_from_json(raw)
                part = held_for(outcome, memory_id)
                if all(o.outcome_id != part.outcome_id for o in waiting):
                    pipe.hset(key, memory_id, outcomes_to_json([*waiting, part]))
            await pipe.execute()

    async def held_outcomes(self, agent_id: str, memory_ids: Sequence[str]) -> list[Outcome]:
        """The held outcomes of `memory_ids`, in the order they were held (kept until
        `release_held_outcomes`: the caller applies them first, so a crash between
        leaves them held, and applying them again is a no-op per outcome id)."""
        if not memory_ids:
            return []
        held = await self.core.redis.hmget(
            self.core.keys.pending_outcomes(agent_id), list(memory_ids)
        )
        return [o for raw in held for o in outcomes_from_json(raw)]

    async def release_held_outcomes(self, agent_id: str, memory_ids: Sequence[str]) -> None:
        """Forget the held outcomes of `memory_ids` (they were applied)."""
        if memory_ids:
            await self.core.redis.hdel(self.core.keys.pending_outcomes(agent_id), *memory_ids)
