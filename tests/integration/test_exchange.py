"""Export and import through the real broker, workers and Redis (issue "Export /
import", docs/design.md §7).

Two workers of their own, on two prefixes (maintenance off, so nothing but the
inputs moves the state):

- agent A's episodes (one run: a hyperedge), tool events, transcript lines, an
  outcome and recalls (usage counters) on the first prefix, exported; imported on
  the second prefix through its journal: the state digests are equal, and the
  second prefix exports byte for byte the same file; a re-sent import changes
  nothing;
- B imported as A's successor on the first prefix: B's recall returns A's entries
  under new ids, with provenance `predecessor` and half A's confidence;
- wipe the first prefix and replay its journal (import entries included): every
  digest is what it was.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from grimoire.infra.exchange import export_agent, import_file
from grimoire.streams.exchange.inherit import successor_memory_id
from grimoire.streams.model.decay import effective_confidence
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.trust.agent_keys import agent_memory_ids
from grimoire.tables.trust.digest import agent_digest, state_digest
from grimoire.tables.trust.witness_store import RedisWitnessLog, audit
from grimoire.topics.client import GrimoireClient
from grimoire.topics.schemas import OutcomeV1
from tests.support.handlers import mid
from tests.support.history import BASE_TS, BLOCK_MS, episode_at, line_at, tool_call_at
from tests.support.rebuild import assert_rebuilt, replay_journal, stop_and_wipe
from tests.support.stored import memory_fields, settled_digests
from tests.support.workers import (
    TwoDeployments,
    add_worker,
    client_for,
    two_deployments_fixture,
)

TOPICS = (
    "pool depth thin",
    "gas price spiked to 90 gwei",
    "oracle lagged two blocks",
    "bridge withdrawal stuck in queue",
    "liquidation cascade started",
    "mempool flooded with arbitrage bots",
    "funding rate flipped negative",
    "validator missed its attestations",
)

pytestmark = pytest.mark.timeout(600)


pair = two_deployments_fixture("pair", ("xa", "xb"), successor="succ", timer=False)


async def _settled(redis: Redis, prefix: str, agents: list[str], eventually: Any) -> list[str]:
    """Every agent's full digest once it stops moving."""
    return await settled_digests(redis, prefix, agents, eventually, quiet_s=2.0)


async def _history(client: GrimoireClient, agent: str) -> None:
    await asyncio.gather(
        *[
            client.publish_episode(
                episode_at(
                    agent,
                    i,
                    f"{TOPICS[i]} on venue {i % 3}, slippage {i} percent",
                    run_id="run-7",
                    tags=[f"venue/{i % 3}"],
                )
            )
            for i in range(8)
        ],
        *[
            client.publish_tool_event(
                tool_call_at(
                    agent,
                    i,
                    "swap",
                    error=f"execution reverted: slippage {i}",
                    result=f"filled {i}",
                )
            )
            for i in range(4)
        ],
        *[
            client.publish_transcript(
                line_at(
                    agent,
                    i,
                    {"role": "user", "content": f"should we rebalance venue {i} now"},
                    turn_id=f"t-{i}",
                )
            )
            for i in range(3)
        ],
    )
    await client.publish_outcome(
        OutcomeV1(
            agent_id=agent,
            ts=BASE_TS + 200_000,
            outcome="positive",
            memory_ids=[mid(agent, "ep-3", BASE_TS + 3 * BLOCK_MS)],
            event_id="out-1",
        )
    )


