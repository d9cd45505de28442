"""The fact store contract, run against the Redis store and the reference
in-memory one alike: versions by relation, by entity and all of them, active
entity links kept in step with asserts and retractions, agents apart."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from grimoire.streams.facts.timeline import assert_fact, retract
from grimoire.streams.facts.values import Fact
from grimoire.tables.facts.store import RedisFactStore
from grimoire.tables.ports.facts import FactStore
from grimoire.tables.testing.fact_store import InMemoryFactStore
from tests.support.contract import BACKENDS, memory_or_redis
from tests.support.facts import agent_fact


@pytest.fixture(params=BACKENDS)
async def facts(request: pytest.FixtureRequest) -> AsyncIterator[FactStore]:
    async with memory_or_redis(request, InMemoryFactStore, RedisFactStore, tag="fc") as store:
        yield store


def fact(agent: str, event: str, subject: str, obj: str, block: int, *,
         predicate: str = "works_at", entity: bool = True) -> Fact:  # fmt: skip
    return agent_fact(
        agent, event, subject, obj, valid_from=block, known_ms=block * 1000,
        predicate=predicate, entity=entity,
    )  # fmt: skip


async def put(store: FactStore, new: Fact) -> None:
    versions = await store.versions(new.agent_id, new.subject, new.predicate)
    await store.apply(new.agent_id, assert_fact(versions, new))


async def test_versions_indexes_and_links_follow_asserts(facts: FactStore) -> None:
    a, b = fact("x", "e1", "alice", "acme", 10), fact("x", "e2", "alice", "globex", 20)
    age = fact("x", "e3", "alice", "42", 5, predicate="age", entity=False)
    for new in (a, b, age, fact("y", "e1", "alice", "acme", 10)):
        await put(facts, new)
    versions = await facts.versions("x", "alice", "works_at")
    assert [(f.object, f.valid_until, f.order) for f in versions] == [
        ("acme", 20, 1),
        ("globex", None, 2),
    ]
    assert [f.fact_id for f in await facts.all_versions("x")] == [
        age.fact_id,
        a.fact_id,
        b.fact_id,
    ]
    assert {f.fact_id for f in await facts.of_entities("x", ["acme"])} == {a.fact_id}
    assert len(await facts.of_entities("x", ["alice", "globex"])) == 3
    assert await facts.links("x", ["entity:alice", "entity:acme", "entity:nobody"]) == {
        "entity:alice": [("entity:globex", b.fact_id)]
    }
    assert await facts.links("x", ["entity:globex"]) == {
        "entity:globex": [("entity:alice", b.fact_id)]
    }
    assert await facts.fact("x", b.fact_id) == versions[1]
    assert await facts.fact("z", b.fact_id) is None
    assert len(await facts.all_versions("y")) == 1  # agents apart


async def test_a_retraction_restores_and_relinks(facts: FactStore) -> None:
    a, b = fact("x", "e1", "alice", "acme", 10), fact("x", "e2", "alice", "globex", 20)
    await put(facts, a)
    await put(facts, b)
    versions = await facts.versions("x", "alice", "works_at")
    await facts.apply("x", retract(versions, b.fact_id))
    (only,) = await facts.versions("x", "alice", "works_at")
    assert (only.fact_id, only.valid_until, only.superseded_at_ms) == (a.fact_id, None, None)
    assert await facts.links("x", ["entity:alice", "entity:globex"]) == {
        "entity:alice": [("entity:acme", a.fact_id)]
    }
    assert await facts.of_entities("x", ["globex"]) == []
    await facts.apply("x", retract([only], a.fact_id))
    assert await facts.all_versions("x") == []
    assert await facts.links("x", ["entity:alice"]) == {}


async def test_put_versions_stores_them_as_they_are(facts: FactStore) -> None:
    a, b = fact("x", "e1", "alice", "acme", 10), fact("x", "e2", "alice", "globex", 20)
    changes = assert_fact([a], b)
    await facts.put_versions("x", [a, *changes.upserts])
    assert [f.valid_until for f in await facts.versions("x", "alice", "works_at")] == [20, None]
