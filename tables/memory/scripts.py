"""Server-side steps that must read and write one key atomically inside a pipeline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from redis.asyncio import Redis

from grimoire.tables.memory.rebuild import LENGTH_FIELD, MEMORIES_FIELD, CountedText
from grimoire.tables.redis_client import queue_script

# Create the aggregate from its seed on first sight (count 1 stands for the group's
# original), then count the fold and keep the latest event time.
_FOLD_AGGREGATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 2))
  redis.call('HSET', KEYS[1], 'count', 1, 'last_seen', ARGV[1])
end
redis.call('HINCRBY', KEYS[1], 'count', 1)
if tonumber(redis.call('HGET', KEYS[1], 'last_seen') or '0') < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'last_seen', ARGV[1])
end
return 1
"""

# Reinforce an existing memory; a memory deleted meanwhile is left alone.
_REINFORCE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'reinforced_count', 1)
if tonumber(redis.call('HGET', KEYS[1], 'last_seen') or '0') < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'last_seen', ARGV[1])
end
return 1
"""

# Usage accounting for the memories included in a recall reply, on each
# memory's usage hash (KEYS). `last_accessed` only moves forward in event time,
# so replaying requests out of order lands the same.
_TOUCH = """
for _, key in ipairs(KEYS) do
  redis.call('HINCRBY', key, 'included_count_total', 1)
  redis.call('HINCRBYFLOAT', key, 'included_count_decay', 1)
  if tonumber(redis.call('HGET', key, 'last_accessed') or '0') < tonumber(ARGV[1]) then
    redis.call('HSET', key, 'last_accessed', ARGV[1])
  end
end
return #KEYS
"""

# Many hashes' fields in one command: a walk reads hundreds of small nodes, and
# one HMGET each costs more to pack and parse client-side than Redis spends.
_HMGET_MANY = """
local out = {}
for i, key in ipairs(KEYS) do
  out[i] = redis.call('HMGET', key, unpack(ARGV))
end
return out
"""

# Records with their usage in one command: KEYS are the memory hashes, then
# their usage hashes in the same order; ARGV the record fields. Returns {one
# HMGET row per memory, each usage hash's last_accessed}.
_RECORDS = """
local n = #KEYS / 2
local rows, accessed = {}, {}
for i = 1, n do
  rows[i] = redis.call('HMGET', KEYS[i], unpack(ARGV))
  accessed[i] = redis.call('HGET', KEYS[n + i], 'last_accessed') or false
end
return {rows, accessed}
"""

# Neighbours in time of many anchors: KEYS are nexus ZSETs, ARGV each anchor's
# event time. Returns per anchor {up to two members at or after it, up to two
# at or before it, nearest first}.
_AROUND = """
local out = {}
for i, key in ipairs(KEYS) do
  out[i] = {
    redis.call('ZRANGEBYSCORE', key, ARGV[i], '+inf', 'LIMIT', 0, 2),
    redis.call('ZREVRANGEBYSCORE', key, ARGV[i], '-inf', 'LIMIT', 0, 2),
  }
end
return out
"""

# Cardinalities of many ZSETs in one command (a walk ranks a node's keys by
# degree): one ZCARD each in a pipeline costs more client CPU than Redis time.
_CARDINALITIES = """
local out = {}
for i, key in ipairs(KEYS) do out[i] = redis.call('ZCARD', key) end
return out
"""

# Document counts of a memory's search terms, counted only when the memory is
# new, so a redelivered batch counts nothing twice. Queued before the memory's
# HSET. KEYS: memory hash, the agent's term counts; ARGV: the memory's indexed
# length, then its distinct terms. MEMORIES_FIELD counts the memories themselves,
# LENGTH_FIELD sums their lengths (the lexical lane's average length).
_COUNT_NEW_TERMS = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HINCRBY', KEYS[2], 'MEMORIES_FIELD', 1)
redis.call('HINCRBY', KEYS[2], 'LENGTH_FIELD', ARGV[1])
for i = 2, #ARGV do redis.call('HINCRBY', KEYS[2], ARGV[i], 1) end
return #ARGV - 1
""".replace("MEMORIES_FIELD", MEMORIES_FIELD).replace("LENGTH_FIELD", LENGTH_FIELD)

