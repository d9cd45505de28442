"""The maintenance ledger contract, run against the Redis store and the reference
in-memory one alike: a lease excludes other holders until released or expired,
entries only move forward, and each completion is recorded once with its report."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from grimoire.infra.settings import Settings
from grimoire.streams.maintenance.schedule import Ledger, Task
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.ledger import MaintenanceLedgerStore, known_agents
from grimoire.tables.ports.maintenance import MaintenanceLedger
from grimoire.tables.redis_client import create_redis
from grimoire.tables.testing.maintenance_ledger import InMemoryMaintenanceLedger
from tests.support.contract import BACKENDS, memory_or_redis


@pytest.fixture(params=BACKENDS)
async def ledgers(request: pytest.FixtureRequest) -> AsyncIterator[MaintenanceLedger]:
    async with memory_or_redis(
        request, InMemoryMaintenanceLedger, MaintenanceLedgerStore, tag="lc"
    ) as ledger:
        yield ledger


async def test_a_lease_excludes_others_until_released(ledgers: MaintenanceLedger) -> None:
    assert await ledgers.acquire("a", "w1", 60_000)
    assert not await ledgers.acquire("a", "w2", 60_000)
    assert await ledgers.acquire("b", "w2", 60_000)  # per agent
    await ledgers.release("a", "w2")  # not the holder: nothing happens
    assert not await ledgers.acquire("a", "w2", 60_000)
    await ledgers.release("a", "w1")
    assert await ledgers.acquire("a", "w2", 60_000)


async def test_a_lease_expires(ledgers: MaintenanceLedger) -> None:
    assert await ledgers.acquire("a", "w1", 50)
    await asyncio.sleep(0.12)
    assert await ledgers.acquire("a", "w2", 60_000)


async def test_entries_move_forward_only(ledgers: MaintenanceLedger) -> None:
    assert await ledgers.ledger("a") == Ledger()
    assert await ledgers.complete("a", Task.DECAY, 5, "w1", {"entries": 2})
    assert not await ledgers.complete("a", Task.DECAY, 5, "w2", {"entries": 9})
    assert not await ledgers.complete("a", Task.DECAY, 4, "w2", {})
    assert await ledgers.complete("a", Task.CURATOR, 5, "w1", {})
    assert await ledgers.complete("a", Task.DECAY, 6, "w1", {"entries": 0})
    assert await ledgers.ledger("a") == Ledger(decay=6, curator=5)
    assert await ledgers.ledger("b") == Ledger()


async def test_history_keeps_each_completion_once(ledgers: MaintenanceLedger) -> None:
    await ledgers.complete("a", Task.DECAY, 5, "w1", {"entries": 2, "avg": 0.5})
    await ledgers.complete("a", Task.DECAY, 5, "w2", {"entries": 9})
    await ledgers.complete("a", Task.COMPACTION, 10, "w1", {"status": "done"})
    assert await ledgers.history("a") == [
        {"task": "decay", "tick": "5", "worker": "w1", "entries": "2", "avg": "0.5"},
        {"task": "compaction", "tick": "10", "worker": "w1", "status": "done"},
    ]
    assert await ledgers.history("b") == []


async def test_known_agents_are_the_agents_in_the_registry(settings: Settings) -> None:
    redis: Redis = create_redis(settings.redis.url, 2)
    prefix = f"lc{uuid.uuid4().hex[:8]}"
    try:
        await redis.zadd(Keyspace(prefix).agents, {"a": 1, "b": 2})
        assert sorted([agent async for agent in known_agents(redis, prefix)]) == ["a", "b"]
    finally:
        await redis.aclose()


async def test_ledgers_of_many_agents_read_as_each_ledger(ledgers: MaintenanceLedger) -> None:
    assert await ledgers.ledgers([]) == {}
    await ledgers.complete("a", Task.DECAY, 5, "w1", {})
    await ledgers.complete("a", Task.CURATOR, 3, "w1", {})
    await ledgers.complete("c", Task.COMPACTION, 9, "w1", {})
    assert await ledgers.ledgers(["a", "b", "c"]) == {
        "a": Ledger(decay=5, curator=3),
        "b": Ledger(),
        "c": Ledger(compaction=9),
    }
    assert await ledgers.ledgers(["c"]) == {"c": await ledgers.ledger("c")}
