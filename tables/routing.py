"""Where a search runs: the memory index that holds an agent's memories.

On one Redis there is one index (`Keyspace.index_name`). On a Redis Cluster,
RediSearch (2.10, no coordinator) indexes only the keys of the master it runs on,
and treats an index name as a key: a master answers MOVED for an index whose
name hashes to a slot it does not own. So every master carries its own index, same
schema and document prefix, named with a hash tag of a slot it owns
(`Keyspace.cluster_index_name`: the first `s<N>` whose slot is the master's), and a
query for an agent goes to the master owning the agent's slot (its hash tag,
`grimoire.tables.keyspace`), against that master's index. Every FT.SEARCH and
FT.AGGREGATE names one agent in its filter (`grimoire.tables.queries`), so it has
exactly one target; the deployment-wide reads (FT.INFO, dropping the index) go to
every master.

The slot map is redis-py's own (`RedisCluster.nodes_manager`), which it refreshes
on MOVED; the index names follow it. After a resharding, run the workers' schema
check again (a worker does at start): it creates the index on a master that owns
no index slot yet.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from redis.crc import key_slot

from grimoire.tables.keyspace import Keyspace, hash_tag
from grimoire.tables.redis_client import close_masters, ensure_slots, is_cluster, master_client

__all__ = ["MasterIndex", "SearchRouting", "SearchTarget", "agent_slot"]

logger = logging.getLogger(__name__)

# Index-name tags tried per master: 3 masters find one in a handful of tries; a
# cluster of thousands of masters still finds one well within this.
_MAX_TAG_TRIES: Final = 1 << 20


def agent_slot(agent_id: str) -> int:
    """The cluster slot of every key of `agent_id`'s state."""
    return int(key_slot(hash_tag(agent_id).encode()))


@dataclass(frozen=True, slots=True)
class SearchTarget:
    """An FT command's index name, and the options sending it to the right master
    (none on one Redis): `execute_command("FT.SEARCH", t.index, ..., **t.options)`."""

    index: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MasterIndex:
    """One master's index, with a plain client of that master (for FT.CREATE and
    FT.INFO through redisvl, which know nothing of clusters)."""

    index: str
    client: Any
    node_name: str


class SearchRouting:
    def __init__(self, redis: Any, prefix: str) -> None:
        self._redis = redis
        self._keys = Keyspace(prefix)
        self._cluster = is_cluster(redis)
        self._tags: dict[str, str] = {}

    @property
    def clustered(self) -> bool:
        return self._cluster

    async def target(self, agent_id: str) -> SearchTarget:
        """The index holding `agent_id`'s memories, and how to reach it."""
        if not self._cluster:
            return SearchTarget(self._keys.index_name)
        await self._ready()
        node = self._redis.nodes_manager.get_node_from_slot(agent_slot(agent_id))
        return SearchTarget(self._index_of(node.name), {"target_nodes": node})

    async def every_master(self) -> list[SearchTarget]:
        """Each master's index (the one index on one Redis), in node-name order."""
        if not self._cluster:
            return [SearchTarget(self._keys.index_name)]
        await self._ready()
        return [SearchTarget(self._index_of(n.name), {"target_nodes": n}) for n in self._masters()]

    async def master_indexes(self) -> list[MasterIndex]:
        """Each master's index with a plain client of it (the client itself and
        its one index on one Redis)."""
        if not self._cluster:
            return [MasterIndex(self._keys.index_name, self._redis, "")]
        await self._ready()
        return [
            MasterIndex(self._index_of(node.name), master_client(self._redis, node), node.name)
            for node in self._masters()
        ]

    async def aclose(self) -> None:
        """Close the masters' plain clients (of every user of this cluster client)."""
        if self._cluster:
            await close_masters(self._redis)

    async def _ready(self) -> None:
        await ensure_slots(self._redis)

    def _masters(self) -> list[Any]:
        """The masters that own slots (a master with none holds no agent), by name."""
        owning = {nodes[0].name for nodes in self._redis.nodes_manager.slots_cache.values()}
        masters = [n for n in self._redis.get_primaries() if n.name in owning]
        return sorted(masters, key=lambda n: n.name)

    def _index_of(self, node_name: str) -> str:
        return self._keys.cluster_index_name(self._tag_of(node_name))

    def _tag_of(self, node_name: str) -> str:
        """The first `s<N>` whose slot `node_name` owns, kept while it still does."""
        owner = self._owner
        cached = self._tags.get(node_name)
        if cached is not None and owner(cached) == node_name:
            return cached
        for n in range(_MAX_TAG_TRIES):
            tag = f"s{n}"
            if owner(tag) == node_name:
                self._tags[node_name] = tag
                return tag
        raise LookupError(f"master {node_name} owns no slot")

    def _owner(self, tag: str) -> str | None:
        nodes = self._redis.nodes_manager.slots_cache.get(int(key_slot(tag.encode())))
        return nodes[0].name if nodes else None
