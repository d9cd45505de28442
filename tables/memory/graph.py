"""The nexus index and hyperedges in Redis, namespaced per agent.

nexus:  {prefix}:nexus:{agent}:{key}   ZSET memory id → event time (newest last)
        the key's degree is the ZSET's cardinality: ZADD maintains it on every
        write and ZCARD reads it in O(1), so nothing ever scans.
hyper:  {prefix}:hyper:{agent}:{edge}  HASH memory id → role
terms:  {prefix}:terms:{agent}         HASH search term → how many memories hold it,
        and '#memories' → how many memories were counted
        (counted once per memory, when its hash is first written; never
        decremented: an estimate that only decides which terms the BM25 lane
        searches, see `KnnPolicy.common_term_docs`)
nodes:  {prefix}:nodes:{agent}         HASH memory id → what the walk reads of it
        (kind, keys, time, importance, status), packed by `_SYNC_NODES` from
        the memory hash after every write that touches those fields. A walk
        reads hundreds of nodes; one HMGET here costs a fraction of one HMGET
        per memory hash (see `WALK_NODE_FIELDS`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from redis.asyncio import Redis

from grimoire.tables.codec.walk_node import WALK_NODE_FIELDS
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.redis_client import queue_script

# Re-pack the given memories into their agent's node table from their hashes.
# KEYS: node table, then memory hashes; ARGV: agent id, then the memory ids.
# A memory that is gone, or belongs to another agent, has no entry.
_SYNC_NODES = """
local fields = {'agent_id', NODE_FIELDS}
for i = 2, #KEYS do
  local v = redis.call('HMGET', KEYS[i], unpack(fields))
  if v[1] == ARGV[1] then
    for j = 2, #v do if not v[j] then v[j] = '' end end
    redis.call('HSET', KEYS[1], ARGV[i], table.concat(v, '\\31', 2))
  else
    redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return #KEYS - 1
""".replace("NODE_FIELDS", ", ".join(f"'{name}'" for name in WALK_NODE_FIELDS))


class RedisGraph:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self.keys = Keyspace(prefix)
        self._sync = redis.register_script(_SYNC_NODES)

    def sync_nodes(self, pipe: Any, agent_id: str, memory_ids: Sequence[str]) -> None:
        """Queue the re-packing of these memories' walk nodes, after the writes
        that changed them on the same pipeline (pipelines run in order)."""
        ids = sorted(set(memory_ids))
        if not ids:
            return
        keys = [self.keys.nodes(agent_id), *(self.keys.memory(agent_id, i) for i in ids)]
        queue_script(pipe, self._sync, keys, [agent_id, *ids])

    def link(
        self,
        pipe: Any,
        agent_id: str,
        memory_id: str,
        ts_ms: int,
        keys: Sequence[str],
        *,
        latest: bool = False,
    ) -> None:
        """Queue the nexus-index writes of one memory on a pipeline (ZADD is idempotent).

        `latest` only ever moves a member's time forward: an aggregate sits at
        the time of its newest fold, whatever order folds arrive in."""
        for key in keys:
            pipe.zadd(self.keys.nexus(agent_id, key), {memory_id: ts_ms}, gt=latest)

    def bind(self, pipe: Any, agent_id: str, edge_id: str, members: Mapping[str, str]) -> None:
        """Queue a hyperedge's member → role entries on a pipeline."""
        if members:
            pipe.hset(self.keys.hyperedge(agent_id, edge_id), mapping=dict(members))

    def join(self, pipe: Any, agent_id: str, edge_id: str, member: str, role: str) -> None:
        """Queue one member's joining of a hyperedge, keeping a role it has there."""
        pipe.hsetnx(self.keys.hyperedge(agent_id, edge_id), member, role)

    async def degrees(self, agent_id: str, keys: Sequence[str]) -> dict[str, int]:
        async with self._redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.zcard(self.keys.nexus(agent_id, key))
            counts = await pipe.execute()
        return {key: int(count) for key, count in zip(keys, counts, strict=True)}

    async def newest(self, agent_id: str, key: str, limit: int) -> list[str]:
        if limit <= 0:
            return []
        members = await self._redis.zrevrange(self.keys.nexus(agent_id, key), 0, limit - 1)
        return [m.decode() if isinstance(m, bytes) else str(m) for m in members]

    async def hyperedge(self, agent_id: str, edge_id: str) -> dict[str, str]:
        raw = await self._redis.hgetall(self.keys.hyperedge(agent_id, edge_id))
        return {_s(k): _s(v) for k, v in raw.items()}


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
