"""The state a recall reads first, in one round trip (`RedisRecallViews`), is what
the stores' own calls give (`PortRecallViews` over the same Redis stores), for an
agent holding every part of it (the actors a query names among them) and for one
holding none."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import numpy as np
import pytest
from redis.asyncio import Redis

from bench.fold import redis_traffic
from grimoire.infra.settings import Settings
from grimoire.streams.config.agent_config import AgentConfig
from grimoire.streams.learn.hedge import LEARNED_FACTORS, LearnedWeights
from grimoire.streams.model.field_state import Affect, FieldState
from grimoire.streams.recall.named import actor_candidates
from grimoire.streams.recall.view import RecallView
from grimoire.streams.write.changes import StateVector, WriteBatch
from grimoire.tables.codec.learning import weights_value
from grimoire.tables.config.store import RedisConfigStore
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.learn.store import RedisLearningStore
from grimoire.tables.memory.recall_view import PortRecallViews, RedisRecallViews
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.redis_client import create_redis
from tests.support.stored import drop_deployment

pytestmark = pytest.mark.integration

T0 = 1_790_000_000_000
HELD, BARE = "golem-viewed", "golem-bare"


@pytest.fixture
async def redis(settings: Settings) -> AsyncIterator[Redis]:
    client = create_redis(settings.redis.url, 4)
    client.grimoire_prefix = f"rv{uuid.uuid4().hex[:8]}"  # type: ignore[attr-defined]
    yield client
    await drop_deployment(client, client.grimoire_prefix)  # type: ignore[attr-defined]
    await client.aclose()


async def _hold_everything(redis: Redis, prefix: str) -> RedisMemoryStore:
    store = RedisMemoryStore(redis, prefix, 4)
    state = FieldState(
        HELD,
        watermark_ms=T0 + 5_000,
        tick=7,
        block=2,
        regime="volatile",
        affect=Affect(pleasure=-0.4, arousal=0.2),
        focus=(("entity:acme", 1.5), ("tag:deploy", 0.75)),
    )
    vector = np.asarray([0.5, 0.5, 0.5, 0.5], dtype=np.float32).tobytes()
    await store.commit(
        WriteBatch(fields=(state,), state_vectors=(StateVector(HELD, "k1", vector),))
    )
    await redis.sadd(Keyspace(prefix).actors(HELD), "dana", "deploy bot")
    await store.serve_contrarian(HELD, 3)
    await RedisConfigStore(redis, prefix).save(
        HELD, AgentConfig(top_k=4, use_learned_weights=False)
    )
    share = 1.0 / len(LEARNED_FACTORS)
    learned = LearnedWeights(tuple((factor, share) for factor in LEARNED_FACTORS), updates=9)
    await redis.set(Keyspace(prefix).learned_weights(HELD), weights_value(learned))
    return store


@pytest.mark.parametrize("agent", [HELD, BARE])
async def test_one_read_gives_what_the_stores_give(redis: Redis, agent: str) -> None:
    prefix = redis.grimoire_prefix  # type: ignore[attr-defined]
    store = await _hold_everything(redis, prefix)
    configs, learning = RedisConfigStore(redis, prefix), RedisLearningStore(redis, prefix)
    candidates = actor_candidates("did Dana see the deploy-bot roll back?")
    expected = await PortRecallViews(store, configs, learning).recall_view(agent, candidates)
    with redis_traffic() as sent:
        got = await RedisRecallViews(redis, prefix, configs=True, learning=True).recall_view(
            agent, candidates
        )
    assert got == expected
    assert sent["requests"] == 1
    if agent == HELD:
        assert got.config.top_k == 4 and got.learned is not None and got.learned.updates == 9
        assert (got.watermark, got.contrarian_served) == (T0 + 5_000, 3)
        assert got.state_vector is not None and got.fields.regime == "volatile"
        assert got.actors == {"dana", "deploy bot"}
    else:
        assert got == RecallView(fields=FieldState(BARE))


async def test_without_config_or_learning_stores_the_view_holds_the_defaults(
    redis: Redis,
) -> None:
    prefix = redis.grimoire_prefix  # type: ignore[attr-defined]
    store = await _hold_everything(redis, prefix)
    got = await RedisRecallViews(redis, prefix, configs=False, learning=False).recall_view(HELD)
    assert got == await PortRecallViews(store).recall_view(HELD)
    assert got.config == AgentConfig() and got.learned is None
