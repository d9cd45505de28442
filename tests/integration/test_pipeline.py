"""The walking skeleton end to end: SDK → Kafka (tansu) → worker → Redis → reply topic."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import orjson

from grimoire.topics.client import GrimoireClient
from grimoire.topics.schemas import EpisodeV1
from tests.support.dead_letters import dead_letters_where
from tests.support.live import Live

BASE_TS = 1_790_000_000_000

A_EPISODES = (
    "disk full on /var/lib/postgresql: write failed with ENOSPC",
    "ETH/USDC spread widened to 40 bps after the block reorg",
    "gas price spiked to 300 gwei; postponed the rebalance",
)
B_EPISODES = (
    "disk full on /var/lib/postgresql: write failed with ENOSPC again",
    "funding rate on perp flipped negative",
    "oracle heartbeat missed for two blocks",
)


async def _publish(
    client: GrimoireClient, agent: str, texts: tuple[str, ...], **extra: Any
) -> None:
    for index, text in enumerate(texts):
        await client.publish_episode(
            EpisodeV1(agent_id=agent, ts=BASE_TS + index * 12_000, tick=index, text=text, **extra)
        )


async def test_recall_returns_only_the_agents_memories_most_relevant_first(live: Live) -> None:
    client = live.client
    agent_a, agent_b = live.agents
    await _publish(client, agent_a, A_EPISODES)
    await _publish(client, agent_b, B_EPISODES)

    async def all_of_a_recallable() -> Any:
        answer = await client.recall(agent_a, "the database disk ran out of space", k=10)
        # The watermark is read before the searches (docs/recall.md): a batch committed
        # between them shows its memories under the watermark before it.
        caught_up = answer.watermark == BASE_TS + 2 * 12_000
        return answer if len(answer.items) == len(A_EPISODES) and caught_up else None

    answer = await live.eventually(all_of_a_recallable, timeout=15)
    assert {item.agent_id for item in answer.items} == {agent_a}
    assert answer.items[0].text == A_EPISODES[0]
    assert sorted(item.text for item in answer.items) == sorted(A_EPISODES)
    assert answer.mode == "full"
    assert answer.budget["items"] == 3
    assert answer.watermark == BASE_TS + 2 * 12_000

    answer_b = await live.eventually(
        lambda: _recall_count(client, agent_b, "disk full", len(B_EPISODES)), timeout=15
    )
    assert {item.agent_id for item in answer_b.items} == {agent_b}
    assert not {i.id for i in answer_b.items} & {i.id for i in answer.items}


async def _recall_count(client: GrimoireClient, agent: str, query: str, n: int) -> Any:
    # These reads poll for progress; they must not count as uses of the memories.
    answer = await client.recall(agent, query, k=10, record_usage=False)
    return answer if len(answer.items) == n else None


async def test_bad_input_is_dead_lettered_and_the_worker_keeps_going(live: Live) -> None:
    client = live.client
    agent, _ = live.agents
    marker = uuid.uuid4().hex
    topic = client.topics.episodes
    good = {"agent_id": agent, "ts": BASE_TS, "text": f"valid after the bad ones {marker}"}
    bad_payloads = {
        "invalid_json": b'{"agent_id": "' + agent.encode() + b'", "text": "' + marker.encode(),
        "missing_field": orjson.dumps({"ts": BASE_TS, "text": f"no agent {marker}"}),
        "wrong_type": orjson.dumps({**good, "tick": f"seven {marker}"}),
        "oversize": orjson.dumps(
            {**good, "text": marker + "x" * live.settings.limits.max_text_chars}
        ),
    }
    for payload in bad_payloads.values():
        await client.publish_raw(topic, agent, payload)
    await client.publish_raw(topic, agent, orjson.dumps(good))

    dead = await dead_letters_where(
        live.read_topic,
        live.settings,
        lambda letter: marker in (letter.get("payload") or ""),
        at_least=len(bad_payloads),
        timeout=15,
    )
    assert sorted(letter["reason"] for letter in dead) == sorted(bad_payloads)
    by_reason = {letter["reason"]: letter for letter in dead}
    assert by_reason["missing_field"]["field"] == "agent_id"
    assert by_reason["wrong_type"]["field"] == "tick"
    assert by_reason["oversize"]["field"] == "text"
    for letter in dead:
        assert letter["source_topic"] == topic
        assert isinstance(letter["offset"], int)
        assert letter["detail"]

    answer = await live.eventually(lambda: _recall_count(client, agent, marker, 1), timeout=15)
    assert answer.items[0].text == good["text"]


async def test_publishing_the_same_events_twice_changes_nothing(live: Live) -> None:
    client = live.client
    agent, _ = live.agents
    pattern = live.keys.agent_memory_pattern(agent)
    episodes = [
        EpisodeV1(agent_id=agent, ts=BASE_TS + i, text=text, event_id=f"evt-{i}" if i else None)
        for i, text in enumerate(A_EPISODES)
    ]

    async def keys() -> list[bytes]:
        found = [key async for key in live.redis.scan_iter(pattern, count=1000)]
        owners = [await live.redis.hget(key, "agent_id") for key in found]
        return sorted(
            key for key, owner in zip(found, owners, strict=True) if owner == agent.encode()
        )

    async def snapshot() -> dict[bytes, dict[bytes, bytes]]:
        return {key: await live.redis.hgetall(key) for key in await keys()}

    for episode in episodes:
        await client.publish_episode(episode)
    await live.eventually(lambda: _recall_count(client, agent, "disk", len(episodes)), timeout=15)
    first = await snapshot()
    assert len(first) == len(episodes)

    for episode in episodes:
        await client.publish_episode(episode)
    # Same agent → same partition, processed in order: once the sentinel is
    # recallable, the redelivered copies before it have been handled too.
    sentinel = EpisodeV1(agent_id=agent, ts=BASE_TS + 99, text="sentinel after the replay")
    await client.publish_episode(sentinel)
    await live.eventually(
        lambda: _recall_count(client, agent, "disk", len(episodes) + 1), timeout=15
    )

    second = await snapshot()
    del second[next(k for k, v in second.items() if v[b"text"] == sentinel.text.encode())]
    assert second == first

    def writes_for_agent(records: list[Any]) -> list[dict[str, Any]]:
        events = [orjson.loads(r.value) for r in records]
        return [e for e in events if e["agent_id"] == agent and e["type"] == "GrimoireWrite"]

    records = await live.read_topic(
        live.settings.bootstrap_servers,
        client.topics.memory_events,
        until=lambda rs: len(writes_for_agent(rs)) >= len(episodes) + 1,
        timeout=10,
    )
    await asyncio.sleep(0.5)  # a duplicate write event would land right behind the sentinel's
    records = await live.read_topic(
        live.settings.bootstrap_servers,
        client.topics.memory_events,
        until=lambda rs: False,
        timeout=1,
    )
    writes = writes_for_agent(records)
    assert len(writes) == len(episodes) + 1
    assert len({w["memory_id"] for w in writes}) == len(writes)


async def test_a_new_episode_is_recallable_within_one_block_interval(live: Live) -> None:
    client = live.client
    agent, _ = live.agents
    text = f"liquidation cascade detected on market {uuid.uuid4().hex[:6]}"
    published = time.monotonic()
    await client.publish_episode(EpisodeV1(agent_id=agent, ts=BASE_TS, text=text))

    async def found() -> bool:
        answer = await client.recall(agent, text, k=1)
        return bool(answer.items) and answer.items[0].text == text

    await live.eventually(found, timeout=live.settings.worker.block_interval_s)
    assert time.monotonic() - published <= live.settings.worker.block_interval_s
