"""The publication outbox: RedisOutbox (one list per agent, listed per journal
partition) and the in-memory reference behave the same, on one Redis or a cluster."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from grimoire.infra.settings import Settings
from grimoire.tables.codec.outbox_entry import OutboxEntry
from grimoire.tables.journal.outbox import RedisOutbox
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.memory.wipe import wipe_memory_state
from grimoire.tables.ports.journal import Outbox
from grimoire.tables.redis_client import create_redis
from grimoire.tables.testing.outbox import InMemoryOutbox
from grimoire.tables.transaction import AgentTransactions

pytestmark = pytest.mark.integration

TOPIC = "t.memory-events"


def entry(agent: str, n: int) -> OutboxEntry:
    return OutboxEntry(TOPIC, agent, f"{agent}:{n}".encode())


@pytest.fixture(params=["memory", "redis"])
async def outbox(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Outbox, Any]]:
    if request.param == "memory":
        yield InMemoryOutbox(), None
        return
    settings: Settings = request.getfixturevalue("settings")
    redis = create_redis(settings.redis.url, 4)
    prefix = f"ob{uuid.uuid4().hex[:8]}"
    try:
        yield RedisOutbox(redis, prefix), redis
    finally:
        await wipe_memory_state(redis, prefix)
        await redis.aclose()


async def queue(box: Outbox, redis: Any, partition: int, entries: list[OutboxEntry]) -> None:
    part = box.part(partition, entries)
    if redis is None:
        await part.apply_alone()
        return
    tx = await AgentTransactions.open(redis)
    part.queue(tx)
    await tx.execute()


async def test_entries_come_back_agent_by_agent_each_in_order(
    outbox: tuple[Outbox, Any],
) -> None:
    box, redis = outbox
    await queue(box, redis, 1, [entry("b", 1), entry("a", 1), entry("b", 2)])
    await queue(box, redis, 1, [entry("a", 2)])
    await queue(box, redis, 2, [entry("c", 1)])
    assert await box.pending(1) == [entry("a", 1), entry("a", 2), entry("b", 1), entry("b", 2)]
    assert await box.pending(2) == [entry("c", 1)]
    assert await box.pending(3) == []


async def test_removing_trims_each_agents_oldest(outbox: tuple[Outbox, Any]) -> None:
    box, redis = outbox
    await queue(box, redis, 0, [entry("a", 1), entry("a", 2), entry("b", 1)])
    await box.remove(0, {"a": 1, "b": 1})
    if redis is not None:
        # Emptied by the removal itself, before any drain reads the lists: unlisted.
        listed = await redis.smembers(box.keys.outbox_agents(0))  # type: ignore[attr-defined]
        assert listed == {b"a"}
    assert await box.pending(0) == [entry("a", 2)]
    await box.remove(0, {"a": 1})
    assert await box.pending(0) == []
    if redis is not None:
        # Emptied lists are unlisted: the next drain reads nothing.
        assert await redis.smembers(box.keys.outbox_agents(0)) == set()  # type: ignore[attr-defined]
    await queue(box, redis, 0, [entry("a", 3)])
    assert await box.pending(0) == [entry("a", 3)]


async def test_an_agents_outbox_is_in_its_slot(outbox: tuple[Outbox, Any]) -> None:
    box, redis = outbox
    if redis is None:
        return
    keys: Keyspace = box.keys  # type: ignore[attr-defined]
    await queue(box, redis, 0, [entry("golem-1", 1)])
    assert await redis.llen(keys.outbox("golem-1")) == 1
    assert keys.outbox("golem-1").endswith("{golem-1}")