async def test_an_export_imported_elsewhere_has_the_same_state_digest(
    pair: TwoDeployments, tmp_path: Path, eventually: Any
) -> None:
    redis = pair.redis
    agent = pair.state["agent"]
    source, target = pair.source.broker.topic_prefix, pair.target.broker.topic_prefix
    async with client_for(pair.source) as client:
        await _history(client, agent)

        await _settled(redis, source, [agent], eventually)
        assert len(await agent_memory_ids(redis, source, agent)) >= 8
        answer = await client.recall(agent, "slippage on venue", k=4, timeout=30)
        assert answer.items
        used = [item.id for item in answer.items]

        async def counted() -> bool:  # the recall's usage entry was applied
            keys = Keyspace(source)
            return all([await redis.exists(keys.usage(agent, m)) for m in used])

        await eventually(counted, timeout=60)
    await _settled(redis, source, [agent], eventually)
    path = tmp_path / "a.jsonl"
    with path.open("wb") as out:
        exported = await export_agent(pair.source, agent, out, progress=False)
    assert exported.counts["memory"] >= 8 and exported.counts["usage"] >= 1
    assert exported.counts["hyperedge"] >= 1 and exported.counts["outcomes"] == 1
    header = orjson.loads(path.read_bytes().splitlines()[0])
    assert header["format"] == "grimoire.export" and header["watermark"] == BASE_TS + 7 * BLOCK_MS

    report = await import_file(pair.target, path, timeout_s=120, progress=False)
    assert report.applied and report.memories == exported.counts["memory"]
    await _settled(redis, target, [agent], eventually)
    before = await state_digest(redis, source, agent)
    after = await state_digest(redis, target, agent)
    assert after.counts == before.counts
    assert after.sha256 == before.sha256
    # The whole digest differs only by the journal's bookkeeping.
    assert (await agent_digest(redis, source, agent)).sha256 != (
        await agent_digest(redis, target, agent)
    ).sha256
    again = tmp_path / "b.jsonl"
    with again.open("wb") as out:
        await export_agent(pair.target, agent, out, progress=False)
    assert again.read_bytes() == path.read_bytes()
    assert (await audit(RedisWitnessLog(redis, target), agent)).ok

    # The same file again is the same import: every chunk is recognised.
    resent = await import_file(pair.target, path, timeout_s=120, progress=False)
    assert resent.applied and resent.import_id == report.import_id
    await _settled(redis, target, [agent], eventually)
    assert (await state_digest(redis, target, agent)).sha256 == before.sha256
    pair.state["file"] = path


async def test_a_successor_recalls_its_predecessors_entries_at_a_discount(
    pair: TwoDeployments, eventually: Any
) -> None:
    redis = pair.redis
    agent, successor = pair.state["agent"], pair.state["successor"]
    prefix = pair.source.broker.topic_prefix
    keys = Keyspace(prefix)
    report = await import_file(
        pair.source,
        pair.state["file"],
        agent_id=successor,
        successor_of=agent,
        timeout_s=120,
        progress=False,
    )
    assert report.applied and report.successor_of == agent and report.memories >= 8
    as_of = BASE_TS + 300_000
    async with client_for(pair.source) as client:
        answer = await client.recall(
            successor,
            "slippage on venue",
            k=5,
            as_of=as_of,
            explain=True,
            # A read: a recorded use would start the usage hashes checked below.
            record_usage=False,
            timeout=30,
        )
    assert answer.items
    for item in answer.items:
        inherited = await memory_fields(redis, keys, successor, item.id)
        old_id = inherited["predecessor_memory_id"]
        original = await memory_fields(redis, keys, agent, old_id)
        assert item.agent_id == successor and original["agent_id"] == agent
        assert item.id == successor_memory_id(successor, agent, old_id, int(original["ts"]))
        assert inherited["provenance"] == "predecessor"
        assert float(inherited["confidence"]) == float(original["confidence"]) * 0.5
        assert inherited["included_count_total"] == "0"
        assert await redis.exists(keys.usage(successor, item.id)) == 0  # usage starts afresh
        assert item.text is None or item.text == original["text"]
        # The rerank's confidence factor, computed by hand from the stored fields.
        expected = effective_confidence(
            float(original["confidence"]) * 0.5,
            int(float(inherited["last_accessed"])),
            as_of,
            kind=inherited["kind"],
            decay_class=inherited.get("decay_class") or None,
            provenance="predecessor",
            quality=float(inherited["quality"]),
            strength=float(inherited.get("strength", "1")),
        )
        assert item.scores is not None
        assert item.scores["effective_confidence"] == pytest.approx(min(expected, 1.0))


async def test_a_replay_with_imports_in_the_journal_rebuilds_the_same_digests(
    pair: TwoDeployments, eventually: Any
) -> None:
    redis = pair.redis
    agents = [pair.state["agent"], pair.state["successor"]]
    for settings, name, who in (
        (pair.source, "source", agents),
        (pair.target, "target", agents[:1]),
    ):
        prefix = settings.broker.topic_prefix
        before = await _settled(redis, prefix, who, eventually)
        states = [(await state_digest(redis, prefix, a)).sha256 for a in who]
        await stop_and_wipe(redis, settings, pair.workers[name])
        await replay_journal(settings)
        await assert_rebuilt(redis, prefix, who, before, states=states)
        await add_worker(pair.workers, name, settings)
