"""Compaction storage: the `CompactionStore` protocol (the storage steps the
compaction phase machine in `grimoire.agents.maintenance.compaction_task` drives)
and its Redis implementation: keys, the persisted plan, candidate reads, and the
one atomic flip that swaps a cluster for its summary.

Every method is one storage step, atomic on its own, so a crash between two of
them leaves the plan at a phase the phase machine can resume from. Planning,
embedding, the scan cursor's moves and the indexing wait are not here.

Keys (all under the deployment prefix):
  {p}:compact:plan:{agent}:{plan_id}    HASH  plan (JSON), phase, agent_id
  {p}:compact:pending:{agent}           STRING the plan id a crash left unfinished
  {p}:compact:cursor:{agent}            STRING event time the next candidate scan starts at
  {p}:compact:outbox:{agent}:{plan_id}  LIST  source ids whose vectors are still to drop
  {p}:tomb:{source_id}                  HASH  summary_id, plan_id, agent_id, ts
and, with each summary, its edge from each source in the derivation index
(`grimoire.tables.trust.derivations`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from redis.asyncio import Redis
from redisvl.query.filter import Num

from grimoire.streams.maintenance.compaction import (
    CompactionCandidate,
    CompactionPlan,
    CompactionPolicy,
)
from grimoire.tables.codec.compaction_plan import decode_plan, encode_plan
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.memory_hash import CANDIDATE_FIELDS, candidate_of, summary_fields
from grimoire.tables.codec.search_replies import doc_fields, docs, total_results
from grimoire.tables.exceptions import StorageError
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.memory.graph import RedisGraph
from grimoire.tables.ordered_search import MAX_SAME_TIME, index_search, ordered_keys
from grimoire.tables.queries import escape_tag, live_filter, tenant_filter
from grimoire.tables.redis_client import queue_script
from grimoire.tables.routing import SearchRouting, SearchTarget
from grimoire.tables.transaction import agent_transaction
from grimoire.tables.trust.derivations import queue_edges, summary_edges

__all__ = [
    "PLAN_TTL_S",
    "USAGE_FIELDS",
    "VECTOR_FIELDS",
    "CompactionStalled",
    "Phase",
    "RedisCompactionStore",
    "StoredPlan",
    "flip_script",
    "load_candidates",
    "next_candidate_ts",
]

logger = logging.getLogger(__name__)

USAGE_FIELDS: Final = ("included_count_decay", "last_accessed")
PLAN_TTL_S: Final = 7 * 86_400  # finished plans stay a week for audit
VECTOR_FIELDS: Final = ("canonical", "eidolon")


class Phase(StrEnum):
    """A plan's persisted phase: the last step whose writes are all stored."""

    PLANNED = "planned"
    SUMMARIES_WRITTEN = "summaries_written"
    INDEXED = "indexed"
    FLIPPED = "flipped"
    OUTBOX_BATCH = "outbox_batch"  # a checkpoint only (never stored): one batch dropped
    DONE = "done"


class CompactionStalled(StorageError):
    """A summary did not show up in the index in time; `resume` picks up from there."""


@dataclass(frozen=True, slots=True)
class StoredPlan:
    plan: CompactionPlan
    phase: Phase


