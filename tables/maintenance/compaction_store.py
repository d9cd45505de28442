"""Redis side of compaction: keys, the persisted plan, candidate reads, and the
one atomic flip that swaps a cluster for its summary.

Keys (all under the deployment prefix):
  {p}:compact:plan:{agent}:{plan_id}    HASH  plan (JSON), phase, agent_id
  {p}:compact:pending:{agent}           STRING the plan id a crash left unfinished
  {p}:compact:cursor:{agent}            STRING event time the next candidate scan starts at
  {p}:compact:outbox:{agent}:{plan_id}  LIST  source ids whose vectors are still to drop
  {p}:tomb:{source_id}                  HASH  summary_id, plan_id, agent_id, ts
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, Final

import orjson
from redis.asyncio import Redis
from redisvl.query.filter import Num

from grimoire.streams.maintenance.compaction import (
    ClusterPlan,
    CompactionCandidate,
    CompactionPlan,
    CompactionPolicy,
)
from grimoire.streams.model.records import Kind, Layer, MemoryCandidate, MemoryRecord, Provenance
from grimoire.streams.model.text import normalized_hash
from grimoire.tables.codec.memory_hash import hash_fields, text_of
from grimoire.tables.codec.search_replies import doc_fields, docs
from grimoire.tables.exceptions import StorageError
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.queries import live_filter

logger = logging.getLogger(__name__)

CANDIDATE_FIELDS: Final = (
    "memory_id", "kind", "text", "ts", "nexus_keys", "tags", "quality", "pinned", "locked",
    "off_topic", "summary_level", "deleted", "archived", "quarantined",
)  # fmt: skip
USAGE_FIELDS: Final = ("included_count_decay", "last_accessed")

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


def encode_plan(plan: CompactionPlan) -> bytes:
    return orjson.dumps(asdict(plan))


def decode_plan(raw: bytes | str) -> CompactionPlan:
    data = orjson.loads(raw)
    clusters = tuple(
        ClusterPlan(
            **{
                **c,
                **{name: tuple(c[name]) for name in ("source_ids", "summary_of", "tags", "keys")},
            }
        )
        for c in data["clusters"]
    )
    return CompactionPlan(plan_id=data["plan_id"], now_ms=data["now_ms"], clusters=clusters)


def flip_script(redis: Redis) -> Any:
    return redis.register_script(_FLIP)


async def load_candidates(
    redis: Redis,
    index_name: str,
    keys: Keyspace,
    agent_id: str,
    now_ms: int,
    policy: CompactionPolicy,
    limit: int,
    since_ms: int | None = None,
) -> list[CompactionCandidate]:
    """The agent's oldest live memories old enough to compact, from `since_ms` on
    and inside one scan window of it, with usage merged in: one search plus one
    pipelined read of their usage hashes. The window keeps the search's cost
    proportional to what one window holds, not to the agent's whole store."""
    horizon = now_ms - policy.min_age_ms
    where = live_filter(agent_id) & (Num("ts") <= horizon)
    if since_ms is not None:
        where &= (Num("ts") >= since_ms) & (Num("ts") < since_ms + policy.window_ms)
    kinds = "@kind:{summary}" if policy.summary_level else "-@kind:{summary|aggregate}"
    # Pipelined so the reply comes back raw whatever callbacks the client has.
    async with redis.pipeline(transaction=False) as pipe:
        pipe.execute_command(
            "FT.SEARCH", index_name, f"({where}) {kinds}",
            "RETURN", len(CANDIDATE_FIELDS), *CANDIDATE_FIELDS,
            "SORTBY", "ts", "ASC", "LIMIT", 0, limit, "DIALECT", 2,
        )  # fmt: skip
        (reply,) = await pipe.execute()
    rows = [doc_fields(doc) for doc in docs(reply)]
    if not rows:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for row in rows:
            pipe.hmget(keys.usage(text_of(row["memory_id"])), list(USAGE_FIELDS))
        usages = await pipe.execute()
    return [_candidate(row, usage) for row, usage in zip(rows, usages, strict=True)]


async def next_candidate_ts(
    redis: Redis,
    index_name: str,
    agent_id: str,
    since_ms: int,
    horizon_ms: int,
) -> int | None:
    """The event time of the agent's first live memory in [since, horizon]: where
    the scan resumes after an empty window (a gap in the agent's history)."""
    where = live_filter(agent_id) & (Num("ts") >= since_ms) & (Num("ts") <= horizon_ms)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.execute_command(
            "FT.SEARCH", index_name, str(where), "RETURN", 1, "ts",
            "SORTBY", "ts", "ASC", "LIMIT", 0, 1, "DIALECT", 2,
        )  # fmt: skip
        (reply,) = await pipe.execute()
    rows = [doc_fields(doc) for doc in docs(reply)]
    return int(float(text_of(rows[0]["ts"]))) if rows else None


def _candidate(row: dict[str, Any], usage: Sequence[Any]) -> CompactionCandidate:
    def text(name: str) -> str:
        value = row.get(name)
        return "" if value is None else text_of(value)

    def split(name: str) -> tuple[str, ...]:
        return tuple(part for part in text(name).split("|") if part)

    decay, last = usage
    return CompactionCandidate(
        memory_id=text("memory_id"),
        kind=text("kind"),
        text=text("text"),
        ts_ms=int(float(text("ts") or 0)),
        keys=split("nexus_keys"),
        tags=split("tags"),
        quality=float(text("quality") or 0.5),
        included_count_decay=float(text_of(decay)) if decay is not None else 0.0,
        last_accessed_ms=int(float(text_of(last))) if last is not None else None,
        summary_level=int(text("summary_level") or 0),
        pinned=text("pinned") == "1",
        locked=text("locked") == "1",
        deleted=text("deleted") == "1",
        archived=text("archived") == "1",
        quarantined=text("quarantined") == "1",
        off_topic=text("off_topic") == "1",
    )


def summary_fields(
    agent_id: str, plan: CompactionPlan, cluster: ClusterPlan, vector: bytes, dims: int
) -> dict[Any, Any]:
    """The summary as a memory hash in the record codec's format, born HIDDEN."""
    if len(vector) != dims * 4:
        raise StorageError(f"embedder gave {len(vector) // 4} dims, expected {dims}")
    candidate = MemoryCandidate(
        id=cluster.summary_id,
        agent_id=agent_id,
        kind=Kind.SUMMARY,
        layer=Layer.CONTEMPLATION,
        text=cluster.text,
        ts_ms=cluster.ts_ms,
        provenance=Provenance(
            source_event_id=f"compaction:{cluster.summary_id}",
            event_type="compaction",
            provenance="compaction",
        ),
        normalized_hash=normalized_hash(cluster.text),
        tags=cluster.tags,
        keys=cluster.keys,
    )
    record = MemoryRecord(candidate=candidate, canonical=vector, eidolon=vector)
    fields = hash_fields(record, plan.now_ms)
    fields.update(
        {
            "deleted": "1",
            "compaction_pending": plan.plan_id,
            "compaction_plan": plan.plan_id,
            "source_ids": "|".join(cluster.source_ids),
            "summary_of": "|".join(cluster.summary_of),
            "summary_level": cluster.summary_level,
            "cluster_id": f"{cluster.centre_key}@{cluster.bucket_start_ms}",
        }
    )
    return fields


def total_results(reply: Any) -> int:
    """total_results of a raw FT.SEARCH reply, RESP2 or RESP3 (str or bytes keys)."""
    if isinstance(reply, dict):
        found = reply.get("total_results", reply.get(b"total_results"))
        return 0 if found is None else int(found)
    return int(reply[0])
