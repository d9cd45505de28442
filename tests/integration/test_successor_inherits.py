"""A successor inherits its predecessor's facts and causal edges, at the successor
discount (issue 36, must-show 5), through the real broker, workers and Redis.

Two workers of their own, on two prefixes (maintenance off, so nothing but the
inputs moves the state):

- agent A on the first prefix: two runs (alert, action, report) ended with their
  qualities (causal edges action -> report, and the actions' causal uplift), the
  second run's report retracted (its edge names a memory a successor
  does not inherit); facts asserted, one superseding another. A is exported and
  imported as B's inheritance at a discount of 0.25: B holds A's edges between
  inherited memories under their new ids, weights x 0.25, and every fact version
  under its new id, confidence x 0.25, answered by B's fact queries; the edge to the
  retracted report is not B's;
- the same file inherited by B on the second prefix (where A never was) gives B the
  same state digest, and sent again changes nothing;
- B retracts an inherited fact by its source event: the version it had closed is
  open again;
- wipe the first prefix and replay its journal: every digest is what it was.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from grimoire.infra.exchange import ImportReport, export_agent, import_file
from grimoire.infra.settings import Settings
from grimoire.streams.exchange.inherit import InheritanceOptions, successor_memory_id
from grimoire.streams.exchange.inherit_knowledge import successor_fact_id, successor_fact_source
from grimoire.streams.facts.values import Closure, fact_id_for
from grimoire.streams.learn.causal import CausalEdge, causal_uplift
from grimoire.streams.model.ids import memory_id
from grimoire.tables.facts.store import RedisFactStore
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.learn.store import RedisLearningStore
from grimoire.tables.trust.digest import state_digest
from grimoire.topics.client import GrimoireClient
from grimoire.topics.schemas import CommandV1, EpisodeV1, FactV1, OutcomeV1, ToolEventV1
from tests.support.rebuild import assert_rebuilt, replay_journal, stop_and_wipe
from tests.support.stored import memory_fields, settled_digests, wait_outcomes_applied
from tests.support.workers import (
    TwoDeployments,
    client_for,
    two_deployments_fixture,
)

BASE_TS = 1_793_000_000_000
MINUTE = 60_000
DISCOUNT = 0.25  # not the default: the option reaches facts and edges as it reaches memories

pytestmark = pytest.mark.timeout(600)


pair = two_deployments_fixture(
    "pair", ("sa", "sb"), successor="heir", timer=False, maintenance_enabled=False
)


def _ts(n: int, step: int) -> int:
    return BASE_TS + n * 10 * MINUTE + step * MINUTE


async def _inherit(settings: Settings, path: Path, heir: str, agent: str) -> ImportReport:
    """The exported file imported as `heir`'s inheritance from `agent`, at `DISCOUNT`."""
    return await import_file(
        settings, path, agent_id=heir, successor_of=agent,
        options=InheritanceOptions(DISCOUNT), timeout_s=120, progress=False,
    )  # fmt: skip


def _member(agent: str, n: int, part: str) -> str:
    step = {"alert": 0, "action": 1, "report": 2}[part]
    return memory_id(agent, f"run-{n}-{part}", 0, _ts(n, step))


async def _run(
    client: GrimoireClient, redis: Redis, keys: Keyspace, agent: str, n: int, quality: float,
    eventually: Any,
) -> None:  # fmt: skip
    """Run `n`: an alert, an action (a tool call) and a report, then its outcome."""
    common = {"agent_id": agent, "run_id": f"run-{n}"}
    # Words of its own per run, so no run's memory folds into another's at admission.
    words = RUNS[n]
    await client.publish_episode(
        EpisodeV1(**common, ts=_ts(n, 0), tick=3 * n, event_id=f"run-{n}-alert",
                  episode_type="alert", text=words["alert"], entities=["payment-svc"],
                  importance=0.9)
    )  # fmt: skip
    await client.publish_tool_event(
        ToolEventV1(**common, ts=_ts(n, 1), tick=3 * n + 1, event_id=f"run-{n}-action",
                    tool=words["tool"], result=words["result"], latency_ms=300.0)
    )  # fmt: skip
    await client.publish_episode(
        EpisodeV1(**common, ts=_ts(n, 2), tick=3 * n + 2, event_id=f"run-{n}-report",
                  episode_type="report", outcome="success" if quality >= 0.5 else "failure",
                  text=words["report"], entities=["payment-svc"], importance=0.9)
    )  # fmt: skip
    members = [_member(agent, n, p) for p in ("alert", "action", "report")]

    async def written() -> bool:
        decided = set(await redis.hkeys(keys.decided(agent)))
        return all(m.encode() in decided for m in members)

    await eventually(written, timeout=60, interval=0.1)
    ended = f"run-{n}-ended"
    await client.publish_outcome(
        OutcomeV1(agent_id=agent, ts=_ts(n, 3), outcome="run_ended", run_id=f"run-{n}",
                  quality=quality, event_id=ended)
    )  # fmt: skip
    await wait_outcomes_applied(eventually, redis, keys, agent, [ended])


