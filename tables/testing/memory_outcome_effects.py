"""Learning's effects on the in-memory memory store (`InMemoryOutcomeEffects`, the
`OutcomeEffects` port), as `RedisOutcomeEffects` applies them: the same pure folds
(`grimoire.streams.learn.effects`) over a view read from the core, their changes
written as the Redis transaction writes them, each once per outcome id."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
from grimoire.tables.ports.transaction import TransactionPart
from grimoire.tables.testing.curator_marks import curator_indexes
from grimoire.tables.testing.memory_held_outcomes import InMemoryHeldOutcomes

__all__ = ["InMemoryOutcomeEffects"]


class InMemoryOutcomeEffects(InMemoryHeldOutcomes):
    """Outcomes and credits by load, fold, commit, with the outcomes held for
    memories not written yet (`InMemoryHeldOutcomes`)."""

    def _view(self, outcome: Outcome, memory_ids: Sequence[str]) -> EffectsView:
        """Whether the outcome was applied, and per memory its owner, confidence and
        last access."""
        memories: dict[str, MemoryState] = {}
        for memory_id in memory_ids:
            doc = self.core.records.get(memory_id)
            owned = doc is not None and text_of(doc.get("agent_id", "")) == outcome.agent_id
            confidence = doc.get("confidence") if doc is not None else None
            accessed = self.core.usage_hashes.get(memory_id, {}).get("last_accessed")
            memories[memory_id] = MemoryState(
                owned,
                None if confidence is None else text_of(confidence),
                None if accessed is None else text_of(accessed),
            )
        applied = outcome.outcome_id in self.core.applied_outcomes.get(outcome.agent_id, set())
        return EffectsView(applied, memories)

    def _commit(self, agent_id: str, changes: EffectChanges) -> None:
        """The changes' writes, as RedisOutcomeEffects queues them."""
        if changes.mark_applied:
            self.core.applied_outcomes.setdefault(agent_id, set()).add(changes.outcome_id)
        for change in changes.memories:
            doc = self.core.records[change.memory_id]
            if change.confidence is not None:
                doc["confidence"] = change.confidence
            if change.last_accessed is not None:
                usage = self.core.usage_hashes.setdefault(change.memory_id, {})
                usage["last_accessed"] = change.last_accessed
            if change.strength is not None:
                strength = float(text_of(doc.get("strength", "1"))) + change.strength
                doc["strength"] = repr(strength)
            for name, amount in (
                ("validated_count", change.validated),
                ("contradicted_count", change.contradicted),
            ):
                if amount:
                    doc[name] = str(int(text_of(doc.get(name, "0"))) + amount)
            if change.causal_uplift is not None:
                doc["causal_uplift"] = change.causal_uplift

    async def apply_outcome(self, outcome: Outcome, journal: tuple[int, int] | None = None) -> int:
        """The outcome's fold, loaded and committed here; -1 when it was applied
        before, else how many of the agent's memories it changed."""
        effect = outcome.effect
        changes = fold_outcome(self._view(outcome, outcome.memory_ids), outcome)
        changed = -1
        if changes is not None:
            self._commit(outcome.agent_id, changes)
            changed = changes.changed
        if effect.touches_memories:  # marked on a redelivery too, as Redis does
            curator_indexes(self).changed(outcome.agent_id, outcome.memory_ids)
        if changed > 0 and effect.touches_memories:
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
        """The credits' fold, loaded and committed here, with `also` and `counters`."""
        ids = credited_ids(credits, uplifts)
        changes = fold_credits(self._view(outcome, ids), outcome, credits, uplifts)
        if changes is None:
            return -1
        self._commit(outcome.agent_id, changes)
        self.core.count(outcome.agent_id, counters)
        for part in also:
            await part.apply_alone()
        curator_indexes(self).changed(outcome.agent_id, ids)
        if changes.changed > 0:
            await self.core.decay.reschedule(outcome.agent_id, ids, outcome.ts_ms)
        return changes.changed
