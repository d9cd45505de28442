"""The curator's Redis side: read a cycle's inputs, apply its plan atomically.

Keys (besides the memory and usage hashes of record_codec):
  `{prefix}:curator:{agent}`          hash: cycle, watermark, report (JSON)
  `{prefix}:curator:{agent}:entries`  hash: memory id → bookkeeping JSON
  `{prefix}:playbook:{agent}`         string: PLAYBOOK.md

A cycle's writes and its state go in one MULTI/EXEC, so a crash leaves either
the whole cycle or none of it, and `run_cycle(agent, now, n)` for an `n` that
already ran only returns that cycle's report.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from redis.asyncio import Redis
from redisvl.query.filter import FilterExpression, Num, Tag

from grimoire.streams.learn.curator.distill import Distiller, EpisodeView
from grimoire.streams.learn.curator.plan import effective, plan_cycle
from grimoire.streams.learn.curator.playbook import render_playbook
from grimoire.streams.learn.curator.values import (
    CuratedEntry,
    CuratorPlan,
    CuratorPolicy,
    CuratorReport,
    EntryStatus,
    QuarantineAction,
    QuarantinedView,
)
from grimoire.tables.codec.curated_entry import (
    ENTRY_FIELDS,
    EPISODE_FIELDS,
    QUARANTINE_FIELDS,
    bookkeeping_json,
    changed_record_fields,
    curated_entry,
    episode_view,
    new_record_fields,
    quarantined_view,
    report_from_json,
    report_json,
)
from grimoire.tables.codec.memory_hash import text_of
from grimoire.tables.codec.search_replies import doc_fields, docs
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.memory.graph import RedisGraph
from grimoire.tables.queries import tenant_filter

logger = logging.getLogger(__name__)

Embed = Callable[[Sequence[str]], Awaitable[list[bytes]]]
PAGE = 500


def _not(name: str) -> FilterExpression:
    return Tag(name) != "1"


class RedisCuratorStore:
    def __init__(
        self,
        redis: Redis,
        prefix: str,
        embed: Embed,
        *,
        policy: CuratorPolicy | None = None,
        distiller: Distiller | None = None,
        max_episodes: int = 10_000,
    ) -> None:
        self._redis = redis
        self._keys = Keyspace(prefix)
        self._embed = embed
        self._policy = policy or CuratorPolicy()
        self._distiller = distiller
        self._max_episodes = max_episodes
        self._index = self._keys.index_name
        self._graph = RedisGraph(redis, prefix)

    # ---- keys -------------------------------------------------------------------

    def memory_key(self, memory_id: str) -> str:
        return self._keys.memory(memory_id)

    def usage_key(self, memory_id: str) -> str:
        return self._keys.usage(memory_id)

    def state_key(self, agent_id: str) -> str:
        return self._keys.curator(agent_id)

    def entries_key(self, agent_id: str) -> str:
        return self._keys.curator_entries(agent_id)

    def playbook_key(self, agent_id: str) -> str:
        return self._keys.playbook(agent_id)

    # ---- reads ------------------------------------------------------------------

    def _search_args(
        self, where: FilterExpression, fields: Sequence[str], offset: int
    ) -> list[Any]:
        return [
            "FT.SEARCH", self._index, str(where), "RETURN", len(fields), *fields,
            "SORTBY", "ts", "ASC", "LIMIT", offset, PAGE, "DIALECT", 2,
        ]  # fmt: skip

    async def _search_all(
        self, where: FilterExpression, fields: Sequence[str], limit: int
    ) -> list[dict[str, Any]]:
        """Every match up to `limit`: the first page tells the total, the rest go
        in one pipeline."""
        first = await self._redis.execute_command(*self._search_args(where, fields, 0))
        total = int(first.get("total_results", 0)) if isinstance(first, dict) else int(first[0])
        replies = [first]
        offsets = range(PAGE, min(total, limit), PAGE)
        if offsets:
            async with self._redis.pipeline(transaction=False) as pipe:
                for offset in offsets:
                    pipe.execute_command(*self._search_args(where, fields, offset))
                replies += await pipe.execute()
        return [doc_fields(doc) for reply in replies for doc in docs(reply)][:limit]

    async def episodes_since(self, agent_id: str, watermark_ms: int) -> list[EpisodeView]:
        where = (
            tenant_filter(agent_id) & (Tag("kind") == "episode") & _not("deleted")
            & _not("quarantined") & _not("archived") & (Num("ts") > watermark_ms)
        )  # fmt: skip
        rows = await self._search_all(where, EPISODE_FIELDS, self._max_episodes)
        return [episode_view(row) for row in rows]

    async def entries(self, agent_id: str) -> list[CuratedEntry]:
        """The agent's live insights, heuristics and warnings (quarantined ones are
        reviewed separately)."""
        where = (
            tenant_filter(agent_id) & (Tag("kind") == ["insight", "heuristic", "warning"])
            & _not("deleted") & _not("quarantined") & _not("archived")
        )  # fmt: skip
        rows = await self._search_all(where, ENTRY_FIELDS, 100_000)
        ids = [text_of(row["memory_id"]) for row in rows]
        async with self._redis.pipeline(transaction=False) as pipe:
            for memory_id in ids:
                pipe.hget(self.usage_key(memory_id), "last_accessed")
            pipe.hmget(self.entries_key(agent_id), ids) if ids else pipe.ping()
            replies = await pipe.execute()
        books = replies[-1] if ids else []
        return [
            curated_entry(row, usage, book)
            for row, usage, book in zip(rows, replies[: len(ids)], books, strict=True)
        ]

    async def quarantined(self, agent_id: str) -> list[QuarantinedView]:
        where = (
            tenant_filter(agent_id) & (Tag("quarantined") == "1")
            & _not("deleted") & _not("archived")
        )  # fmt: skip
        rows = await self._search_all(where, QUARANTINE_FIELDS, 10_000)
        return [quarantined_view(row) for row in rows]

    async def state(self, agent_id: str) -> tuple[int, int, CuratorReport | None]:
        """(last completed cycle, episode watermark, that cycle's report)."""
        cycle, mark, report = await self._redis.hmget(
            self.state_key(agent_id), ["cycle", "watermark", "report"]
        )
        return (
            int(text_of(cycle)) if cycle is not None else -1,
            int(text_of(mark)) if mark is not None else -1,
            report_from_json(report) if report is not None else None,
        )

    async def get_playbook(self, agent_id: str) -> str | None:
        raw = await self._redis.get(self.playbook_key(agent_id))
        return None if raw is None else text_of(raw)

    # ---- the cycle --------------------------------------------------------------

    async def run_cycle(self, agent_id: str, now_ms: int, cycle: int) -> CuratorReport:
        last, watermark, last_report = await self.state(agent_id)
        if cycle <= last:
            logger.info("curator cycle %d for %s already ran (last %d)", cycle, agent_id, last)
            if cycle == last and last_report is not None:
                return last_report
            return CuratorReport(agent_id=agent_id, cycle=cycle, now_ms=now_ms)
        episodes = await self.episodes_since(agent_id, watermark)
        entries = await self.entries(agent_id)
        quarantined = await self.quarantined(agent_id)
        plan = plan_cycle(
            agent_id, cycle, now_ms, episodes, entries, quarantined,
            watermark_ms=max(watermark, 0), policy=self._policy, distiller=self._distiller,
        )  # fmt: skip
        await self._apply(agent_id, now_ms, plan, entries)
        return plan.report

    async def _apply(
        self, agent_id: str, now_ms: int, plan: CuratorPlan, before: Sequence[CuratedEntry]
    ) -> None:
        texts = [change.entry.text for change in plan.changes if change.text_changed]
        vectors = iter(await self._embed(texts) if texts else [])
        current = {entry.memory_id: entry for entry in before}
        entries_key = self.entries_key(agent_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            for change in plan.changes:
                entry = change.entry
                vector = next(vectors) if change.text_changed else None
                key = self.memory_key(entry.memory_id)
                if change.new:
                    assert vector is not None
                    fields = new_record_fields(agent_id, entry, vector)
                    pipe.hset(key, mapping=fields)
                    keys = text_of(fields["nexus_keys"]).split("|")
                    self._graph.link(
                        pipe, agent_id, entry.memory_id, entry.ts_ms, [k for k in keys if k]
                    )
                elif change.record_changed:
                    pipe.hset(key, mapping=changed_record_fields(entry, vector))
                old = current.get(entry.memory_id)
                if old is None or entry.last_accessed_ms > old.last_accessed_ms:
                    pipe.hset(
                        self.usage_key(entry.memory_id), "last_accessed", entry.last_accessed_ms
                    )
                if entry.status is EntryStatus.ARCHIVED:
                    pipe.hdel(entries_key, entry.memory_id)
                else:
                    pipe.hset(entries_key, entry.memory_id, bookkeeping_json(entry))
            for decision in plan.quarantine:
                key = self.memory_key(decision.memory_id)
                if decision.action is QuarantineAction.RELEASE:
                    pipe.hset(key, "quarantined", "0")
                else:
                    pipe.hset(key, "archived", "1")
            changed = [c.entry.memory_id for c in plan.changes if c.new or c.record_changed]
            changed += [decision.memory_id for decision in plan.quarantine]
            self._graph.sync_nodes(pipe, agent_id, changed)
            pipe.set(self.playbook_key(agent_id), self._playbook(agent_id, now_ms, plan, before))
            pipe.hset(
                self.state_key(agent_id),
                mapping={
                    "cycle": plan.report.cycle,
                    "watermark": plan.watermark_ms,
                    "report": report_json(plan.report),
                },
            )
            await pipe.execute()

    def _playbook(
        self, agent_id: str, now_ms: int, plan: CuratorPlan, before: Sequence[CuratedEntry]
    ) -> str:
        final = {entry.memory_id: entry for entry in before}
        final.update({change.entry.memory_id: change.entry for change in plan.changes})
        shown = [
            replace(entry, confidence=effective(entry, now_ms, self._policy))
            for entry in final.values()
        ]
        return render_playbook(agent_id, shown)
