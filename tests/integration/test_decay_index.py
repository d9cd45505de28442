"""What only the Redis DecayStore has: its keys, and the write path's pipeline.

The pass's behaviour (what is due, what is written, what is dropped, seeding) is
the DecayStore contract, checked against both stores in test_decay_contract.py.
Here: the memory store's commit schedules new memories on its own pipeline, a
pass writes the unindexed snapshot hash and never the memory hash (an HSET there
would make RediSearch re-index the document and its vectors), and each piece of
state sits at the key the Keyspace names.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from functools import partial

import pytest
from redis.asyncio import Redis

from grimoire.agents.maintenance.decay_task import DecayRunner
from grimoire.infra.settings import Settings
from grimoire.streams.model.decay import HOUR_MS
from grimoire.streams.write.changes import WriteBatch
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.maintenance.decay_index import DecayIndex
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.memory.wipe import wipe_memory_state
from tests.support.maintenance import decay_plan, decaying_record

pytestmark = pytest.mark.integration

DIMS = 8
T0 = 1_790_000_000_000
H48 = 48 * HOUR_MS


@pytest.fixture
def agent() -> str:
    return f"agent-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def store(redis_client: Redis, settings: Settings) -> AsyncIterator[RedisMemoryStore]:
    prefix = f"{settings.broker.topic_prefix}dk{uuid.uuid4().hex[:6]}"
    memory = RedisMemoryStore(redis_client, prefix, DIMS)
    await memory.ensure_schema()
    try:
        yield memory
    finally:
        await wipe_memory_state(redis_client, prefix)  # every master's index on a cluster
        keys = [key async for key in redis_client.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await redis_client.delete(*keys)


record = partial(decaying_record, ts=T0, dims=DIMS)


async def hash_of(redis: Redis, key: str) -> dict[str, str | bytes]:
    return {text_of(k): v for k, v in (await redis.hgetall(key)).items()}


async def test_commit_schedules_and_the_pass_writes_only_its_own_keys(
    redis_client: Redis, store: RedisMemoryStore, agent: str
) -> None:
    decay: DecayIndex = store.decay
    keys = store.keys
    await store.commit(
        WriteBatch(records=(record(agent, "ep"), record(agent, "low", confidence=0.3)))
    )
    schedule = await redis_client.zrange(keys.decay_schedule(agent), 0, -1, withscores=True)
    # 0.8 halves to 0.4 in one 48 h episode half-life; 0.3 to 0.1 in log2(3) of them.
    assert {text_of(m): s for m, s in schedule}["ep"] == T0 + H48 + 1
    memory_before = await hash_of(redis_client, keys.memory(agent, "ep"))

    now = T0 + H48 + 1
    report = await DecayRunner(decay, 100)(decay_plan(agent, now))
    # Seeding found both memories already scheduled by the write path.
    assert report["seeded"] == 2
    assert report["entries_decayed"] == 1
    assert await redis_client.get(keys.decay_seeded(agent)) == str(now).encode()
    assert await hash_of(redis_client, keys.memory(agent, "ep")) == memory_before
    snapshot = await hash_of(redis_client, keys.decayed(agent, "ep"))
    assert set(snapshot) == {"effective", "band", "as_of"}
    assert snapshot["band"] == b"1"
    assert snapshot["as_of"] == str(now).encode()
    assert await redis_client.exists(keys.decayed(agent, "low")) == 0
    later = await redis_client.zscore(keys.decay_schedule(agent), "ep")
    assert later == T0 + 3 * H48 + 1
