"""The Redis memory store's shared state (`RedisMemoryCore`) and the base of each
concern's class (`RedisMemoryConcern`): every concern of a deployment is built over
one core, so they share one decoded-node cache, one set of scripts, one routing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

from redis.asyncio import Redis
from redisvl.index import AsyncSearchIndex

from grimoire.streams.model.field_state import FieldState
from grimoire.streams.ports.recall import RecallSource
from grimoire.tables.codec.walk_node import DEFAULT_CAPACITY as DEFAULT_DECODED_NODES
from grimoire.tables.codec.walk_node import DecodedNodes
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.decay_index import DecayIndex
from grimoire.tables.memory.agent_state import AgentStateStore
from grimoire.tables.memory.graph import RedisGraph
from grimoire.tables.memory.recall_source import DEFAULT_KNN_POLICY, KnnPolicy, RedisRecallSource
from grimoire.tables.memory.scripts import RedisScripts
from grimoire.tables.routing import SearchRouting
from grimoire.tables.schema.memory_index import memory_schema

__all__ = ["CoreOptions", "RedisMemoryConcern", "RedisMemoryCore"]


class CoreOptions(TypedDict, total=False):
    """`RedisMemoryCore`'s optional keywords, for a class that builds its own core;
    the defaults stay the core's alone."""

    clock_ms: Any
    knn_policy: KnnPolicy
    decoded_nodes: int


class RedisMemoryCore:
    """Memory records as Redis hashes indexed by RediSearch: the client, keyspace,
    index and helpers every concern reads and writes through.

    The only writer of an agent's records is the worker owning that agent's
    partition, so check-then-write across two round trips is race-free.
    """

    def __init__(
        self,
        redis: Redis,
        prefix: str,
        dims: int,
        *,
        clock_ms: Any = None,
        knn_policy: KnnPolicy = DEFAULT_KNN_POLICY,
        decoded_nodes: int = DEFAULT_DECODED_NODES,
    ) -> None:
        self.redis = redis
        self.knn_policy = knn_policy
        self.decoded_nodes = DecodedNodes(decoded_nodes)
        # Usage counters change on every recall; kept out of the indexed hash so a
        # touch never makes RediSearch re-index the record and its two vectors.
        self.keys = Keyspace(prefix)
        self.schema = memory_schema(prefix, dims)
        self.dims = dims
        self.index = AsyncSearchIndex(self.schema, redis_client=redis)
        self.clock_ms = clock_ms
        self.graph = RedisGraph(redis, prefix)
        self.state = AgentStateStore(redis, prefix)
        self.scripts = RedisScripts(redis)
        self.decay = DecayIndex(redis, prefix)
        self.routing = SearchRouting(redis, prefix)

    @property
    def index_name(self) -> str:
        return self.schema.index.name

    def key(self, agent_id: str, memory_id: str) -> str:
        return self.keys.memory(agent_id, memory_id)

    def source(self, agent_id: str, knn_policy: KnnPolicy) -> RedisRecallSource:
        return RedisRecallSource(
            self.redis,
            routing=self.routing,
            keys=self.keys,
            scripts=self.scripts,
            agent_id=agent_id,
            dims=self.dims,
            knn_policy=knn_policy,
            decoded_nodes=self.decoded_nodes,
        )


class RedisMemoryConcern:
    """The base of each concern's class: its core, and what several ports share,
    each agent's field state (`FieldReads`) and an agent's recall source."""

    def __init__(self, core: RedisMemoryCore) -> None:
        self.core = core

    async def load_fields(self, agent_ids: Sequence[str]) -> dict[str, FieldState]:
        return await self.core.state.load_fields(agent_ids)

    def recall_source(self, agent_id: str) -> RecallSource:
        """A read view bound to one agent, for one request (it caches records)."""
        return self.core.source(agent_id, self.core.knn_policy)