# A walk round in one round trip: the newest members of each nexus key, and the
# packed walk node (graph.py's node table) of every member, which the walk scores
# next anyway; with ARGV[2] = '1', each key's degree (ZCARD) too. KEYS: node
# table, then nexus ZSETs; ARGV: members per key, degrees wanted.
# Returns {per-key lists of positions in the distinct members, the distinct
# members, their packed nodes or nil, the degrees or nothing}: busy keys share
# members, and each id travels and is decoded once.
_NEWEST_WITH_NODES = """
local lists, ids, packed, seen, degrees = {}, {}, {}, {}, {}
for i = 2, #KEYS do
  if ARGV[2] == '1' then degrees[i - 1] = redis.call('ZCARD', KEYS[i]) end
  local members = redis.call('ZREVRANGE', KEYS[i], 0, tonumber(ARGV[1]) - 1)
  local positions = {}
  for j, member in ipairs(members) do
    local at = seen[member]
    if not at then
      ids[#ids + 1] = member
      at = #ids
      seen[member] = at
    end
    positions[j] = at - 1
  end
  lists[i - 1] = positions
end
for first = 1, #ids, 500 do
  local chunk = redis.call('HMGET', KEYS[1], unpack(ids, first, math.min(first + 499, #ids)))
  for j = 1, #chunk do packed[first + j - 1] = chunk[j] end
end
return {lists, ids, packed, degrees}
"""


class RedisScripts:
    def __init__(self, redis: Redis) -> None:
        self._fold = redis.register_script(_FOLD_AGGREGATE)
        self._reinforce = redis.register_script(_REINFORCE)
        self._touch = redis.register_script(_TOUCH)
        self._hmget_many = redis.register_script(_HMGET_MANY)
        self._cardinalities = redis.register_script(_CARDINALITIES)
        self._records = redis.register_script(_RECORDS)
        self._around = redis.register_script(_AROUND)
        self._newest_with_nodes = redis.register_script(_NEWEST_WITH_NODES)
        self._count_new_terms = redis.register_script(_COUNT_NEW_TERMS)

    def fold_aggregate(self, pipe: Any, key: str, seed: Mapping[str, Any], ts_ms: int) -> None:
        flat: list[Any] = []
        for name, value in seed.items():
            flat.extend((name, value))
        queue_script(pipe, self._fold, [key], [ts_ms, *flat])

    def reinforce(self, pipe: Any, key: str, ts_ms: int) -> None:
        queue_script(pipe, self._reinforce, [key], [ts_ms])

    def count_new_terms(
        self, pipe: Any, memory_key: str, terms_key: str, counted: CountedText
    ) -> None:
        queue_script(
            pipe, self._count_new_terms, [memory_key, terms_key], [counted.length, *counted.terms]
        )

    def touch_in(self, pipe: Any, usage_keys: list[str], as_of_ms: int) -> None:
        if usage_keys:
            queue_script(pipe, self._touch, usage_keys, [as_of_ms])

    async def touch(self, usage_keys: list[str], as_of_ms: int) -> None:
        if usage_keys:
            await self._touch(keys=usage_keys, args=[as_of_ms])

    async def hmget_many(self, keys: list[str], fields: list[str]) -> list[list[Any]]:
        if not keys:
            return []
        return list(await self._hmget_many(keys=keys, args=fields))

    async def records(
        self, memory_keys: list[str], usage_keys: list[str], fields: Sequence[str]
    ) -> tuple[list[list[Any]], list[Any]]:
        """Each memory's `fields` and its usage hash's `last_accessed` (None if unset)."""
        if not memory_keys:
            return [], []
        rows, accessed = await self._records(keys=[*memory_keys, *usage_keys], args=list(fields))
        return list(rows), list(accessed)

    async def around(
        self, keys: list[str], times: Sequence[int]
    ) -> list[tuple[list[Any], list[Any]]]:
        """Per ZSET, up to two members scored at or after its time and up to two
        at or before it, nearest first."""
        if not keys:
            return []
        rows = await self._around(keys=keys, args=list(times))
        return [(list(after), list(before)) for after, before in rows]

    async def cardinalities(self, keys: list[str]) -> list[int]:
        if not keys:
            return []
        return [int(count) for count in await self._cardinalities(keys=keys)]

    async def newest_with_nodes(
        self, node_table: str, nexus_keys: list[str], limit: int, *, degrees: bool = False
    ) -> tuple[list[list[int]], list[Any], list[Any], list[int]]:
        """Per key, its newest members as positions in the distinct members;
        the distinct members; their packed nodes (None where missing); and,
        when asked, each key's degree (else an empty list)."""
        lists, ids, packed, counts = await self._newest_with_nodes(
            keys=[node_table, *nexus_keys], args=[limit, "1" if degrees else "0"]
        )
        return list(lists), list(ids), list(packed), [int(count) for count in counts]
