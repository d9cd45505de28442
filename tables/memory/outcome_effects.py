"""Learning's effects on the memory store (`RedisOutcomeEffects`, the `OutcomeEffects`
port): an outcome's effects and a run's credits, each applied once per outcome id."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grimoire.streams.learn.outcomes import Outcome
from grimoire.streams.learn.runs import MemoryCredit
from grimoire.tables.journal.witness_due import changed_count_template
from grimoire.tables.maintenance.curator_marks import queue_changed
from grimoire.tables.memory.held_outcomes import RedisHeldOutcomes
from grimoire.tables.ports.transaction import TransactionPart
from grimoire.tables.transaction import AgentTransactions

__all__ = ["RedisOutcomeEffects"]


class RedisOutcomeEffects(RedisHeldOutcomes):
    """Outcomes and credits by script, with the outcomes held for memories not
    written yet (`RedisHeldOutcomes`)."""

    async def apply_outcome(self, outcome: Outcome, journal: tuple[int, int] | None = None) -> int:
        """Apply an outcome once, atomically; -1 when it was applied before, else
        how many of the agent's memories it changed (others' ids are ignored)."""
        effect = outcome.effect
        keys = [
            self.core.keys.applied_outcomes(outcome.agent_id),
            self.core.keys.witness_due(outcome.agent_id),
        ]
        for memory_id in outcome.memory_ids:
            keys += [
                self.core.key(outcome.agent_id, memory_id),
                self.core.keys.usage(outcome.agent_id, memory_id),
            ]
        args = [
            outcome.outcome_id,
            outcome.agent_id,
            outcome.ts_ms,
            effect.confidence_delta,
            effect.strength_delta,
            1 if effect.resets_decay else 0,
            effect.validated,
            effect.contradicted,
            *(changed_count_template(journal) if journal is not None else ("", "")),
        ]
        changed = await self.core.scripts.apply_outcome(keys, args)
        if effect.touches_memories:
            # The curated entries among them are due at the next cycle; marked on a
            # redelivery (-1) too, so a crash between the script and this mark heals.
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
        marker = self.core.keys.applied_outcomes(outcome.agent_id)
        # The partition's one writer checks, then writes: nothing runs in between.
        if await self.core.redis.sismember(marker, outcome.outcome_id):
            return -1
        by_id = {credit.memory_id: credit for credit in credits}
        ids = sorted(set(by_id) | set(uplifts))
        keys = [marker, self.core.keys.witness_due(outcome.agent_id)]
        args: list[Any] = [
            outcome.outcome_id,
            outcome.agent_id,
            outcome.ts_ms,
            *(changed_count_template(journal) if journal is not None else ("", "")),
        ]
        for memory_id in ids:
            keys += [
                self.core.key(outcome.agent_id, memory_id),
                self.core.keys.usage(outcome.agent_id, memory_id),
            ]
            credit = by_id.get(memory_id)
            uplift = uplifts.get(memory_id)
            args += [
                repr(credit.confidence_delta) if credit else "0",
                repr(credit.strength_delta) if credit else "0",
                credit.validated if credit else 0,
                credit.contradicted if credit else 0,
                "" if uplift is None else repr(uplift),
            ]
        tx = await AgentTransactions.open(self.core.redis)
        pipe = tx.agent(outcome.agent_id)
        self.core.scripts.apply_credits_in(pipe, keys, args)
        for part in also:
            part.queue(tx)
        self.core.state.count(pipe, outcome.agent_id, counters)
        queue_changed(pipe, self.core.keys, outcome.agent_id, ids)
        results = await tx.execute()
        changed = int(results[outcome.agent_id][0])
        if changed > 0:
            await self.core.decay.reschedule(outcome.agent_id, ids, outcome.ts_ms)
        return changed
