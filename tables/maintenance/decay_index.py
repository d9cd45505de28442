"""The decay schedule in Redis: which memories' decay state changes next, and when.

decay:    {prefix}:decay:{agent}     ZSET memory id → due event time (ms): the
          next moment its read-time effective confidence changes band
decayed:  {prefix}:decayed:{memory}  HASH effective, band, as_of: the last pass's
          snapshot. Deliberately not on the memory hash: an HSET there makes
          RediSearch re-index the document and both of its vectors.

A pass reads only the members due by `now_ms` (ZRANGEBYSCORE … LIMIT), so its work
is proportional to what can have changed, not to how many memories the agent has.

`DecayStore` is what the decay pass (`agents/maintenance/decay_task.py`) needs
from storage: it reads the due entries here, plans with the pure
`grimoire.streams.maintenance.decay_pass.plan_decay_pass`, and writes the plan
back here. `DecayIndex` is the Redis implementation;
`grimoire.tables.testing.decay_store.InMemoryDecayStore` is the reference one.
The write path keeps using `DecayIndex.schedule`/`schedule_new` directly: they
queue on its own pipeline, so a memory and its first due time land together (and
a new insight, heuristic or warning with its first curator look).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from redis.asyncio import Redis
from redisvl.query.filter import Tag

from grimoire.streams.maintenance.decay_pass import (
    DEFAULT_DECAY_BANDS,
    DecayBands,
    DecayEntry,
    DecayPassPlan,
    due_ms,
    initial_due_ms,
)
from grimoire.streams.maintenance.schedule import DecayOutlook
from grimoire.streams.model.decay import DEFAULT_DECAY_POLICY, DecayPolicy
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.memory_hash import DECAY_FIELDS, StoredDecayState, decode_state
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.curator_marks import queue_new
from grimoire.tables.ordered_search import index_search, ts_windows
from grimoire.tables.queries import tenant_filter
from grimoire.tables.routing import SearchRouting

__all__ = ["SEED_BATCH", "DecayIndex", "DecayRules", "DueDecay"]

logger = logging.getLogger(__name__)

SEED_BATCH: Final = 1000

# Every due entry's decay inputs in one call: the memory hash's fields, then the
# usage hash's last_accessed, then the stored snapshot. KEYS come in triples.
_READ_DECAY_STATE = """
local out = {}
for i = 1, #KEYS, 3 do
  local row = redis.call('HMGET', KEYS[i], unpack(ARGV))
  row[#row + 1] = redis.call('HGET', KEYS[i + 1], 'last_accessed')
  row[#row + 1] = redis.call('HGET', KEYS[i + 2], 'effective')
  out[#out + 1] = row
end
return out
"""


@dataclass(frozen=True, slots=True)
class DueDecay:
    """What a pass reads: the live entries due by its time (oldest due first), and
    the due ids decay no longer applies to (missing, deleted, archived, compacted
    into a summary, or another agent's), which the pass drops from the schedule."""

    entries: tuple[DecayEntry, ...] = ()
    gone: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        agent_id: str,
        memory_ids: Sequence[str],
        states: Sequence[StoredDecayState | None],
    ) -> DueDecay:
        """Sort due ids by their stored state; every store splits them the same way."""
        entries: list[DecayEntry] = []
        gone: list[str] = []
        for memory_id, state in zip(memory_ids, states, strict=True):
            if state is None or not state.live or state.agent_id != agent_id:
                gone.append(memory_id)
            else:
                entries.append(state.entry)
        return cls(tuple(entries), tuple(gone))


class DecayRules:
    """The bands and policy a decay store schedules by, and the due times they give:
    the Redis store and the in-memory one derive them alike, so they schedule alike."""

    def __init__(self, bands: DecayBands, policy: DecayPolicy) -> None:
        bands.check(policy.floor)
        self._bands = bands
        self._policy = policy

    @property
    def bands(self) -> DecayBands:
        return self._bands

    @property
    def policy(self) -> DecayPolicy:
        return self._policy

    def _first_due(self, fields: Mapping[str, Any]) -> tuple[StoredDecayState, int | None] | None:
        """A freshly written memory (its `hash_fields`) and its first crossing; None
        for one that is not scheduled (not live, or whose fields decay cannot use)."""
        state = decode_state(fields, None, None)
        if state is None or not state.live:
            return None
        try:
            return state, initial_due_ms(state.entry, self._bands, self._policy)
        except ValueError as exc:
            logger.warning("decay cannot schedule %s: %s", state.entry.memory_id, exc)
            return None

    def _due(self, state: StoredDecayState | None, now_ms: int) -> int | None:
        if state is None or not state.live:
            return None
        try:
            return due_ms(state.entry, now_ms, self._bands, self._policy)
        except ValueError as exc:
            logger.warning("decay cannot schedule %s: %s", state.entry.memory_id, exc)
            return None


class DecayIndex(DecayRules):
    """The Redis `DecayStore`, plus the pipeline helpers the write path schedules with."""

    def __init__(
        self,
        redis: Redis,
        prefix: str,
        *,
        bands: DecayBands = DEFAULT_DECAY_BANDS,
        policy: DecayPolicy = DEFAULT_DECAY_POLICY,
    ) -> None:
        super().__init__(bands, policy)
        self._redis = redis
        self.keys = Keyspace(prefix)
        self._read = redis.register_script(_READ_DECAY_STATE)
        self._routing = SearchRouting(redis, prefix)

    # ---- scheduling -------------------------------------------------------------

    def schedule(
        self,
        pipe: Any,
        agent_id: str,
        memory_id: str,
        due: int | None,
        *,
        keep_existing: bool = False,
    ) -> None:
        """Queue a memory's due time on the caller's pipeline; None unschedules it.
        `keep_existing` leaves an already scheduled memory's due time alone."""
        key = self.keys.decay_schedule(agent_id)
        if due is None:
            if not keep_existing:
                pipe.zrem(key, memory_id)
        else:
            pipe.zadd(key, {memory_id: due}, nx=keep_existing)

    def schedule_new(
        self, pipe: Any, fields: Mapping[str, Any], *, keep_existing: bool = False
    ) -> None:
        """Queue a freshly written memory (its `hash_fields`) at its first crossing;
        with `keep_existing`, only if it is not scheduled yet (an aggregate's seed
        is written only by the fold that creates it). A live curated entry is also
        due for the curator's next cycle (`curator_marks`), in the same transaction."""
        queue_new(pipe, self.keys, fields)
        first = self._first_due(fields)
        if first is not None:
            state, due = first
            self.schedule(
                pipe, state.agent_id, state.entry.memory_id, due, keep_existing=keep_existing
            )

    async def reschedule(self, agent_id: str, memory_ids: Sequence[str], now_ms: int) -> None:
        """Recompute due times after accesses or outcomes changed the stored fields."""
        if not memory_ids:
            return
        states = await self._read_states(agent_id, memory_ids)
        async with self._redis.pipeline(transaction=False) as pipe:
            for memory_id, state in zip(memory_ids, states, strict=True):
                if state is not None and state.agent_id != agent_id:
                    continue  # another agent's memory: never ours to schedule
                self.schedule(pipe, agent_id, memory_id, self._due(state, now_ms))
            await pipe.execute()

    # ---- the pass ---------------------------------------------------------------

    async def due(self, agent_id: str, as_of_ms: int, limit: int) -> DueDecay:
        """Two round trips whatever the agent's size: the due ids, then their fields."""
        key = self.keys.decay_schedule(agent_id)
        raw = await self._redis.zrangebyscore(key, "-inf", as_of_ms, start=0, num=limit)
        due_ids = [text_of(member) for member in raw]
        if not due_ids:
            return DueDecay()
        return DueDecay.of(agent_id, due_ids, await self._read_states(agent_id, due_ids))

    async def apply_pass(
        self, agent_id: str, as_of_ms: int, plan: DecayPassPlan, *, gone: Sequence[str] = ()
    ) -> None:
        """Every write in one pipeline (one round trip)."""
        dropped = (*gone, *plan.invalid)
        if not plan.updates and not dropped:
            return
        key = self.keys.decay_schedule(agent_id)
        async with self._redis.pipeline(transaction=False) as pipe:
            for update in plan.updates:
                pipe.hset(
                    self.keys.decayed(agent_id, update.memory_id),
                    mapping={
                        # repr round-trips the float exactly: the snapshot equals
                        # what a reader computes at `as_of`.
                        "effective": repr(update.effective_after),
                        "band": update.band,
                        "as_of": as_of_ms,
                    },
                )
                self.schedule(pipe, agent_id, update.memory_id, update.next_due_ms)
            for memory_id in dropped:
                pipe.zrem(key, memory_id)
            await pipe.execute()

    async def outlook(self, agent_ids: Sequence[str]) -> dict[str, DecayOutlook]:
        if not agent_ids:
            return {}
        async with self._redis.pipeline(transaction=False) as pipe:
            for agent_id in agent_ids:
                pipe.exists(self.keys.decay_seeded(agent_id))
                pipe.zrange(self.keys.decay_schedule(agent_id), 0, 0, withscores=True)
            replies = await pipe.execute()
        found = {}
        for n, agent_id in enumerate(agent_ids):
            seeded, head = replies[2 * n], replies[2 * n + 1]
            found[agent_id] = DecayOutlook(bool(seeded), int(head[0][1]) if head else None)
        return found

    # ---- migration --------------------------------------------------------------

    async def ensure_seeded(self, agent_id: str, now_ms: int) -> int | None:
        """Seed an agent once (memories stored before the schedule existed, e.g.
        after an upgrade); later calls cost one EXISTS. Returns how many it
        scheduled, or None when the agent was seeded before."""
        marker = self.keys.decay_seeded(agent_id)
        if await self._redis.exists(marker):
            return None
        scheduled = await self.seed(agent_id, now_ms)
        await self._redis.set(marker, now_ms)
        return scheduled

    async def seed(self, agent_id: str, now_ms: int, *, batch: int = SEED_BATCH) -> int:
        """Schedule every stored, non-deleted, non-archived memory of an agent.

        For data written before the schedule existed. It upserts due times and
        removes nothing: a stale member (deleted since) is dropped by the pass
        when it comes due, so writes racing the seed are never lost. Returns how
        many memories were scheduled."""
        live = str(tenant_filter(agent_id) & (Tag("deleted") != "1") & (Tag("archived") != "1"))
        search = index_search(self._redis, await self._routing.target(agent_id))
        memory_id_of = self.keys.memory_id_of
        scheduled = 0
        # Windows of event time, not LIMIT offsets: memories sharing a `ts` have no
        # stable order across FT.SEARCH pages, so offsets skipped some of them.
        async for window in ts_windows(search, live, page=batch):
            ids = [memory_id_of(key) for key in window]
            states = await self._read_states(agent_id, ids)
            async with self._redis.pipeline(transaction=False) as pipe:
                for memory_id, state in zip(ids, states, strict=True):
                    if state is not None and state.agent_id == agent_id:
                        due = self._due(state, now_ms)
                        self.schedule(pipe, agent_id, memory_id, due)
                        scheduled += due is not None
                await pipe.execute()
        return scheduled

    # ---- reads ------------------------------------------------------------------

    async def _read_states(
        self, agent_id: str, memory_ids: Sequence[str]
    ) -> list[StoredDecayState | None]:
        keys: list[str] = []
        for memory_id in memory_ids:
            keys += [
                self.keys.memory(agent_id, memory_id),
                self.keys.usage(agent_id, memory_id),
                self.keys.decayed(agent_id, memory_id),
            ]
        rows = await self._read(keys=keys, args=list(DECAY_FIELDS))
        width = len(DECAY_FIELDS)
        states: list[StoredDecayState | None] = []
        for row in rows:
            doc = dict(zip(DECAY_FIELDS, row[:width], strict=True))
            states.append(decode_state(doc, row[width], row[width + 1]))
        return states
