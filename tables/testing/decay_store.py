"""The reference `DecayStore`: DecayIndex's semantics over plain dicts.

It reads memory and usage fields from an in-memory memory store (anything with
`InMemoryMemoryStore`'s `record`/`usage`/`hashes`), decoded by the same
`decode_state` the Redis script's rows go through, and keeps the schedule and
the snapshots the way Redis holds them: due times per agent (a sorted set, read
in (due, id) order), snapshot fields as the strings HSET would store. Unit tests
run the decay pass against it, and the decay contract test checks DecayIndex
against it.

`InMemoryMemoryStore.commit` does not schedule its writes (RedisMemoryWrites'
commit does, through `DecayIndex.schedule_new`): a test writing memories calls
`schedule_new` with their fields, or `ensure_seeded`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grimoire.streams.maintenance.decay_pass import (
    DEFAULT_DECAY_BANDS,
    DecayBands,
    DecayPassPlan,
)
from grimoire.streams.maintenance.schedule import DecayOutlook
from grimoire.streams.model.decay import DEFAULT_DECAY_POLICY, DecayPolicy
from grimoire.tables.codec.hash_values import stored_number, stored_text
from grimoire.tables.codec.memory_hash import StoredDecayState, decode_state
from grimoire.tables.maintenance.decay_index import DecayRules, DueDecay
from grimoire.tables.ports.testing import MemoryHashes
from grimoire.tables.testing.curator_marks import curator_indexes

__all__ = ["InMemoryDecayStore"]


class InMemoryDecayStore(DecayRules):
    def __init__(
        self,
        memories: MemoryHashes,
        *,
        bands: DecayBands = DEFAULT_DECAY_BANDS,
        policy: DecayPolicy = DEFAULT_DECAY_POLICY,
    ) -> None:
        super().__init__(bands, policy)
        self._memories = memories
        self._schedules: dict[str, dict[str, int]] = {}
        # Keyed by memory alone, like `{prefix}:decayed:{memory}`.
        self._snapshots: dict[str, dict[str, str]] = {}
        self._seeded: dict[str, int] = {}

    # ---- scheduling (DecayIndex.schedule / schedule_new without the pipeline) ---

    def schedule(
        self, agent_id: str, memory_id: str, due: int | None, *, keep_existing: bool = False
    ) -> None:
        schedule = self._schedules.setdefault(agent_id, {})
        if due is None:
            if not keep_existing:
                schedule.pop(memory_id, None)
        elif not (keep_existing and memory_id in schedule):  # ZADD NX
            schedule[memory_id] = due

    def schedule_new(self, fields: Mapping[str, Any], *, keep_existing: bool = False) -> None:
        """What the write path does for a freshly written memory (its `hash_fields`),
        with the curator's first look at a new curated entry."""
        curator_indexes(self._memories).new(fields)
        first = self._first_due(fields)
        if first is not None:
            state, due = first
            self.schedule(state.agent_id, state.entry.memory_id, due, keep_existing=keep_existing)

    async def reschedule(self, agent_id: str, memory_ids: Sequence[str], now_ms: int) -> None:
        states = self._read_states(memory_ids)
        for memory_id, state in zip(memory_ids, states, strict=True):
            if state is not None and state.agent_id != agent_id:
                continue  # another agent's memory: never ours to schedule
            self.schedule(agent_id, memory_id, self._due(state, now_ms))

    # ---- the pass ---------------------------------------------------------------

    async def due(self, agent_id: str, as_of_ms: int, limit: int) -> DueDecay:
        ranked = sorted(
            (due, memory_id)
            for memory_id, due in self._schedules.get(agent_id, {}).items()
            if due <= as_of_ms
        )
        # ZRANGEBYSCORE … LIMIT 0 n: a negative count means "all of them".
        taken = ranked if limit < 0 else ranked[:limit]
        due_ids = [memory_id for _, memory_id in taken]
        return DueDecay.of(agent_id, due_ids, self._read_states(due_ids))

    async def apply_pass(
        self, agent_id: str, as_of_ms: int, plan: DecayPassPlan, *, gone: Sequence[str] = ()
    ) -> None:
        for update in plan.updates:
            snapshot = self._snapshots.setdefault(update.memory_id, {})
            snapshot.update(
                effective=repr(update.effective_after), band=str(update.band), as_of=str(as_of_ms)
            )
            self.schedule(agent_id, update.memory_id, update.next_due_ms)
        schedule = self._schedules.get(agent_id, {})
        for memory_id in (*gone, *plan.invalid):
            schedule.pop(memory_id, None)

    async def outlook(self, agent_ids: Sequence[str]) -> dict[str, DecayOutlook]:
        found = {}
        for agent_id in agent_ids:
            schedule = self._schedules.get(agent_id, {})
            head = min(schedule.values()) if schedule else None
            found[agent_id] = DecayOutlook(agent_id in self._seeded, head)
        return found

    # ---- migration --------------------------------------------------------------

    async def ensure_seeded(self, agent_id: str, now_ms: int) -> int | None:
        if agent_id in self._seeded:
            return None
        scheduled = await self.seed(agent_id, now_ms)
        self._seeded[agent_id] = now_ms
        return scheduled

    async def seed(self, agent_id: str, now_ms: int) -> int:
        """Upserts every stored, non-deleted, non-archived memory's due time (what
        DecayIndex.seed finds through the index); removes nothing else."""
        if not agent_id:
            raise ValueError("every memory query needs an agent_id")  # as tenant_filter
        docs = [
            doc
            for doc in self._memories.hashes()
            if stored_text(doc.get("agent_id")) == agent_id
            and stored_text(doc.get("deleted")) != "1"
            and stored_text(doc.get("archived")) != "1"
        ]
        docs.sort(key=lambda doc: stored_number(doc.get("ts"), 0.0))
        scheduled = 0
        for doc in docs:
            state = self._state(stored_text(doc.get("memory_id")))
            if state is not None and state.agent_id == agent_id:
                due = self._due(state, now_ms)
                self.schedule(agent_id, state.entry.memory_id, due)
                scheduled += due is not None
        return scheduled

    # ---- reads ------------------------------------------------------------------

    def _state(self, memory_id: str) -> StoredDecayState | None:
        doc = self._memories.record(memory_id)
        if doc is None:
            return None
        usage = self._memories.usage(memory_id)
        snapshot = self._snapshots.get(memory_id, {})
        return decode_state(doc, usage.get("last_accessed"), snapshot.get("effective"))

    def _read_states(self, memory_ids: Sequence[str]) -> list[StoredDecayState | None]:
        return [self._state(memory_id) for memory_id in memory_ids]

    # ---- inspection (what the Redis keys hold) ------------------------------------

    def scheduled(self, agent_id: str) -> dict[str, int]:
        """The agent's schedule: memory id → due time (`{prefix}:decay:{agent}`)."""
        return dict(self._schedules.get(agent_id, {}))

    def snapshot(self, memory_id: str) -> dict[str, str]:
        """The last pass's snapshot (`{prefix}:decayed:{memory}`); {} when none."""
        return dict(self._snapshots.get(memory_id, {}))

    def seeded_at(self, agent_id: str) -> int | None:
        """When the agent was seeded (`{prefix}:decay-seeded:{agent}`)."""
        return self._seeded.get(agent_id)
