"""The curator's storage: read a cycle's inputs, apply a planned cycle atomically.

Keys (besides the memory and usage hashes of record_codec):
  `{prefix}:curator:{agent}`          hash: cycle, watermark, report (JSON)
  `{prefix}:curator:{agent}:entries`  hash: memory id → bookkeeping JSON
  `{prefix}:playbook:{agent}`         string: PLAYBOOK.md
and each written entry's evidence edges in the derivation index
(`grimoire.tables.trust.derivations`).

`CuratorStore` is what a cycle (`agents/maintenance/curator_task.py`) needs from
storage: it reads the inputs here, plans with the pure
`grimoire.streams.learn.curator.plan.plan_cycle`, embeds and renders, and hands
the result back to `apply`. `RedisCuratorStore` is the Redis implementation;
`grimoire.tables.testing.curator_store.InMemoryCuratorStore` is the reference one.

A cycle's writes and its state go in one MULTI/EXEC, so a crash leaves either
the whole cycle or none of it; the state key is WATCHed, so a cycle whose number
already ran is never applied twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from redis.asyncio import Redis
from redis.exceptions import WatchError
from redisvl.query.filter import FilterExpression, Num, Tag

from grimoire.streams.learn.curator.distill import EpisodeView
from grimoire.streams.learn.curator.values import (
    CURATED_KINDS,
    CuratedEntry,
    CuratorPlan,
    CuratorReport,
    EntryStatus,
    QuarantineAction,
    QuarantinedView,
)
from grimoire.tables.codec.curator_state import (
    bookkeeping_from_json,
    bookkeeping_json,
    report_from_json,
    report_json,
)
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.memory_hash import (
    ENTRY_FIELDS,
    EPISODE_FIELDS,
    QUARANTINE_FIELDS,
    changed_curated_fields,
    curated_entry,
    curated_fields,
    episode_view,
    quarantined_view,
)
from grimoire.tables.codec.search_replies import nocontent_keys, total_results
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.memory.graph import RedisGraph
from grimoire.tables.queries import tenant_filter
from grimoire.tables.routing import SearchRouting
from grimoire.tables.transaction import agent_transaction
from grimoire.tables.trust.derivations import curated_edges, queue_edges

__all__ = [
    "DEFAULT_MAX_EPISODES",
    "MAX_ENTRIES",
    "MAX_QUARANTINED",
    "CuratorCycle",
    "CuratorInputs",
    "CuratorState",
    "CuratorStore",
    "RedisCuratorStore",
    "missing_vectors",
]

logger = logging.getLogger(__name__)

PAGE: Final = 500
DEFAULT_MAX_EPISODES: Final = 10_000
MAX_ENTRIES: Final = 100_000
MAX_QUARANTINED: Final = 10_000


@dataclass(frozen=True, slots=True)
class CuratorState:
    """What the last completed cycle left: its number and the newest episode time
    it considered (both -1 before the first cycle), and its report."""

    cycle: int = -1
    watermark_ms: int = -1
    report: CuratorReport | None = None


@dataclass(frozen=True, slots=True)
class CuratorInputs:
    """Everything a cycle plans from, each oldest first (event time)."""

    episodes: tuple[EpisodeView, ...]
    entries: tuple[CuratedEntry, ...]
    quarantined: tuple[QuarantinedView, ...]


@dataclass(frozen=True, slots=True)
class CuratorCycle:
    """One planned cycle, as the store writes it.

    `before` are the entries the plan was made from (usage times only move
    forward from them); `vectors` holds, by memory id, the embedding of every
    change whose text the plan wrote; `playbook` is the rendered PLAYBOOK.md.
    """

    agent_id: str
    plan: CuratorPlan
    before: tuple[CuratedEntry, ...]
    vectors: Mapping[str, bytes]
    playbook: str

    @property
    def cycle(self) -> int:
        return self.plan.report.cycle


def missing_vectors(cycle: CuratorCycle) -> list[str]:
    """Changes whose text the plan wrote but that come without a vector: a store
    refuses the cycle rather than index a memory without its embedding."""
    return [
        change.entry.memory_id
        for change in cycle.plan.changes
        if change.text_changed and change.entry.memory_id not in cycle.vectors
    ]


class CuratorStore(Protocol):
    """The curator's storage, per agent. Reads see only the agent's own memories."""

    async def state(self, agent_id: str) -> CuratorState: ...

    async def cycle_inputs(self, agent_id: str, watermark_ms: int) -> CuratorInputs:
        """The live episodes newer than `watermark_ms` (up to the store's episode
        cap), the live curated entries, and the quarantined memories to review."""
        ...

    async def entries(self, agent_id: str) -> list[CuratedEntry]:
        """The live insights, heuristics and warnings (neither quarantined nor
        archived), with their decay origin and bookkeeping."""
        ...

    async def get_playbook(self, agent_id: str) -> str | None: ...

    async def apply(self, cycle: CuratorCycle) -> bool:
        """Write the whole cycle or nothing: records, usage times, bookkeeping,
        quarantine decisions, playbook and state. False, writing nothing, when a
        cycle numbered the same or later has already been applied. Raises
        ValueError when a rewritten text comes without its vector."""
        ...


def _not(name: str) -> FilterExpression:
    return Tag(name) != "1"


class RedisCuratorStore:
    def __init__(
        self, redis: Redis, prefix: str, *, max_episodes: int = DEFAULT_MAX_EPISODES
    ) -> None:
        self._redis = redis
        self._keys = Keyspace(prefix)
        self._max_episodes = max_episodes
        self._routing = SearchRouting(redis, prefix)
        self._graph = RedisGraph(redis, prefix)

    # ---- keys -------------------------------------------------------------------

    def memory_key(self, agent_id: str, memory_id: str) -> str:
        return self._keys.memory(agent_id, memory_id)

    def usage_key(self, agent_id: str, memory_id: str) -> str:
        return self._keys.usage(agent_id, memory_id)

    def state_key(self, agent_id: str) -> str:
        return self._keys.curator(agent_id)

    def entries_key(self, agent_id: str) -> str:
        return self._keys.curator_entries(agent_id)

    def playbook_key(self, agent_id: str) -> str:
        return self._keys.playbook(agent_id)

    # ---- reads ------------------------------------------------------------------

    def _search_args(self, index: str, where: FilterExpression, offset: int) -> list[Any]:
        return [
            "FT.SEARCH", index, str(where), "NOCONTENT",
            "SORTBY", "ts", "ASC", "LIMIT", offset, PAGE, "DIALECT", 2,
        ]  # fmt: skip

    async def _search_all(
        self, agent_id: str, where: FilterExpression, fields: Sequence[str], limit: int
    ) -> list[dict[str, Any]]:
        """Every match up to `limit` (`where` names the agent), as the named fields its
        hash has: the first page tells the total, the rest go in one pipeline, then
        the fields are read from the hashes (a cluster master loads no field of
        another slot's document)."""
        target = await self._routing.target(agent_id)
        first = await self._redis.execute_command(
            *self._search_args(target.index, where, 0), **target.options
        )
        # A raw RESP3 reply keys its map with bytes: reading "total_results" alone
        # read 0 there, and only the first page (500) was ever returned.
        total = total_results(first)
        replies = [first]
        offsets = range(PAGE, min(total, limit), PAGE)
        if offsets:
            async with self._redis.pipeline(transaction=False) as pipe:
                for offset in offsets:
                    pipe.execute_command(
                        *self._search_args(target.index, where, offset), **target.options
                    )
                replies += await pipe.execute()
        keys = [key for reply in replies for key in nocontent_keys(reply)][:limit]
        async with self._redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hmget(key, list(fields))
            rows = await pipe.execute() if keys else []
        found = []
        for row in rows:
            doc = {
                name: value for name, value in zip(fields, row, strict=True) if value is not None
            }
            if doc:  # else gone since the index listed it
                found.append(doc)
        return found

    async def episodes_since(self, agent_id: str, watermark_ms: int) -> list[EpisodeView]:
        where = (
            tenant_filter(agent_id) & (Tag("kind") == "episode") & _not("deleted")
            & _not("quarantined") & _not("archived") & (Num("ts") > watermark_ms)
        )  # fmt: skip
        rows = await self._search_all(agent_id, where, EPISODE_FIELDS, self._max_episodes)
        return [episode_view(row) for row in rows]

    async def entries(self, agent_id: str) -> list[CuratedEntry]:
        """The agent's live insights, heuristics and warnings (quarantined ones are
        reviewed separately)."""
        where = (
            tenant_filter(agent_id) & (Tag("kind") == [kind.value for kind in CURATED_KINDS])
            & _not("deleted") & _not("quarantined") & _not("archived")
        )  # fmt: skip
        rows = await self._search_all(agent_id, where, ENTRY_FIELDS, MAX_ENTRIES)
        ids = [text_of(row["memory_id"]) for row in rows]
        if not ids:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for memory_id in ids:
                pipe.hget(self.usage_key(agent_id, memory_id), "last_accessed")
            pipe.hmget(self.entries_key(agent_id), ids)
            replies = await pipe.execute()
        books = replies[-1]
        return [
            curated_entry(row, usage, bookkeeping_from_json(book))
            for row, usage, book in zip(rows, replies[: len(ids)], books, strict=True)
        ]

    async def quarantined(self, agent_id: str) -> list[QuarantinedView]:
        where = (
            tenant_filter(agent_id) & (Tag("quarantined") == "1")
            & _not("deleted") & _not("archived")
        )  # fmt: skip
        rows = await self._search_all(agent_id, where, QUARANTINE_FIELDS, MAX_QUARANTINED)
        return [quarantined_view(row) for row in rows]

    async def cycle_inputs(self, agent_id: str, watermark_ms: int) -> CuratorInputs:
        return CuratorInputs(
            episodes=tuple(await self.episodes_since(agent_id, watermark_ms)),
            entries=tuple(await self.entries(agent_id)),
            quarantined=tuple(await self.quarantined(agent_id)),
        )

    async def state(self, agent_id: str) -> CuratorState:
        cycle, mark, report = await self._redis.hmget(
            self.state_key(agent_id), ["cycle", "watermark", "report"]
        )
        return CuratorState(
            cycle=int(text_of(cycle)) if cycle is not None else -1,
            watermark_ms=int(text_of(mark)) if mark is not None else -1,
            report=report_from_json(report) if report is not None else None,
        )

    async def get_playbook(self, agent_id: str) -> str | None:
        raw = await self._redis.get(self.playbook_key(agent_id))
        return None if raw is None else text_of(raw)

    # ---- the cycle --------------------------------------------------------------

    async def apply(self, cycle: CuratorCycle) -> bool:
        if missing := missing_vectors(cycle):
            raise ValueError(f"curator cycle {cycle.cycle} lacks vectors for {missing}")
        agent_id = cycle.agent_id
        state_key = self.state_key(agent_id)
        async with agent_transaction(self._redis, agent_id) as pipe:
            # Only the agent's partition owner writes here; the WATCH turns a
            # duplicate run that slipped past the runner's check into a no-op.
            await pipe.watch(state_key)
            last = await pipe.hget(state_key, "cycle")
            if last is not None and int(text_of(last)) >= cycle.cycle:
                logger.info(
                    "curator cycle %d for %s not applied: cycle %s ran",
                    cycle.cycle, agent_id, text_of(last),
                )  # fmt: skip
                return False
            pipe.multi()
            self._queue(pipe, cycle)
            # What each entry the cycle wrote was distilled from (a retraction of
            # its evidence follows these edges), in the same transaction.
            queue_edges(pipe, self._keys, agent_id, curated_edges(cycle.plan))
            try:
                await pipe.execute()
            except WatchError:  # a cycle was applied since the read: this one is stale
                logger.info("curator cycle %d for %s lost the race", cycle.cycle, agent_id)
                return False
        return True

    def _queue(self, pipe: Any, cycle: CuratorCycle) -> None:
        agent_id, plan = cycle.agent_id, cycle.plan
        current = {entry.memory_id: entry for entry in cycle.before}
        entries_key = self.entries_key(agent_id)
        for change in plan.changes:
            entry = change.entry
            vector = cycle.vectors[entry.memory_id] if change.text_changed else None
            key = self.memory_key(agent_id, entry.memory_id)
            if change.new:
                assert vector is not None
                fields = curated_fields(agent_id, entry, vector)
                pipe.hset(key, mapping=fields)
                keys = text_of(fields["nexus_keys"]).split("|")
                self._graph.link(
                    pipe, agent_id, entry.memory_id, entry.ts_ms, [k for k in keys if k]
                )
            elif change.record_changed:
                pipe.hset(key, mapping=changed_curated_fields(entry, vector))
            old = current.get(entry.memory_id)
            if old is None or entry.last_accessed_ms > old.last_accessed_ms:
                pipe.hset(
                    self.usage_key(agent_id, entry.memory_id),
                    "last_accessed",
                    entry.last_accessed_ms,
                )
            if entry.status is EntryStatus.ARCHIVED:
                pipe.hdel(entries_key, entry.memory_id)
            else:
                pipe.hset(entries_key, entry.memory_id, bookkeeping_json(entry))
        for decision in plan.quarantine:
            key = self.memory_key(agent_id, decision.memory_id)
            if decision.action is QuarantineAction.RELEASE:
                pipe.hset(key, "quarantined", "0")
            else:
                pipe.hset(key, "archived", "1")
        changed = [c.entry.memory_id for c in plan.changes if c.new or c.record_changed]
        changed += [decision.memory_id for decision in plan.quarantine]
        self._graph.sync_nodes(pipe, agent_id, changed)
        pipe.set(self.playbook_key(agent_id), cycle.playbook)
        pipe.hset(
            self.state_key(agent_id),
            mapping={
                "cycle": plan.report.cycle,
                "watermark": plan.watermark_ms,
                "report": report_json(plan.report),
            },
        )