# Swap one cluster for its summary in one step, so recall sees either the sources
# or the summary, never both and never neither. KEYS: summary hash, outbox list,
# then (source hash, tombstone) pairs. ARGV: agent, summary id, plan id, ts.
# A source deleted, archived or quarantined since planning stays as it is (it was
# unreachable before, and must not become reachable through the summary).
# Re-running changes nothing and queues nothing twice, and the summary is only
# written while still hidden: every HSET on an indexed hash re-indexes its vectors.
_FLIP = """
if redis.call('HGET', KEYS[1], 'agent_id') ~= ARGV[1] then return -1 end
local flipped = 0
for i = 3, #KEYS, 2 do
  local source, tomb = KEYS[i], KEYS[i + 1]
  if redis.call('HGET', source, 'agent_id') == ARGV[1] then
    local by = redis.call('HGET', source, 'replaced_by_summary_id')
    local gone = redis.call('HGET', source, 'deleted') == '1'
      or redis.call('HGET', source, 'archived') == '1'
      or redis.call('HGET', source, 'quarantined') == '1'
    if by ~= ARGV[2] and not gone then
      redis.call('HSET', source, 'deleted', '1', 'replaced_by_summary_id', ARGV[2])
      redis.call('HSET', tomb, 'summary_id', ARGV[2], 'plan_id', ARGV[3],
                 'agent_id', ARGV[1], 'ts', ARGV[4])
      redis.call('RPUSH', KEYS[2], redis.call('HGET', source, 'memory_id'))
      flipped = flipped + 1
    end
  end
end
if redis.call('HGET', KEYS[1], 'deleted') ~= '0' then
  redis.call('HSET', KEYS[1], 'deleted', '0')
  redis.call('HDEL', KEYS[1], 'compaction_pending')
end
return flipped
"""


def flip_script(redis: Redis) -> Any:
    return redis.register_script(_FLIP)


async def load_candidates(
    redis: Redis,
    target: SearchTarget,
    keys: Keyspace,
    agent_id: str,
    now_ms: int,
    policy: CompactionPolicy,
    limit: int,
    since_ms: int | None = None,
) -> list[CompactionCandidate]:
    """The agent's oldest live memories old enough to compact, from `since_ms` on
    and inside one scan window of it, by (ts, id), with usage merged in: one or two
    searches plus one pipelined read of their hashes. The window keeps the search's
    cost proportional to what one window holds, not to the agent's whole store."""
    horizon = now_ms - policy.min_age_ms
    where = live_filter(agent_id) & (Num("ts") <= horizon)
    if since_ms is not None:
        where &= (Num("ts") >= since_ms) & (Num("ts") < since_ms + policy.window_ms)
    kinds = "@kind:{summary}" if policy.summary_level else "-@kind:{summary|aggregate}"
    # The cap keeps the first `limit` by (ts, id), reading every memory at the
    # cut's time (`ordered_search`): `SORTBY ts LIMIT 0 n` alone cut ties in the
    # index's order, so a replay could plan other clusters. Keys only, then the
    # fields from the hashes with their usage in one round trip (a cluster master
    # loads no field of another slot's document).
    search = index_search(redis, target)
    found_keys = await ordered_keys(
        search, f"({where}) {kinds}", limit, page=min(limit, MAX_SAME_TIME)
    )
    ids = [keys.memory_id_of(key) for key in found_keys]
    if not ids:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for memory_id in ids:
            pipe.hmget(keys.memory(agent_id, memory_id), list(CANDIDATE_FIELDS))
            pipe.hmget(keys.usage(agent_id, memory_id), list(USAGE_FIELDS))
        replies = await pipe.execute()
    found = []
    for index in range(len(ids)):
        row = dict(zip(CANDIDATE_FIELDS, replies[2 * index], strict=True))
        if row.get("memory_id") is None:
            continue  # gone since the index listed it
        found.append(candidate_of(row, replies[2 * index + 1]))
    return found


async def next_candidate_ts(
    redis: Redis,
    target: SearchTarget,
    agent_id: str,
    since_ms: int,
    horizon_ms: int,
) -> int | None:
    """The event time of the agent's first live memory in [since, horizon]: where
    the scan resumes after an empty window (a gap in the agent's history)."""
    where = live_filter(agent_id) & (Num("ts") >= since_ms) & (Num("ts") <= horizon_ms)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.execute_command(
            "FT.SEARCH", target.index, str(where), "RETURN", 1, "ts",
            "SORTBY", "ts", "ASC", "LIMIT", 0, 1, "DIALECT", 2, **target.options,
        )  # fmt: skip
        (reply,) = await pipe.execute()
    rows = [doc_fields(doc) for doc in docs(reply)]
    return int(float(text_of(rows[0]["ts"]))) if rows else None


