"""The curator's storage: read a cycle's inputs, apply a planned cycle atomically.

Keys (besides the memory and usage hashes of record_codec):
  `{prefix}:curator:{agent}`             hash: cycle, watermark, report (JSON),
                                         scheduled (the indexes below are built)
  `{prefix}:curator:{agent}:entries`     hash: memory id → bookkeeping JSON
  `{prefix}:curator:{agent}:due`         zset: memory id → next look (event ms)
  `{prefix}:curator:{agent}:signatures`  zset (lex): `kind|signature|memory id`
  `{prefix}:curator:{agent}:playbook`    set: the playbook's heuristic ids
  `{prefix}:playbook:{agent}`            string: PLAYBOOK.md
and each written entry's evidence edges in the derivation index
(`grimoire.tables.trust.derivations`).

A cycle reads what is due by its time, what its episodes' situations name and
the playbook (`grimoire.streams.learn.curator.schedule`), never every entry; the
first cycle of an agent whose indexes are not built yet (`scheduled` unset: a
new agent, or one stored before them) reads every entry once and builds them.

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
from typing import Any, Final

from redis.asyncio import Redis
from redis.exceptions import WatchError
from redisvl.query.filter import FilterExpression, Num, Tag

from grimoire.streams.learn.curator.distill import EpisodeView
from grimoire.streams.learn.curator.playbook import EvidenceRow, render_evidence, with_evidence
from grimoire.streams.learn.curator.values import (
    CURATED_KINDS,
    CuratedEntry,
    CuratorPlan,
    CuratorReport,
    EntryStatus,
    QuarantineAction,
    QuarantinedView,
)
from grimoire.streams.learn.evidence import DEFAULT_EVIDENCE_POLICY, EVIDENCE_EVENT_TYPE
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
    EVIDENCE_FIELDS,
    QUARANTINE_FIELDS,
    changed_curated_fields,
    curated_entry,
    curated_fields,
    episode_view,
    evidence_row,
    quarantined_view,
)
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.curator_marks import is_new_curated
from grimoire.tables.memory.graph import RedisGraph
from grimoire.tables.ordered_search import index_search, ordered_keys
from grimoire.tables.ports.maintenance import CuratorStore
from grimoire.tables.queries import tenant_filter
from grimoire.tables.routing import SearchRouting
from grimoire.tables.transaction import agent_transaction
from grimoire.tables.trust.derivations import curated_edges, queue_edges

__all__ = [
    "DEFAULT_MAX_EPISODES",
    "LOAD_FIELDS",
    "MAX_ENTRIES",
    "MAX_QUARANTINED",
    "CuratorCycle",
    "CuratorInputs",
    "CuratorState",
    "RedisCuratorStore",
    "loaded_entry",
    "missing_vectors",
    "playbook_text",
]

logger = logging.getLogger(__name__)

PAGE: Final = 500
DEFAULT_MAX_EPISODES: Final = 10_000
MAX_ENTRIES: Final = 100_000
MAX_QUARANTINED: Final = 10_000


# What `load` reads of a memory hash: the owner and liveness flags, then the entry.
LOAD_FIELDS: Final = (
    "agent_id", "deleted", "quarantined", "archived", "event_type", *ENTRY_FIELDS,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class CuratorState:
    """What the last completed cycle left: its number and the newest episode time
    it considered (both -1 before the first cycle), its report, and whether the
    indexes a cycle reads instead of every entry are built."""

    cycle: int = -1
    watermark_ms: int = -1
    report: CuratorReport | None = None
    scheduled: bool = False


@dataclass(frozen=True, slots=True)
class CuratorInputs:
    """Everything a cycle plans from, each oldest first (event time).

    `entries` are the ones the cycle looks at (every live one when it reads them
    all), `context` the ones it only reads (see `plan_cycle`). `gone`: ids an
    index named that are no longer live curated entries of the agent;
    `stale_signatures`: signature-index members naming them.
    """

    episodes: tuple[EpisodeView, ...]
    entries: tuple[CuratedEntry, ...]
    quarantined: tuple[QuarantinedView, ...]
    context: tuple[CuratedEntry, ...] = ()
    gone: tuple[str, ...] = ()
    stale_signatures: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CuratorCycle:
    """One planned cycle, as the store writes it.

    `before` are the entries the plan was made from (usage times only move
    forward from them); `vectors` holds, by memory id, the embedding of every
    change whose text the plan wrote; `playbook` is the rendered PLAYBOOK.md;
    `gone` / `stale_signatures` leave the indexes (`CuratorInputs`).
    """

    agent_id: str
    plan: CuratorPlan
    before: tuple[CuratedEntry, ...]
    vectors: Mapping[str, bytes]
    playbook: str
    gone: tuple[str, ...] = ()
    stale_signatures: tuple[str, ...] = ()

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


def loaded_entry(
    agent_id: str, row: Sequence[Any], usage_accessed: Any, book: Any
) -> CuratedEntry | None:
    """An entry from its memory hash's `LOAD_FIELDS` values, its usage hash's
    `last_accessed` and its bookkeeping JSON; None unless it is a live (neither
    deleted, quarantined nor archived) insight, heuristic or warning of the agent,
    which is what `entries` searches for."""
    doc = {name: value for name, value in zip(LOAD_FIELDS, row, strict=True) if value is not None}
    if text_of(doc.get("agent_id", b"")) != agent_id or doc.get("memory_id") is None:
        return None
    if not is_new_curated(doc):
        return None
    return curated_entry(doc, usage_accessed, bookkeeping_from_json(book))


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

    async def _search_all(
        self, agent_id: str, where: FilterExpression, fields: Sequence[str], limit: int
    ) -> list[dict[str, Any]]:
        """The first `limit` matches (`where` names the agent) by (ts, id), as the named
        fields its hash has. A cycle plans from these in this order, and a capped read
        keeps the oldest by that order: windows of event time that never split a tie
        (`ordered_search`), never LIMIT offsets over `SORTBY ts`, whose ties come
        back in the index's own order. The fields are read from the hashes (a
        cluster master loads no field of another slot's document)."""
        search = index_search(self._redis, await self._routing.target(agent_id))
        keys = await ordered_keys(search, str(where), limit, page=PAGE)
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
        # Evidence entries (and siblings' copies of them) are counts the fold keeps,
        # not beliefs the curator votes on, promotes or prunes.
        where = (
            tenant_filter(agent_id) & (Tag("kind") == [kind.value for kind in CURATED_KINDS])
            & _not("deleted") & _not("quarantined") & _not("archived")
            & (Tag("event_type") != EVIDENCE_EVENT_TYPE)
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

    async def due_ids(self, agent_id: str, now_ms: int) -> list[str]:
        raw = await self._redis.zrangebyscore(self._keys.curator_due(agent_id), "-inf", now_ms)
        return [text_of(member) for member in raw]

    async def playbook_ids(self, agent_id: str) -> list[str]:
        raw = await self._redis.smembers(self._keys.curator_playbook(agent_id))
        return sorted(text_of(member) for member in raw)

    async def signature_members(
        self, agent_id: str, prefixes: Sequence[str]
    ) -> dict[str, list[str]]:
        if not prefixes:
            return {}
        key = self._keys.curator_signatures(agent_id)
        async with self._redis.pipeline(transaction=False) as pipe:
            for prefix in prefixes:
                # Members are the prefix and a memory id (ASCII below DEL).
                pipe.zrangebylex(key, f"[{prefix}", f"({prefix}\x7f")
            replies = await pipe.execute()
        return {
            prefix: sorted(text_of(member) for member in reply)
            for prefix, reply in zip(prefixes, replies, strict=True)
        }

    async def load(self, agent_id: str, memory_ids: Sequence[str]) -> dict[str, CuratedEntry]:
        ids = list(dict.fromkeys(memory_ids))
        if not ids:
            return {}
        async with self._redis.pipeline(transaction=False) as pipe:
            for memory_id in ids:
                pipe.hmget(self.memory_key(agent_id, memory_id), list(LOAD_FIELDS))
                pipe.hget(self.usage_key(agent_id, memory_id), "last_accessed")
            pipe.hmget(self.entries_key(agent_id), ids)
            replies = await pipe.execute()
        books = replies[-1]
        found: dict[str, CuratedEntry] = {}
        for index, memory_id in enumerate(ids):
            row, usage = replies[2 * index], replies[2 * index + 1]
            entry = loaded_entry(agent_id, row, usage, books[index])
            if entry is not None and entry.memory_id == memory_id:
                found[memory_id] = entry
        return found

    async def state(self, agent_id: str) -> CuratorState:
        cycle, mark, report, scheduled = await self._redis.hmget(
            self.state_key(agent_id), ["cycle", "watermark", "report", "scheduled"]
        )
        return CuratorState(
            cycle=int(text_of(cycle)) if cycle is not None else -1,
            watermark_ms=int(text_of(mark)) if mark is not None else -1,
            report=report_from_json(report) if report is not None else None,
            scheduled=scheduled is not None and text_of(scheduled) == "1",
        )

    async def get_playbook(self, agent_id: str) -> str | None:
        raw = await self._redis.get(self.playbook_key(agent_id))
        return None if raw is None else text_of(raw)

    async def evidence(self, agent_id: str, clade_weight: float) -> list[EvidenceRow]:
        """The agent's live evidence entries and its clade's copies of theirs."""
        where = (
            tenant_filter(agent_id) & (Tag("event_type") == EVIDENCE_EVENT_TYPE)
            & _not("deleted") & _not("archived")
        )  # fmt: skip
        rows = await self._search_all(agent_id, where, EVIDENCE_FIELDS, MAX_ENTRIES)
        return [evidence_row(row, clade_weight) for row in rows]

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
            queue_edges(pipe, self._keys, agent_id, curated_edges(cycle.plan, cycle.before))
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
        self._queue_indexes(pipe, cycle)
        pipe.set(self.playbook_key(agent_id), cycle.playbook)
        pipe.hset(
            self.state_key(agent_id),
            mapping={
                "cycle": plan.report.cycle,
                "watermark": plan.watermark_ms,
                "report": report_json(plan.report),
                "scheduled": "1",
            },
        )

    def _queue_indexes(self, pipe: Any, cycle: CuratorCycle) -> None:
        """The schedule, signature and playbook indexes after the cycle."""
        agent_id, schedule = cycle.agent_id, cycle.plan.schedule
        due = self._keys.curator_due(agent_id)
        signatures = self._keys.curator_signatures(agent_id)
        playbook = self._keys.curator_playbook(agent_id)
        # What the indexes named but is gone first: a quarantined entry this cycle
        # released is both, and is due again.
        if cycle.gone:
            pipe.zrem(due, *cycle.gone)
            pipe.srem(playbook, *cycle.gone)
        if schedule.dropped:
            pipe.zrem(due, *schedule.dropped)
        if schedule.due:
            pipe.zadd(due, dict(schedule.due))
        if unsigned := (*cycle.stale_signatures, *schedule.unsigned):
            pipe.zrem(signatures, *unsigned)
        if schedule.signed:
            pipe.zadd(signatures, dict.fromkeys(schedule.signed, 0))
        if schedule.unplaybook:
            pipe.srem(playbook, *schedule.unplaybook)
        if schedule.playbook:
            pipe.sadd(playbook, *schedule.playbook)


async def playbook_text(store: CuratorStore, agent_id: str, clade_weight: float) -> str | None:
    """PLAYBOOK.md as an agent's reader gets it: the curator's last rendering, then,
    when the agent has evidence, the evidence section, built from the evidence
    entries as they are now (None: neither a rendering nor any evidence yet)."""
    stored = await store.get_playbook(agent_id)
    rows = await store.evidence(agent_id, clade_weight)
    if not rows:  # an agent that counts no evidence reads the curator's rendering alone
        return stored
    return with_evidence(stored, agent_id, render_evidence(rows, DEFAULT_EVIDENCE_POLICY))
