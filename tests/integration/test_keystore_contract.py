"""The key store contract, run against the Redis store, the reference in-memory one
and the per-worker cache in front of each: an agent's key is created once however
many workers race for it, forgetting destroys every key and the next one is new,
and journal sequence blocks never overlap.

Also: the key store survives a wipe of the memory state (its keys are told apart by
`Keyspace.is_keystore_key`), and the cache forgets what `forget` destroyed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from grimoire.infra.settings import Settings
from grimoire.tables.journal.keystore import KEY_BYTES, AgentKey, CachedKeyStore, RedisKeyStore
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.ports.journal import KeyStore
from grimoire.tables.redis_client import create_redis
from grimoire.tables.testing.keystore import InMemoryKeyStore
from tests.support.contract import scratch_redis


@pytest.fixture(params=["memory", "redis", "cached-memory", "cached-redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[KeyStore]:
    kind: str = request.param
    if kind.endswith("memory"):
        plain: KeyStore = InMemoryKeyStore()
        yield CachedKeyStore(plain) if kind.startswith("cached") else plain
        return
    settings: Settings = request.getfixturevalue("settings")
    redis = create_redis(settings.redis.url, 8)
    try:
        plain = RedisKeyStore(redis, f"ks{uuid.uuid4().hex[:8]}")
        yield CachedKeyStore(plain) if kind.startswith("cached") else plain
    finally:
        await redis.aclose()


async def test_a_key_is_created_on_first_use_and_kept(store: KeyStore) -> None:
    key = await store.key_for("a")
    assert isinstance(key, AgentKey)
    assert (key.agent_id, len(key.secret)) == ("a", KEY_BYTES)
    assert key.key_id
    assert await store.key_for("a") == key
    assert await store.key("a", key.key_id) == key


async def test_racing_workers_get_one_key(store: KeyStore) -> None:
    keys = await asyncio.gather(*(store.key_for("a") for _ in range(20)))
    assert len(set(keys)) == 1
    assert await store.key_for("a") == keys[0]


async def test_each_agent_has_its_own_key(store: KeyStore) -> None:
    one, two = await store.key_for("a"), await store.key_for("b")
    assert one.secret != two.secret
    # A key id names a key of one agent only.
    assert await store.key("b", one.key_id) is None


async def test_an_unknown_key_is_none(store: KeyStore) -> None:
    assert await store.key("a", "nope") is None
    key = await store.key_for("a")
    assert await store.key("a", key.key_id + "0") is None


async def test_forget_destroys_the_keys_and_the_next_key_is_new(store: KeyStore) -> None:
    old = await store.key_for("a")
    other = await store.key_for("b")
    assert await store.forget("a") == 1
    assert await store.key("a", old.key_id) is None
    new = await store.key_for("a")
    assert new.key_id != old.key_id
    assert new.secret != old.secret
    assert await store.key("a", old.key_id) is None  # the old key never comes back
    assert await store.key("a", new.key_id) == new
    assert await store.key("b", other.key_id) == other  # other agents keep theirs


async def test_forgetting_an_unknown_or_forgotten_agent_destroys_nothing(
    store: KeyStore,
) -> None:
    assert await store.forget("nobody") == 0
    await store.key_for("a")
    assert await store.forget("a") == 1
    assert await store.forget("a") == 0


async def test_sequence_numbers_start_at_one_and_count_up(store: KeyStore) -> None:
    assert await store.next_sequence("a") == 1
    assert await store.next_sequence("a") == 2
    assert await store.next_sequence("a", 5) == 7  # the block 3..7
    assert await store.next_sequence("b") == 1  # per agent


async def test_blocks_for_several_agents_come_at_once(store: KeyStore) -> None:
    assert await store.next_sequence("a", 2) == 2
    assert await store.next_sequences({"a": 3, "b": 1}) == {"a": 5, "b": 1}
    assert await store.next_sequences({}) == {}
    assert await store.next_sequence("b") == 2
    with pytest.raises(ValueError):
        await store.next_sequences({"a": 1, "c": 0})


async def test_batched_and_single_blocks_never_overlap(store: KeyStore) -> None:
    sizes = [1 + i % 3 for i in range(12)]
    lasts = await asyncio.gather(
        *(store.next_sequences({"a": size, "b": 1}) for size in sizes),
        *(store.next_sequence("a", size) for size in sizes),
    )
    ends = [last["a"] if isinstance(last, dict) else last for last in lasts]
    blocks = [range(end - size + 1, end + 1) for end, size in zip(ends, sizes * 2, strict=True)]
    assert sorted(n for block in blocks for n in block) == list(range(1, 2 * sum(sizes) + 1))


async def test_sequence_blocks_never_overlap(store: KeyStore) -> None:
    sizes = [1 + i % 4 for i in range(20)]
    lasts = await asyncio.gather(*(store.next_sequence("a", size) for size in sizes))
    blocks = [range(last - size + 1, last + 1) for last, size in zip(lasts, sizes, strict=True)]
    numbers = sorted(n for block in blocks for n in block)
    assert numbers == list(range(1, sum(sizes) + 1))


async def test_forget_leaves_nothing_of_the_agent_and_it_starts_again(store: KeyStore) -> None:
    # Nothing naming the agent is left, its counter included. A reused id starts
    # again at 1 under a new key: what a sealed entry is bound to names the key id,
    # so no old entry's binding can recur.
    await store.next_sequence("a", 3)
    await store.next_sequence("b", 2)
    old = await store.key_for("a")
    await store.forget("a")
    assert await store.next_sequence("a") == 1
    assert (await store.key_for("a")).key_id != old.key_id
    assert await store.next_sequence("b") == 3


async def test_a_sequence_block_holds_at_least_one_number(store: KeyStore) -> None:
    with pytest.raises(ValueError):
        await store.next_sequence("a", 0)


async def test_the_key_store_survives_a_wipe_of_the_memory_state(settings: Settings) -> None:
    async with scratch_redis(settings, "ks", connections=2) as (redis, prefix):
        keys = Keyspace(prefix)
        store = RedisKeyStore(redis, prefix)
        key = await store.key_for("a")
        await store.next_sequence("a", 4)
        await redis.hset(keys.memory("a", "m1"), mapping={"agent_id": "a"})
        await redis.zadd(keys.agents, {"a": 1})
        # What a rebuild's wipe does: every key of the deployment but the key store's.
        found = [name async for name in redis.scan_iter(match=keys.deployment_pattern)]
        kept = [name for name in found if keys.is_keystore_key(name)]
        expected = [keys.agent_keys("a").encode(), keys.journal_sequences.encode()]
        assert sorted(kept) == sorted(expected)
        await redis.delete(*(name for name in found if not keys.is_keystore_key(name)))
        left = [name async for name in redis.scan_iter(match=keys.deployment_pattern)]
        assert sorted(left) == sorted(kept)
        assert await store.key("a", key.key_id) == key
        assert await store.key_for("a") == key
        assert await store.next_sequence("a") == 5


# -- the per-worker cache ---------------------------------------------------------


class CountingStore(InMemoryKeyStore):
    """The reference store, counting the lookups that reach it."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0

    async def key_for(self, agent_id: str) -> AgentKey:
        self.lookups += 1
        return await super().key_for(agent_id)

    async def key(self, agent_id: str, key_id: str) -> AgentKey | None:
        self.lookups += 1
        return await super().key(agent_id, key_id)