class RedisCompactionStore:
    """`CompactionStore` over the memory hashes, their RediSearch index and the
    compaction keys above. Each step is one MULTI/EXEC transaction (or one read),
    and writes the plan's phase in the same transaction as the writes it names."""

    def __init__(self, redis: Redis, prefix: str, *, dims: int = 384) -> None:
        self._redis = redis
        self._dims = dims
        self.keys = Keyspace(prefix)
        self._graph = RedisGraph(redis, prefix)
        self._routing = SearchRouting(redis, prefix)
        self._flip = flip_script(redis)

    # ---- candidate scan ---------------------------------------------------------

    async def cursor(self, agent_id: str) -> int | None:
        raw = await self._redis.get(self.keys.compaction_cursor(agent_id))
        return int(raw) if raw is not None else None

    async def set_cursor(self, agent_id: str, ts_ms: int) -> None:
        await self._redis.set(self.keys.compaction_cursor(agent_id), ts_ms)

    async def first_live_ts(self, agent_id: str, since_ms: int, horizon_ms: int) -> int | None:
        return await next_candidate_ts(
            self._redis, await self._routing.target(agent_id), agent_id, since_ms, horizon_ms
        )

    async def candidates(
        self, agent_id: str, now_ms: int, policy: CompactionPolicy, limit: int, since_ms: int
    ) -> list[CompactionCandidate]:
        return await load_candidates(
            self._redis,
            await self._routing.target(agent_id),
            self.keys,
            agent_id,
            now_ms,
            policy,
            limit,
            since_ms=since_ms,
        )

    async def degrees(self, agent_id: str, keys: Sequence[str]) -> dict[str, int]:
        return await self._graph.degrees(agent_id, keys) if keys else {}

    # ---- the persisted plan -----------------------------------------------------

    async def save_plan(self, agent_id: str, plan: CompactionPlan) -> None:
        async with agent_transaction(self._redis, agent_id) as pipe:
            pipe.hset(
                self.keys.compaction_plan(agent_id, plan.plan_id),
                mapping={"plan": encode_plan(plan), "phase": Phase.PLANNED, "agent_id": agent_id},
            )
            pipe.set(self.keys.compaction_pending(agent_id), plan.plan_id)
            await pipe.execute()

    async def pending(self, agent_id: str) -> str | None:
        raw = await self._redis.get(self.keys.compaction_pending(agent_id))
        return text_of(raw) if raw is not None else None

    async def load_plan(self, agent_id: str, plan_id: str) -> StoredPlan | None:
        raw, phase = await self._redis.hmget(
            self.keys.compaction_plan(agent_id, plan_id), ["plan", "phase"]
        )
        if raw is None or phase is None:
            return None
        return StoredPlan(decode_plan(raw), Phase(text_of(phase)))

    async def drop_pending(self, agent_id: str) -> None:
        await self._redis.delete(self.keys.compaction_pending(agent_id))

    # ---- the phases -------------------------------------------------------------

    async def existing(self, agent_id: str, memory_ids: Sequence[str]) -> set[str]:
        async with self._redis.pipeline(transaction=False) as pipe:
            for memory_id in memory_ids:
                pipe.exists(self.keys.memory(agent_id, memory_id))
            present = await pipe.execute()
        return {i for i, found in zip(memory_ids, present, strict=True) if found}

    async def write_summaries(
        self, agent_id: str, plan: CompactionPlan, vectors: Mapping[str, bytes]
    ) -> None:
        """A summary is only ever written here, while hidden: every HSET on an
        indexed hash re-indexes its vectors, so the caller passes only missing ones."""
        written = [c for c in plan.clusters if c.summary_id in vectors]
        async with agent_transaction(self._redis, agent_id) as pipe:
            for cluster in written:
                vector = vectors[cluster.summary_id]
                fields = summary_fields(agent_id, plan, cluster, vector, self._dims)
                pipe.hset(self.keys.memory(agent_id, cluster.summary_id), mapping=fields)
                self._graph.link(pipe, agent_id, cluster.summary_id, cluster.ts_ms, cluster.keys)
            queue_edges(pipe, self.keys, agent_id, summary_edges(written))
            self._graph.sync_nodes(pipe, agent_id, [c.summary_id for c in written])
            pipe.hset(
                self.keys.compaction_plan(agent_id, plan.plan_id), "phase", Phase.SUMMARIES_WRITTEN
            )
            await pipe.execute()

    async def indexed(self, agent_id: str, summary_ids: Sequence[str]) -> int:
        if not summary_ids:
            return 0
        query = "@memory_id:{" + "|".join(escape_tag(i) for i in summary_ids) + "}"
        target = await self._routing.target(agent_id)
        # Pipelined so the reply comes back raw whatever callbacks the client has.
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.execute_command(
                "FT.SEARCH", target.index, f"{tenant_filter(agent_id)} {query}",
                "NOCONTENT", "LIMIT", 0, 0, "DIALECT", 2, **target.options,
            )  # fmt: skip
            (reply,) = await pipe.execute()
        return total_results(reply)

    async def mark_indexed(self, agent_id: str, plan_id: str) -> None:
        await self._redis.hset(self.keys.compaction_plan(agent_id, plan_id), "phase", Phase.INDEXED)

    async def flip(self, agent_id: str, plan: CompactionPlan) -> list[int]:
        outbox = self.keys.compaction_outbox(agent_id, plan.plan_id)
        async with agent_transaction(self._redis, agent_id) as pipe:
            for cluster in plan.clusters:
                keys = [self.keys.memory(agent_id, cluster.summary_id), outbox]
                for source_id in cluster.source_ids:
                    keys += [
                        self.keys.memory(agent_id, source_id),
                        self.keys.tombstone(agent_id, source_id),
                    ]
                args: list[str | int] = [agent_id, cluster.summary_id, plan.plan_id, plan.now_ms]
                queue_script(pipe, self._flip, keys, args)
            flipped_ids = [i for c in plan.clusters for i in (c.summary_id, *c.source_ids)]
            self._graph.sync_nodes(pipe, agent_id, flipped_ids)
            pipe.hset(self.keys.compaction_plan(agent_id, plan.plan_id), "phase", Phase.FLIPPED)
            replies = await pipe.execute()
        return [int(count) for count in replies[: len(plan.clusters)]]

    async def outbox(self, agent_id: str, plan_id: str, limit: int) -> list[str]:
        outbox = self.keys.compaction_outbox(agent_id, plan_id)
        return [text_of(m) for m in await self._redis.lrange(outbox, 0, limit - 1)]

    async def drop_vectors(self, agent_id: str, plan_id: str, memory_ids: Sequence[str]) -> None:
        """The HNSW graph is the costly part of a record: dropping the vectors is
        the physical deletion. A redone batch changes nothing."""
        async with agent_transaction(self._redis, agent_id) as pipe:
            for memory_id in memory_ids:
                pipe.hdel(self.keys.memory(agent_id, memory_id), *VECTOR_FIELDS)
            pipe.ltrim(self.keys.compaction_outbox(agent_id, plan_id), len(memory_ids), -1)
            await pipe.execute()

    async def finish(self, agent_id: str, plan_id: str) -> None:
        plan_key = self.keys.compaction_plan(agent_id, plan_id)
        async with agent_transaction(self._redis, agent_id) as pipe:
            pipe.hset(plan_key, "phase", Phase.DONE)
            pipe.expire(plan_key, PLAN_TTL_S)
            pipe.delete(
                self.keys.compaction_pending(agent_id),
                self.keys.compaction_outbox(agent_id, plan_id),
            )
            await pipe.execute()