RUNS: dict[int, dict[str, str]] = {
    1: {
        "alert": "alert: the checkout deploy of build 401 timed out in Frankfurt",
        "tool": "kubectl",
        "result": "restarted the billing pods for build 401",
        "report": "the billing restart fixed the checkout deploy of build 401 in Frankfurt",
    },
    2: {
        "alert": "alert: replication lag on the orders database reached 90 seconds in Mumbai",
        "tool": "psql",
        "result": "promoted the inventory replica after lag of 90 seconds",
        "report": "promoting the inventory replica cleared the orders lag in Mumbai",
    },
}
FACTS = (
    ("f-1", "alice", "works_at", "acme", 100),
    ("f-2", "alice", "works_at", "globex", 200),  # closes f-1's version at block 200
    ("f-3", "acme", "located_in", "berlin", 50),
)


async def test_a_successor_inherits_facts_and_causal_edges_at_the_discount(
    pair: TwoDeployments, tmp_path: Path, eventually: Any
) -> None:
    redis = pair.redis
    agent, heir = pair.state["agent"], pair.state["successor"]
    prefix = pair.source.broker.topic_prefix
    keys = Keyspace(prefix)
    learning, facts = RedisLearningStore(redis, prefix), RedisFactStore(redis, prefix)
    async with client_for(pair.source) as client:
        await _run(client, redis, keys, agent, 1, 0.9, eventually)
        await _run(client, redis, keys, agent, 2, 0.7, eventually)
        for i, (event, subject, predicate, obj, block) in enumerate(FACTS):
            await client.assert_fact(
                FactV1(agent_id=agent, ts=_ts(3, i), subject=subject, predicate=predicate,
                       object=obj, valid_from=block, event_id=event)
            )  # fmt: skip

        async def known() -> bool:
            return len(await client.facts_as_known_at(agent, _ts(3, 9))) == len(FACTS)

        await eventually(known, timeout=60, interval=0.2)
        retracted = _member(agent, 2, "report")
        await client.send_command(
            CommandV1(agent_id=agent, command="retract", source_event_id=retracted,
                      ts=_ts(4, 0))
        )  # fmt: skip

        async def gone() -> bool:
            held = await memory_fields(redis, keys, agent, retracted, "retracted")
            return held.get("retracted") == "1"

        await eventually(gone, timeout=60, interval=0.1)
    await settled_digests(redis, prefix, [agent], eventually, quiet_s=2.0)
    edges = await learning.all_edges(agent)
    assert {(e.cause, e.effect) for e in edges} >= {
        (_member(agent, 1, "action"), _member(agent, 1, "report")),
        (_member(agent, 2, "action"), retracted),
    }

    path = tmp_path / "pred.jsonl"
    with path.open("wb") as out:
        exported = await export_agent(pair.source, agent, out, progress=False)
    assert exported.counts["causal_edges"] >= 1 and exported.counts["facts"] >= 1
    report = await _inherit(pair.source, path, heir, agent)
    assert report.applied and report.successor_of == agent

    # B's memories: A's live ones under new ids (the retracted report is not B's).
    def new(old: str) -> str:
        return successor_memory_id(heir, agent, old, int(old_ts[old]))

    old_ts = {}
    for n in (1, 2):
        for part in ("alert", "action", "report"):
            old = _member(agent, n, part)
            old_ts[old] = (await memory_fields(redis, keys, agent, old, "ts"))["ts"]
    inherited = {old for old in old_ts if old != retracted}
    for old in inherited:
        fields = await memory_fields(redis, keys, heir, new(old), "confidence", "provenance")
        original = await memory_fields(redis, keys, agent, old, "confidence")
        assert fields["provenance"] == "predecessor"
        assert float(fields["confidence"]) == float(original["confidence"]) * DISCOUNT
    assert not await redis.exists(keys.memory(heir, new(retracted)))

    # Causal edges: those between inherited memories, remapped, weight x DISCOUNT.
    expected = sorted(
        (
            CausalEdge(new(e.cause), new(e.effect), round(e.weight * DISCOUNT, 9),
                       e.evidence, e.last_block)
            for e in edges
            if e.cause in inherited and e.effect in inherited
        ),
        key=lambda e: (e.cause, e.effect),
    )  # fmt: skip
    assert expected and len(expected) < len(edges)  # the edge to the retracted report: not
    assert await learning.all_edges(heir) == expected
    action = new(_member(agent, 1, "action"))
    out_edges = await learning.out_edges(heir, [action])
    assert out_edges[action] == [e for e in expected if e.cause == action]
    around = await learning.edges_of(heir, [action])  # read through the adjacency lists
    assert around[action] == [e for e in expected if action in (e.cause, e.effect)]
    # Recall's causal uplift of the inherited action: the one its inherited edges give.
    uplift = await memory_fields(redis, keys, heir, action, "causal_uplift")
    assert float(uplift["causal_uplift"]) == causal_uplift(out_edges[action])
    original_uplift = await memory_fields(
        redis, keys, agent, _member(agent, 1, "action"), "causal_uplift"
    )
    assert float(uplift["causal_uplift"]) == pytest.approx(
        float(original_uplift["causal_uplift"]) * DISCOUNT
    )

    # Facts: every version, remapped, confidence x DISCOUNT, closures kept.
    originals = await facts.all_versions(agent)
    held = {f.fact_id: f for f in await facts.all_versions(heir)}
    assert len(held) == len(originals) == len(FACTS)
    for fact in originals:
        got = held[successor_fact_id(heir, fact.fact_id)]
        source = successor_fact_source(fact.fact_id)
        assert (got.agent_id, got.source_event_id) == (heir, source)
        assert (got.subject, got.predicate, got.object, got.valid_from, got.known_from_ms) == (
            fact.subject, fact.predicate, fact.object, fact.valid_from, fact.known_from_ms
        )  # fmt: skip
        assert got.confidence == fact.confidence * DISCOUNT == DISCOUNT
        assert got.closures == tuple(
            Closure(c.at_ms, c.valid_until, successor_fact_id(heir, c.by)) for c in fact.closures
        )
    async with client_for(pair.source) as client:
        now = await client.facts_valid_at(heir, 250, subject="alice")
        assert [(f.object, f.fact_id) for f in now] == [
            ("globex", successor_fact_id(heir, fact_id_for(agent, "f-2")))
        ]
        before = await client.facts_valid_at(heir, 150, subject="alice")
        assert [f.object for f in before] == ["acme"]
        near = await client.fact_neighbours(heir, "alice", hops=2)
        assert [(n.entity, n.hops) for n in near] == [("globex", 1)]
        near = await client.fact_neighbours(heir, "acme", hops=1)
        assert [n.entity for n in near] == ["berlin"]
    pair.state["file"] = path
    pair.state["heir_state"] = (await state_digest(redis, prefix, heir)).sha256