async def test_the_cache_serves_repeated_lookups() -> None:
    inner = CountingStore()
    cache = CachedKeyStore(inner)
    key = await cache.key_for("a")
    assert await cache.key_for("a") == key
    assert await cache.key("a", key.key_id) == key
    assert inner.lookups == 1


async def test_the_cache_never_remembers_an_absence() -> None:
    inner = CountingStore()
    cache = CachedKeyStore(inner)
    assert await cache.key("a", "k") is None
    assert await cache.key("a", "k") is None
    assert inner.lookups == 2


async def test_the_cache_is_bounded_least_recently_used_first_out() -> None:
    inner = CountingStore()
    cache = CachedKeyStore(inner, max_keys=2)
    a, b = await cache.key_for("a"), await cache.key_for("b")
    await cache.key_for("a")  # a is now the most recently used
    await cache.key_for("c")  # evicts b
    assert len(cache) == 2
    inner.lookups = 0
    assert await cache.key_for("a") == a
    assert inner.lookups == 0
    assert await cache.key_for("b") == b
    assert inner.lookups == 1


async def test_forget_through_the_cache_drops_its_keys() -> None:
    cache = CachedKeyStore(InMemoryKeyStore())
    old = await cache.key_for("a")
    assert await cache.forget("a") == 1
    assert await cache.key("a", old.key_id) is None
    assert (await cache.key_for("a")).key_id != old.key_id


async def test_a_forget_elsewhere_is_seen_once_invalidated() -> None:
    inner = InMemoryKeyStore()
    here, there = CachedKeyStore(inner), CachedKeyStore(inner)
    old = await here.key_for("a")
    await there.forget("a")
    assert await here.key_for("a") == old  # stale until told
    here.invalidate("a")
    assert await here.key("a", old.key_id) is None
    assert (await here.key_for("a")).key_id != old.key_id


async def test_a_lookup_racing_a_forget_is_not_cached() -> None:
    gate = asyncio.Event()

    class SlowStore(InMemoryKeyStore):
        async def key_for(self, agent_id: str) -> AgentKey:
            key = await super().key_for(agent_id)
            await gate.wait()  # the forget runs while this lookup is on the wire
            return key

    cache = CachedKeyStore(SlowStore())
    lookup = asyncio.create_task(cache.key_for("a"))
    await asyncio.sleep(0)
    assert await cache.forget("a") == 1
    gate.set()
    stale = await lookup
    fresh = await cache.key_for("a")
    assert fresh.key_id != stale.key_id
