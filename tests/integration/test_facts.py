"""Bi-temporal facts through the real broker, worker and Redis (issue "Facts").

One worker of its own (a prefix of its own, so the wipe and the replay touch
nothing of the other tests):

- over the SDK: an assert supersedes the active fact of its subject and
  predicate; valid-at, as-known-at and k-hop queries answer on the reply topic;
  a retraction of the superseding fact's event restores the one it closed; each
  change is witnessed; a malformed fact is dead-lettered with its reason;
- a recall reaches a memory keyed only by a fact's object entity, sharing no
  word with the query, from a memory about the fact's subject, and does not
  without the fact;
- forgetting an agent removes its facts;
- a wiped store replays to the same digests with facts in the journal.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import orjson
import pytest

from grimoire.infra.settings import Settings
from grimoire.streams.facts.values import fact_id_for
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.trust.agent_keys import agent_keys
from grimoire.tables.trust.witness_store import RedisWitnessLog, audit
from grimoire.topics.client import GrimoireClient
from grimoire.topics.options import RecallBudgets
from grimoire.topics.schemas import CommandV1, EpisodeV1, FactV1
from tests.support.live import Live
from tests.support.rebuild import assert_rebuilt, replay_journal, stop_and_wipe
from tests.support.stored import settled_digests
from tests.support.workers import add_worker, prefixed_settings, workers_fixture

BASE_TS = 1_790_000_000_000
pytestmark = pytest.mark.timeout(600)

AGENTS: list[str] = []  # every agent that asserted facts here: the replay compares them


@pytest.fixture(scope="module")
def facts_settings(settings: Settings) -> Settings:
    return prefixed_settings(settings, "fx")


facts_worker = workers_fixture("facts_worker", process="facts_settings")


@pytest.fixture(scope="module")
def deployed(facts_settings: Settings, facts_worker: dict[str, Any]) -> Settings:
    """`live` on this module's deployment, its worker running."""
    return facts_settings


def fact(agent: str, event: str, subject: str, predicate: str, obj: str, block: int, ts: int,
         **kw: Any) -> FactV1:  # fmt: skip
    return FactV1(
        agent_id=agent, ts=ts, subject=subject, predicate=predicate, object=obj,
        valid_from=block, event_id=event, **kw,
    )  # fmt: skip


async def test_assert_supersede_query_and_retract_over_the_sdk(live: Live) -> None:
    client, redis = live.client, live.redis
    agent = f"facts-{uuid.uuid4().hex[:6]}"
    AGENTS.append(agent)
    t1, t2, t3 = BASE_TS, BASE_TS + 60_000, BASE_TS + 120_000
    await client.assert_fact(fact(agent, "f-1", "Alice", "works at", "ACME", 100, t1))
    await client.assert_fact(fact(agent, "f-2", "alice", "works_at", "Globex", 200, t2))
    await client.assert_fact(fact(agent, "f-3", "globex", "based_in", "Berlin", 50, t2))
    await client.assert_fact(
        fact(agent, "f-4", "alice", "age", "42", 10, t3, object_is_entity=False)
    )
    await client.publish_raw(  # no subject: dead-lettered, never applied
        client.topics.facts, agent,
        orjson.dumps({"agent_id": agent, "ts": t3, "predicate": "x", "object": "y",
                      "valid_from": 1, "event_id": "bad"}),
    )  # fmt: skip

    async def four() -> Any:
        found = await client.facts_as_known_at(agent, t3)
        return found if len(found) == 4 else None

    await live.eventually(four, timeout=60, interval=0.2)
    now = await client.facts_valid_at(agent, 250, subject="Alice", predicate="works_at")
    assert [(f.object, f.valid_from, f.valid_until) for f in now] == [("globex", 200, None)]
    then = await client.facts_valid_at(agent, 150, subject="alice")
    assert [(f.predicate, f.object, f.valid_until, f.superseded_at) for f in then] == [
        ("age", "42", None, None),
        ("works_at", "acme", 200, t2),
    ]
    # As known before the second assert: acme was open-ended.
    known = await client.facts_as_known_at(agent, t1, subject="alice", predicate="works_at")
    assert [(f.object, f.valid_until) for f in known] == [("acme", None)]
    assert await client.facts_as_known_at(agent, t1 - 1) == []
    near = await client.fact_neighbours(agent, "Alice", 2)
    assert [(n.entity, n.hops) for n in near] == [("globex", 1), ("berlin", 2)]
    assert near[0].via == (fact_id_for(agent, "f-2"),)

    await client.send_command(
        CommandV1(agent_id=agent, command="retract", source_event_id="f-2", ts=t3 + 1)
    )

    async def restored() -> Any:
        found = await client.facts_valid_at(agent, 250, subject="alice", predicate="works_at")
        return found if [f.object for f in found] == ["acme"] else None

    (acme,) = await live.eventually(restored, timeout=60, interval=0.2)
    assert (acme.valid_until, acme.superseded_at) == (None, None)
    assert [(n.entity, n.hops) for n in await client.fact_neighbours(agent, "alice", 2)] == [
        ("acme", 1)
    ]

    log = RedisWitnessLog(redis, live.prefix)
    ops = [r.op for r in await log.records(agent)]
    assert ops.count("fact") == 4 and "retract.fact" in ops
    assert (await audit(log, agent)).ok
    dead = await live.read_topic(
        live.settings.bootstrap_servers,
        client.topics.dead_letters,
        until=lambda rs: any(agent.encode() in (r.value or b"") for r in rs),
        timeout=30,
    )
    (letter,) = [orjson.loads(r.value) for r in dead if agent.encode() in (r.value or b"")]
    assert (letter["reason"], letter["field"]) == ("missing_field", "subject")