async def test_the_same_file_inherited_again_gives_the_same_state(
    pair: TwoDeployments, eventually: Any
) -> None:
    redis = pair.redis
    agent, heir = pair.state["agent"], pair.state["successor"]

    async def inherited_on(settings: Settings) -> str:
        """The file inherited on that deployment: B's state is the one it had first."""
        prefix = settings.broker.topic_prefix
        report = await _inherit(settings, pair.state["file"], heir, agent)
        assert report.applied
        await settled_digests(redis, prefix, [heir], eventually, quiet_s=2.0)
        assert (await state_digest(redis, prefix, heir)).sha256 == pair.state["heir_state"]
        return prefix

    target = await inherited_on(pair.target)
    assert await RedisFactStore(redis, target).all_versions(agent) == []  # A was never here
    await inherited_on(pair.source)  # sent again where B already inherited it


async def test_a_successor_with_facts_of_its_own_keeps_them_indexed(
    pair: TwoDeployments, eventually: Any
) -> None:
    """C asserted facts before inheriting A's: the fact indexes hold both, joined."""
    redis = pair.redis
    agent, own = pair.state["agent"], f"own-{uuid.uuid4().hex[:6]}"
    target = pair.target.broker.topic_prefix
    store = RedisFactStore(redis, target)
    async with client_for(pair.target) as client:
        for i, (event, subject, predicate, obj) in enumerate(
            (("c-1", "alice", "works_at", "initech"), ("c-2", "bob", "knows", "alice"))
        ):
            await client.assert_fact(
                FactV1(agent_id=own, ts=_ts(6, i), subject=subject, predicate=predicate,
                       object=obj, valid_from=300, event_id=event)
            )  # fmt: skip

        async def known() -> bool:
            return len(await client.facts_as_known_at(own, _ts(6, 9))) == 2

        await eventually(known, timeout=60, interval=0.2)
    report = await _inherit(pair.target, pair.state["file"], own, agent)
    assert report.applied
    mine = {fact_id_for(own, "c-1"), fact_id_for(own, "c-2")}
    inherited = {successor_fact_id(own, f) for f in (fact_id_for(agent, e) for e, *_ in FACTS)}
    works = {f.fact_id for f in await store.versions(own, "alice", "works_at")}
    assert works == {fact_id_for(own, "c-1")} | {
        successor_fact_id(own, fact_id_for(agent, e)) for e in ("f-1", "f-2")
    }
    about_alice = {f.fact_id for f in await store.of_entities(own, ["alice"])}
    assert about_alice == works | {fact_id_for(own, "c-2")}
    assert {f.fact_id for f in await store.all_versions(own)} == mine | inherited
    links = await store.links(own, ["entity:alice"])
    assert {key for key, _ in links["entity:alice"]} >= {
        "entity:initech", "entity:bob", "entity:globex"
    }  # fmt: skip


