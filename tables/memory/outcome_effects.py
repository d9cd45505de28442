"""Learning's effects on the memory store (`RedisOutcomeEffects`, the `OutcomeEffects`
port): an outcome's effects and a run's credits, each applied once per outcome id.

Each is a pure fold (`grimoire.streams.learn.effects`): one pipelined read loads
the view, the fold says what changes, one transaction commits it. The agent's one
writer (its journal partition's apply loop) makes load-then-commit race-free."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from grimoire.streams.learn.effects import (
    EffectChanges,
    EffectsView,
    MemoryState,
    credited_ids,
    fold_credits,
    fold_outcome,
)
from grimoire.streams.learn.outcomes import Outcome
from grimoire.streams.learn.runs import MemoryCredit
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.journal.witness_due import changed_count_template
from grimoire.tables.maintenance.curator_marks import queue_changed
from grimoire.tables.memory.held_outcomes import RedisHeldOutcomes
from grimoire.tables.ports.transaction import TransactionPart
from grimoire.tables.transaction import AgentTransactions, agent_transaction

__all__ = ["RedisOutcomeEffects"]


def _text(value: str | bytes | None) -> str | None:
    """A field as text; an unset one stays None (the fold reads its default)."""
    return None if value is None else text_of(value)


class RedisOutcomeEffects(RedisHeldOutcomes):
    """Outcomes and credits by load, fold, commit, with the outcomes held for
    memories not written yet (`RedisHeldOutcomes`)."""

    async def _view(self, outcome: Outcome, memory_ids: Iterable[str]) -> EffectsView:
        """In one round trip: whether the outcome was applied, and per memory its
        owner, confidence and last access."""
        agent_id = outcome.agent_id
        ids = list(dict.fromkeys(memory_ids))
        async with self.core.redis.pipeline(transaction=False) as pipe:
            pipe.sismember(self.core.keys.applied_outcomes(agent_id), outcome.outcome_id)
            for memory_id in ids:
                pipe.hmget(self.core.key(agent_id, memory_id), ["agent_id", "confidence"])
                pipe.hget(self.core.keys.usage(agent_id, memory_id), "last_accessed")
            replies = await pipe.execute()
        memories: dict[str, MemoryState] = {}
        for i, memory_id in enumerate(ids):
            (owner, confidence), accessed = replies[1 + 2 * i], replies[2 + 2 * i]
            memories[memory_id] = MemoryState(
                owned=_text(owner) == agent_id,
                confidence=_text(confidence),
                last_accessed=_text(accessed),
            )
        return EffectsView(applied=bool(replies[0]), memories=memories)

    def _queue(
        self,
        pipe: Any,
        agent_id: str,
        changes: EffectChanges,
        journal: tuple[int, int] | None,
    ) -> None:
        """The changes' writes, in the order the scripts made them."""
        if changes.mark_applied:
            pipe.sadd(self.core.keys.applied_outcomes(agent_id), changes.outcome_id)
        for change in changes.memories:
            memory = self.core.key(agent_id, change.memory_id)
            if change.confidence is not None:
                pipe.hset(memory, "confidence", change.confidence)
            if change.last_accessed is not None:
                usage = self.core.keys.usage(agent_id, change.memory_id)
                pipe.hset(usage, "last_accessed", change.last_accessed)
            if change.strength is not None:
                pipe.hincrbyfloat(memory, "strength", change.strength)
            if change.validated != 0:
                pipe.hincrby(memory, "validated_count", change.validated)
            if change.contradicted != 0:
                pipe.hincrby(memory, "contradicted_count", change.contradicted)
            if change.causal_uplift is not None:
                pipe.hset(memory, "causal_uplift", change.causal_uplift)
        if journal is not None:
            # With the effects, so a worker killed before the witness leaves what
            # it would have said.
            before, after = changed_count_template(journal)
            pipe.set(self.core.keys.witness_due(agent_id), f"{before}{changes.changed}{after}")

    async def apply_outcome(self, outcome: Outcome, journal: tuple[int, int] | None = None) -> int:
        """Apply an outcome once, atomically; -1 when it was applied before, else
        how many of the agent's memories it changed (others' ids are ignored)."""
        effect = outcome.effect
        changes = fold_outcome(await self._view(outcome, outcome.memory_ids), outcome)
        changed = -1
        # The curated entries among the memories are due at the next cycle: marked
        # with the effects, and on a redelivery (-1) too.
        if changes is not None:
            async with agent_transaction(self.core.redis, outcome.agent_id) as pipe:
                self._queue(pipe, outcome.agent_id, changes, journal)
                if effect.touches_memories:
                    queue_changed(pipe, self.core.keys, outcome.agent_id, outcome.memory_ids)
                await pipe.execute()
            changed = changes.changed
        elif effect.touches_memories:
            async with self.core.redis.pipeline(transaction=False) as pipe:
                queue_changed(pipe, self.core.keys, outcome.agent_id, outcome.memory_ids)
                await pipe.execute()
        if changed > 0 and effect.touches_memories:
            # Confidence or the decay origin moved, so each band crossing did too.
            await self.core.decay.reschedule(
                outcome.agent_id, list(outcome.memory_ids), outcome.ts_ms
            )
        return changed

    async def apply_credits(
        self,
        outcome: Outcome,
        credits: Sequence[MemoryCredit],
        uplifts: Mapping[str, float],
        also: Sequence[TransactionPart] = (),
        counters: Sequence[tuple[str, float]] = (),
        journal: tuple[int, int] | None = None,
    ) -> int:
        ids = credited_ids(credits, uplifts)
        # The partition's one writer reads, then writes: nothing runs in between.
        changes = fold_credits(await self._view(outcome, ids), outcome, credits, uplifts)
        if changes is None:
            return -1
        tx = await AgentTransactions.open(self.core.redis)
        pipe = tx.agent(outcome.agent_id)
        self._queue(pipe, outcome.agent_id, changes, journal)
        for part in also:
            part.queue(tx)
        self.core.state.count(pipe, outcome.agent_id, counters)
        queue_changed(pipe, self.core.keys, outcome.agent_id, ids)
        await tx.execute()
        if changes.changed > 0:
            await self.core.decay.reschedule(outcome.agent_id, ids, outcome.ts_ms)
        return changes.changed
