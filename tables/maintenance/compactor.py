"""Crash-safe compaction (SPEC §6): a persisted plan driven through idempotent,
resumable phases.

  planned            the plan and a pending pointer are stored; nothing else changed
  summaries_written  each summary hash exists HIDDEN (deleted=1 + compaction_pending)
                     and is linked in the nexus ZSETs (a hidden node is never walked)
  indexed            RediSearch returns every summary (so the flip shows a findable one)
  flipped            ONE transaction: summaries visible, sources deleted=1 +
                     replaced_by_summary_id, tombstones, outbox filled
  (outbox batches)   source vectors dropped a batch at a time: the physical deletion,
                     the only step a crash can interrupt midway
  done               pending pointer cleared

The logical deletion is atomic, so at every crash point recall reaches either the
whole cluster (before the flip) or the summary (after it), never both or neither.
Sources stay in the nexus ZSETs: a walk through any of their keys lands on the
source, which recall replaces by its summary. Each phase is recorded in the plan
hash in the same transaction as its writes, so `resume` redoes at most one phase,
and every write is guarded so redoing it changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final

import numpy as np
import numpy.typing as npt
from redis.asyncio import Redis

from grimoire.streams.maintenance.compaction import (
    DEFAULT_COMPACTION_BUDGET,
    DEFAULT_COMPACTION_POLICY,
    CompactionBudget,
    CompactionCandidate,
    CompactionPlan,
    CompactionPolicy,
    paused,
    plan_compaction,
)
from grimoire.tables.codec.memory_hash import text_of
from grimoire.tables.exceptions import StorageError
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.compaction_store import (
    decode_plan,
    encode_plan,
    flip_script,
    load_candidates,
    next_candidate_ts,
    summary_fields,
    total_results,
)
from grimoire.tables.memory.graph import RedisGraph
from grimoire.tables.queries import escape_tag
from grimoire.tables.schema.memory_index import memory_schema

logger = logging.getLogger(__name__)

Embed = Callable[[Sequence[str]], Awaitable[npt.NDArray[np.float32]]]
Checkpoint = Callable[[str], Awaitable[None]]
PLAN_TTL_S: Final = 7 * 86_400  # finished plans stay a week for audit


class Phase(StrEnum):
    PLANNED = "planned"
    SUMMARIES_WRITTEN = "summaries_written"
    INDEXED = "indexed"
    FLIPPED = "flipped"
    OUTBOX_BATCH = "outbox_batch"  # a checkpoint only: one batch of vectors dropped
    DONE = "done"


class CompactionStalled(StorageError):
    """A summary did not show up in the index in time; `resume` picks up from there."""


@dataclass(frozen=True, slots=True)
class CompactionReport:
    agent_id: str
    plan_id: str
    status: str  # "done", "empty" (nothing to compact) or "paused" (pressure signal)
    summary_ids: tuple[str, ...] = ()
    sources: int = 0
    vectors_dropped: int = 0
    resumed: bool = False
    finished_pending: str = ""  # a crashed plan that this call finished first


class Compactor:
    def __init__(
        self,
        redis: Redis,
        prefix: str,
        embed: Embed,
        policy: CompactionPolicy = DEFAULT_COMPACTION_POLICY,
        checkpoint: Checkpoint | None = None,
        *,
        dims: int = 384,
        outbox_batch: int = 64,
        max_candidates: int = 1_000,
        index_timeout_s: float = 10.0,
    ) -> None:
        self._redis = redis
        self._embed = embed
        self.policy = policy
        self._checkpoint = checkpoint
        self._dims = dims
        self._outbox_batch = max(outbox_batch, 1)
        self._max_candidates = max_candidates
        self._index_timeout_s = index_timeout_s
        self.keys = Keyspace(prefix)
        self._graph = RedisGraph(redis, prefix)
        self._index_name = memory_schema(prefix, dims).index.name
        self._flip = flip_script(redis)

    async def compact(
        self,
        agent_id: str,
        now_ms: int,
        budget: CompactionBudget = DEFAULT_COMPACTION_BUDGET,
        *,
        signals: Sequence[str] = (),
    ) -> CompactionReport:
        """Finish any crashed plan, then plan and run a new one (`now_ms` is event time)."""
        if paused(signals, self.policy):
            logger.info("compaction paused for %s by %s", agent_id, sorted(signals))
            return CompactionReport(agent_id, "", "paused")
        previous = await self.resume(agent_id)
        candidates = await self._scan(agent_id, now_ms)
        keys = sorted({key for c in candidates for key in c.keys})
        degrees = await self._graph.degrees(agent_id, keys) if keys else {}
        plan = plan_compaction(candidates, degrees, now_ms, self.policy, budget)
        finished = previous.plan_id if previous else ""
        if plan.empty:
            return CompactionReport(agent_id, "", "empty", finished_pending=finished)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(
                self.keys.compaction_plan(agent_id, plan.plan_id),
                mapping={"plan": encode_plan(plan), "phase": Phase.PLANNED, "agent_id": agent_id},
            )
            pipe.set(self.keys.compaction_pending(agent_id), plan.plan_id)
            await pipe.execute()
        logger.info(
            "compaction plan %s for %s: %d clusters", plan.plan_id, agent_id, len(plan.clusters)
        )
        await self._mark(Phase.PLANNED)
        report = await self._run(agent_id, plan, Phase.PLANNED, resumed=False)
        return replace(report, finished_pending=finished)

    async def _scan(self, agent_id: str, now_ms: int) -> list[CompactionCandidate]:
        """The next window of the agent's history, from a persisted cursor: each
        pass reads one window (or one page of it), so its cost follows what a
        window holds rather than the store's size; at the end the cursor wraps
        so memories that became compactable later are seen again."""
        horizon = now_ms - self.policy.min_age_ms
        raw = await self._redis.get(self.keys.compaction_cursor(agent_id))
        start = int(raw) if raw is not None else None
        if start is None or start > horizon:
            # First pass, or past the end: (re)start at the oldest memory. This
            # search sorts the whole range, so it runs once per sweep, not per pass.
            start = await self._first_after(agent_id, 0, horizon)
            if start is None:
                return []
        candidates = await self._window(agent_id, now_ms, start)
        if not candidates:  # a gap in the agent's history: jump to what follows
            following = await self._first_after(agent_id, start + self.policy.window_ms, horizon)
            if following is not None:
                start = following
                candidates = await self._window(agent_id, now_ms, start)
        if len(candidates) >= self._max_candidates:
            last = max(c.ts_ms for c in candidates)
            cursor = last if last > start else last + 1  # a full page of one instant
        else:
            cursor = start + self.policy.window_ms
        await self._redis.set(self.keys.compaction_cursor(agent_id), cursor)
        return candidates

    async def _first_after(self, agent_id: str, since_ms: int, horizon_ms: int) -> int | None:
        return await next_candidate_ts(
            self._redis, self._index_name, agent_id, since_ms, horizon_ms
        )

    async def _window(self, agent_id: str, now_ms: int, start: int) -> list[CompactionCandidate]:
        return await load_candidates(
            self._redis,
            self._index_name,
            self.keys,
            agent_id,
            now_ms,
            self.policy,
            self._max_candidates,
            since_ms=start,
        )

    async def resume(self, agent_id: str) -> CompactionReport | None:
        """Drive the agent's unfinished plan to the end; None when there is none."""
        pending = await self._redis.get(self.keys.compaction_pending(agent_id))
        if pending is None:
            return None
        plan_id = text_of(pending)
        raw, phase = await self._redis.hmget(
            self.keys.compaction_plan(agent_id, plan_id), ["plan", "phase"]
        )
        if raw is None or phase is None:
            logger.warning("pending compaction %s of %s has no plan; dropped", plan_id, agent_id)
            await self._redis.delete(self.keys.compaction_pending(agent_id))
            return None
        logger.info("resuming compaction %s of %s at %s", plan_id, agent_id, text_of(phase))
        return await self._run(agent_id, decode_plan(raw), Phase(text_of(phase)), resumed=True)

    # ---- phases ---------------------------------------------------------------------

    async def _run(
        self, agent_id: str, plan: CompactionPlan, phase: Phase, *, resumed: bool
    ) -> CompactionReport:
        if phase is Phase.PLANNED:
            await self._write_summaries(agent_id, plan)
            phase = Phase.SUMMARIES_WRITTEN
            await self._mark(phase)
        if phase is Phase.SUMMARIES_WRITTEN:
            await self._wait_indexed(plan)
            await self._redis.hset(
                self.keys.compaction_plan(agent_id, plan.plan_id), "phase", Phase.INDEXED
            )
            phase = Phase.INDEXED
            await self._mark(phase)
        if phase is Phase.INDEXED:
            await self._flip_all(agent_id, plan)
            phase = Phase.FLIPPED
            await self._mark(phase)
        dropped = 0
        if phase is Phase.FLIPPED:
            dropped = await self._drain(agent_id, plan.plan_id)
            await self._finish(agent_id, plan.plan_id)
            await self._mark(Phase.DONE)
        return CompactionReport(
            agent_id=agent_id,
            plan_id=plan.plan_id,
            status="done",
            summary_ids=tuple(c.summary_id for c in plan.clusters),
            sources=sum(len(c.source_ids) for c in plan.clusters),
            vectors_dropped=dropped,
            resumed=resumed,
        )

    async def _write_summaries(self, agent_id: str, plan: CompactionPlan) -> None:
        """Hidden summary hashes plus their nexus links, and the phase, in one
        transaction. A summary that already exists is never rewritten: it may be
        visible already, and a rewrite would re-index its vectors."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for cluster in plan.clusters:
                pipe.exists(self.keys.memory(cluster.summary_id))
            present = await pipe.execute()
        missing = [c for c, found in zip(plan.clusters, present, strict=True) if not found]
        vectors = await self._embed([c.text for c in missing]) if missing else None
        async with self._redis.pipeline(transaction=True) as pipe:
            for row, cluster in enumerate(missing):
                assert vectors is not None
                blob = np.asarray(vectors[row], dtype=np.float32).tobytes()
                fields = summary_fields(agent_id, plan, cluster, blob, self._dims)
                pipe.hset(self.keys.memory(cluster.summary_id), mapping=fields)
                self._graph.link(pipe, agent_id, cluster.summary_id, cluster.ts_ms, cluster.keys)
            self._graph.sync_nodes(pipe, agent_id, [c.summary_id for c in missing])
            pipe.hset(
                self.keys.compaction_plan(agent_id, plan.plan_id), "phase", Phase.SUMMARIES_WRITTEN
            )
            await pipe.execute()

    async def _wait_indexed(self, plan: CompactionPlan) -> None:
        ids = [c.summary_id for c in plan.clusters]
        query = "@memory_id:{" + "|".join(escape_tag(i) for i in ids) + "}"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._index_timeout_s
        while True:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.execute_command(
                    "FT.SEARCH", self._index_name, query, "NOCONTENT", "LIMIT", 0, 0, "DIALECT", 2
                )
                (reply,) = await pipe.execute()
            total = total_results(reply)
            if total >= len(ids):
                return
            if loop.time() > deadline:
                raise CompactionStalled(f"plan {plan.plan_id}: {total}/{len(ids)} indexed")
            await asyncio.sleep(0.02)

    async def _flip_all(self, agent_id: str, plan: CompactionPlan) -> None:
        outbox = self.keys.compaction_outbox(agent_id, plan.plan_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.scripts.add(self._flip)
            for cluster in plan.clusters:
                keys = [self.keys.memory(cluster.summary_id), outbox]
                for source_id in cluster.source_ids:
                    keys += [self.keys.memory(source_id), self.keys.tombstone(source_id)]
                args: list[str | int] = [agent_id, cluster.summary_id, plan.plan_id, plan.now_ms]
                pipe.evalsha(self._flip.sha, len(keys), *keys, *args)
            flipped_ids = [i for c in plan.clusters for i in (c.summary_id, *c.source_ids)]
            self._graph.sync_nodes(pipe, agent_id, flipped_ids)
            pipe.hset(self.keys.compaction_plan(agent_id, plan.plan_id), "phase", Phase.FLIPPED)
            flipped = await pipe.execute()
        for cluster, count in zip(plan.clusters, flipped, strict=False):
            if int(count) < 0:
                logger.warning("summary %s missing at flip: sources kept", cluster.summary_id)

    async def _drain(self, agent_id: str, plan_id: str) -> int:
        """Drop the replaced sources' vectors (the HNSW graph is the costly part of a
        record), one batch per transaction; a redone batch changes nothing."""
        outbox = self.keys.compaction_outbox(agent_id, plan_id)
        dropped = 0
        while True:
            batch = [
                text_of(m) for m in await self._redis.lrange(outbox, 0, self._outbox_batch - 1)
            ]
            if not batch:
                return dropped
            async with self._redis.pipeline(transaction=True) as pipe:
                for memory_id in batch:
                    pipe.hdel(self.keys.memory(memory_id), "canonical", "eidolon")
                pipe.ltrim(outbox, len(batch), -1)
                await pipe.execute()
            dropped += len(batch)
            await self._mark(Phase.OUTBOX_BATCH)

    async def _finish(self, agent_id: str, plan_id: str) -> None:
        plan_key = self.keys.compaction_plan(agent_id, plan_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(plan_key, "phase", Phase.DONE)
            pipe.expire(plan_key, PLAN_TTL_S)
            pipe.delete(
                self.keys.compaction_pending(agent_id),
                self.keys.compaction_outbox(agent_id, plan_id),
            )
            await pipe.execute()

    async def _mark(self, phase: Phase) -> None:
        if self._checkpoint is not None:
            await self._checkpoint(phase.value)