async def test_the_successor_retracts_an_inherited_fact_by_its_source_event(
    pair: TwoDeployments, eventually: Any
) -> None:
    agent, heir = pair.state["agent"], pair.state["successor"]
    superseding = fact_id_for(agent, "f-2")
    async with client_for(pair.source) as client:
        await client.send_command(
            CommandV1(agent_id=heir, command="retract",
                      source_event_id=successor_fact_source(superseding), ts=_ts(5, 0))
        )  # fmt: skip

        async def reopened() -> bool:
            now = await client.facts_valid_at(heir, 250, subject="alice")
            return [f.object for f in now] == ["acme"]

        await eventually(reopened, timeout=60, interval=0.2)
        # The predecessor's own facts are untouched.
        mine = await client.facts_valid_at(agent, 250, subject="alice")
        assert [f.object for f in mine] == ["globex"]


async def test_a_replay_rebuilds_the_inherited_facts_and_edges(
    pair: TwoDeployments, eventually: Any
) -> None:
    redis = pair.redis
    agents = [pair.state["agent"], pair.state["successor"]]
    prefix = pair.source.broker.topic_prefix
    before = await settled_digests(redis, prefix, agents, eventually, quiet_s=2.0)
    states = [(await state_digest(redis, prefix, a)).sha256 for a in agents]
    edges = await RedisLearningStore(redis, prefix).all_edges(agents[1])
    facts = await RedisFactStore(redis, prefix).all_versions(agents[1])
    assert edges and facts
    await stop_and_wipe(redis, pair.source, pair.workers["source"])
    await replay_journal(pair.source)
    await assert_rebuilt(redis, prefix, agents, before, states=states)
    assert await RedisLearningStore(redis, prefix).all_edges(agents[1]) == edges
    assert await RedisFactStore(redis, prefix).all_versions(agents[1]) == facts