async def _recalled(client: GrimoireClient, agent: str) -> dict[str, list[str]]:
    """source event id -> the item's reasons."""
    answer = await client.recall(
        agent,
        "where does alice work",
        k=10,
        budgets=RecallBudgets(canonical_k=4, eidolon_k=4, bm25_k=4),
        record_usage=False,
        timeout=30,
    )
    return {item.source_event_id: list(item.reasons or ()) for item in answer.items}


async def test_a_recall_reaches_a_memory_through_a_facts_entity(live: Live) -> None:
    client = live.client
    agent = f"reach-{uuid.uuid4().hex[:6]}"
    AGENTS.append(agent)
    target = "Quarterly audit filed by the compliance team"
    texts = [
        ("seed", "Met Alice at the standup this morning", ["Alice"]),
        ("target", target, ["ACME"]),
        # Closer to the question than the target, so the lanes fill up with them.
        *[(f"near-{i}", text, []) for i, text in enumerate([
            "Bob works at the bakery on Main Street",
            "the office of Carol is downtown near the river",
            "a pilot commutes to the airport every weekday",
            "Dave started a new job at the hospital",
            "Erin works remotely from her kitchen table",
            "our workplace moved to a new building last spring",
            "Grace has been employed at the bank for years",
            "Heidi teaches at the local school",
        ])],
    ]  # fmt: skip
    for i, (event, text, entities) in enumerate(texts):
        await client.publish_episode(
            EpisodeV1(agent_id=agent, ts=BASE_TS + i * 1_000, tick=i, event_id=event,
                      text=text, entities=entities or None)
        )  # fmt: skip

    async def stored() -> Any:
        found = await _recalled(client, agent)
        return found if "seed" in found else None

    without = await live.eventually(stored, timeout=90, interval=0.5)
    await asyncio.sleep(2.0)  # every episode applied (they were sent before the probe)
    without = await _recalled(client, agent)
    assert "target" not in without

    await client.assert_fact(fact(agent, "works", "Alice", "works_at", "ACME", 1, BASE_TS + 10**5))

    async def linked() -> Any:
        return await client.facts_valid_at(agent, 2)

    await live.eventually(linked, timeout=60, interval=0.2)
    with_fact = await _recalled(client, agent)
    assert "target" in with_fact, with_fact
    assert "entity:acme" in with_fact["target"]


async def test_forgetting_an_agent_removes_its_facts(live: Live) -> None:
    client, redis = live.client, live.redis
    agent = f"gone-{uuid.uuid4().hex[:6]}"
    await client.assert_fact(fact(agent, "g-1", "bob", "owns", "boat", 1, BASE_TS))

    async def asserted() -> Any:
        return await client.facts_valid_at(agent, 1)

    await live.eventually(asserted, timeout=60, interval=0.2)
    prefix = live.prefix
    keys = Keyspace(prefix)
    assert keys.facts(agent) in await agent_keys(redis, prefix, agent)
    await client.send_command(CommandV1(agent_id=agent, command="forget"))

    async def erased() -> bool:
        return not await agent_keys(redis, prefix, agent)

    await live.eventually(erased, timeout=60, interval=0.3)
    for key in (keys.facts(agent), keys.fact_pairs(agent), keys.fact_entities(agent),
                keys.fact_links(agent)):  # fmt: skip
        assert not await redis.exists(key)
    assert await client.facts_valid_at(agent, 1) == []


async def test_a_wiped_store_replays_facts_to_the_same_digests(
    live: Live, facts_worker: dict[str, Any]
) -> None:
    assert AGENTS, "runs after the tests that assert facts"
    redis, prefix = live.redis, live.prefix
    before = await settled_digests(redis, prefix, AGENTS, live.eventually, quiet_s=2.0)
    assert await redis.exists(*(Keyspace(prefix).facts(a) for a in AGENTS)) == len(AGENTS)
    await stop_and_wipe(redis, live.settings, facts_worker["process"])
    assert not await redis.exists(Keyspace(prefix).facts(AGENTS[0]))
    await replay_journal(live.settings)
    await assert_rebuilt(redis, prefix, AGENTS, before)
    await add_worker(facts_worker, "process", live.settings)
