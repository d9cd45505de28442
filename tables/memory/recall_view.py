"""`RecallViews`: the agent's state a recall reads before it searches.

`RedisRecallViews` reads it in one pipelined round trip (seven keys of the agent's:
its configuration, field state, watermark, kept state vector, learned weights, the
contrarian window served and, for a query that may name some, its actors) where
the stores' own calls took six; `PortRecallViews` asks each store in turn, for
stores that are not Redis (the in-memory ones) and as the reference the Redis
reader is held to (tests/integration/test_recall_view.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from grimoire.streams.config.agent_config import AgentConfig
from grimoire.streams.recall.view import RecallView
from grimoire.tables.codec.actors import actors_found
from grimoire.tables.codec.agent_config import decode_agent_config
from grimoire.tables.codec.field_state import field_from_json
from grimoire.tables.codec.learning import weights_from_stored
from grimoire.tables.codec.state_vector import state_vector_from_hash
from grimoire.tables.codec.watermark import WATERMARK_MEMBER, WINDOW_MEMBER
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.ports.config import ConfigStore
from grimoire.tables.ports.learn import LearningStore
from grimoire.tables.ports.memory import RecallReads

__all__ = ["PortRecallViews", "RedisRecallViews"]


class RedisRecallViews:
    """One pipeline a request (on a cluster, split by master like any pipeline)."""

    def __init__(self, redis: Redis, prefix: str, *, configs: bool, learning: bool) -> None:
        self._redis = redis
        self._keys = Keyspace(prefix)
        # Without a configuration or learning store composed, the handler reads
        # the defaults and nothing learned: so does this.
        self._configs = configs
        self._learning = learning

    async def recall_view(self, agent_id: str, actor_candidates: Sequence[str] = ()) -> RecallView:
        keys = self._keys
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.get(keys.field_state(agent_id))
            pipe.zscore(keys.watermark(agent_id), WATERMARK_MEMBER)
            pipe.hgetall(keys.state_vector(agent_id))
            pipe.zscore(keys.contrarian_window(agent_id), WINDOW_MEMBER)
            if self._configs:
                pipe.get(keys.agent_config(agent_id))
            if self._learning:
                pipe.get(keys.learned_weights(agent_id))
            if actor_candidates:
                pipe.smismember(keys.actors(agent_id), actor_candidates)
            replies = list(await pipe.execute())
        fields, watermark, vector, served, *rest = replies
        config = decode_agent_config(rest.pop(0)) if self._configs else AgentConfig()
        learned = weights_from_stored(rest.pop(0)) if self._learning else None
        actors = actors_found(actor_candidates, rest.pop(0)) if actor_candidates else frozenset()
        return RecallView(
            fields=field_from_json(agent_id, fields),
            config=config,
            watermark=None if watermark is None else int(watermark),
            state_vector=state_vector_from_hash(agent_id, vector),
            learned=learned,
            contrarian_served=None if served is None else int(served),
            actors=actors,
        )


@dataclass(frozen=True, slots=True)
class PortRecallViews:
    """The view from each store's own calls, gathered."""

    store: RecallReads
    configs: ConfigStore | None = None
    learning: LearningStore | None = None

    async def recall_view(self, agent_id: str, actor_candidates: Sequence[str] = ()) -> RecallView:
        fields, watermark, kept, served, config, learned, actors = await asyncio.gather(
            self.store.load_fields([agent_id]),
            self.store.watermark(agent_id),
            self.store.state_vectors([agent_id]),
            self.store.contrarian_served(agent_id),
            self._config(agent_id),
            self.learning.learned_weights(agent_id) if self.learning else _nothing(),
            self.store.actors_named(agent_id, actor_candidates),
        )
        return RecallView(
            fields=fields[agent_id],
            config=config,
            watermark=watermark,
            state_vector=kept.get(agent_id),
            learned=learned,
            contrarian_served=served,
            actors=actors,
        )

    async def _config(self, agent_id: str) -> AgentConfig:
        if self.configs is None:
            return AgentConfig()
        return (await self.configs.load([agent_id]))[agent_id]


async def _nothing() -> None:
    return None
