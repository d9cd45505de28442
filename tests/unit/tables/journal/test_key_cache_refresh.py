"""Every worker's key cache stops using a forgotten agent's key at its next refresh,
whichever worker applied the forget."""

from __future__ import annotations

from grimoire.tables.journal.keystore import CachedKeyStore
from grimoire.tables.testing.keystore import InMemoryKeyStore


async def test_a_forget_run_by_another_worker_is_seen_at_the_next_refresh() -> None:
    store = InMemoryKeyStore()
    applying, recalling = CachedKeyStore(store), CachedKeyStore(store)
    await recalling.refresh()
    old = await recalling.key_for("agent-a")
    assert await recalling.key("agent-a", old.key_id) == old

    assert await applying.forget("agent-a") == 1
    # Without a refresh the cache would still seal with the destroyed key.
    assert (await recalling.key_for("agent-a")).key_id == old.key_id
    await recalling.refresh()
    assert await recalling.key("agent-a", old.key_id) is None
    reused = await recalling.key_for("agent-a")
    assert reused.key_id != old.key_id
    assert (await applying.key_for("agent-a")).key_id == reused.key_id


async def test_a_refresh_without_a_forget_keeps_the_cache() -> None:
    store = InMemoryKeyStore()
    cache = CachedKeyStore(store)
    await cache.refresh()
    await cache.key_for("agent-a")
    await cache.key_for("agent-b")
    await cache.refresh()
    assert len(cache) == 2
    await store.forget("agent-c")
    await cache.refresh()
    assert len(cache) == 0
