"""The write path through the real pipeline: transcripts into layered, linked memories;
redelivery after a crash changes nothing; every decision is on the memory-events topic."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import numpy as np
import orjson

from grimoire.infra.embedding.embedder import SentenceTransformerEmbedder
from grimoire.streams.model.eidolon import state_key, state_vector
from grimoire.tables.memory.agent_state import AgentStateStore
from grimoire.topics.schemas import EpisodeV1, ToolEventV1, TranscriptV1
from tests.support.live import Live

BASE_TS = 1_790_000_000_000

TURN = {
    "type": "assistant",
    "message": {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "The deploy failed; check the nginx config first."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "read_file",
                "input": {"path": "/etc/nginx/nginx.conf"},
            },
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "is_error": True,
                "content": [{"type": "text", "text": "Permission denied: /etc/nginx/nginx.conf"}],
            },
            {"type": "text", "text": "The config is not readable; I will ask for sudo access."},
        ],
    },
}


async def test_a_transcript_turn_becomes_layered_memories_in_one_hyperedge(live: Live) -> None:
    client = live.client
    agent, _ = live.agents
    user_line = TranscriptV1(
        agent_id=agent,
        ts=BASE_TS,
        turn_id="turn-7",
        session_id="sess-1",
        line={"type": "user", "message": {"role": "user", "content": "Why did the deploy fail?"}},
    )
    assistant_line = TranscriptV1(
        agent_id=agent, ts=BASE_TS + 1, turn_id="turn-7", session_id="sess-1", line=TURN
    )
    await client.publish_transcript(user_line)
    await client.publish_transcript(assistant_line)

    edge_key = live.keys.hyperedge(agent, "turn:turn-7")

    async def members() -> dict[bytes, bytes] | None:
        found = await live.redis.hgetall(edge_key)
        return found if len(found) == 5 else None

    edge = await live.eventually(members, timeout=15)
    keys = live.keys
    layers: dict[str, str] = {}
    for memory_id, role in edge.items():
        record = await live.redis.hgetall(keys.memory(agent, memory_id.decode()))
        assert record[b"hyperedge_ids"] == b"turn:turn-7"
        assert record[b"session_id"] == b"sess-1"
        layers[record[b"layer"].decode()] = role.decode()
    assert layers == {
        "input": "trigger",
        "contemplation": "context",
        "action": "action",
        "observation": "outcome",
        "output": "outcome",
    }
    answer = await client.recall(agent, "nginx config permission denied", k=5)
    assert any("Permission denied" in item.text for item in answer.items)

    # The agent's latest state vector is kept for its recalls: the stored field
    # state's parts, embedded by the same model, composed.
    state = await AgentStateStore(live.redis, live.prefix).field(agent)
    kept = (await AgentStateStore(live.redis, live.prefix).state_vectors([agent]))[agent]
    assert state.digest_parts() and kept.key == state_key(state.digest_parts())
    embedder = SentenceTransformerEmbedder.from_settings(live.settings.with_values(embed_lanes=1))
    try:
        parts = state.digest_parts()
        vectors = await embedder.embed(list(parts))
    finally:
        embedder.close()
    expected = state_vector(parts, dict(zip(parts, vectors, strict=True)))
    assert expected is not None
    np.testing.assert_array_equal(np.frombuffer(kept.vector, dtype=np.float32), expected)


async def test_redelivery_after_a_crash_changes_nothing(live: Live) -> None:
    client = live.client
    agent, _ = live.agents
    marker = uuid.uuid4().hex[:8]
    batch: list[Any] = [
        EpisodeV1(
            agent_id=agent,
            ts=BASE_TS + i * 12_000,
            tick=i,
            event_id=f"hb-{i}",
            text=f"heartbeat {marker}: pool depth stable, gas 30 gwei",
            tags=["ops/heartbeat"],
        )
        for i in range(4)
    ]
    batch.append(
        ToolEventV1(
            agent_id=agent,
            ts=BASE_TS + 60_000,
            event_id="tool-1",
            tool="swap",
            error=f"execution reverted: slippage exceeded 0.5% ({marker})",
            urls=["https://rpc.example.com/v1?key=SECRET"],
        )
    )

    async def publish_all() -> None:
        for event in batch:
            if isinstance(event, EpisodeV1):
                await client.publish_episode(event)
            else:
                await client.publish_tool_event(event)

    state = AgentStateStore(live.redis, live.prefix)
    graph = live.keys

    async def snapshot() -> dict[str, Any]:
        stats = await state.stats(agent)
        decided = await live.redis.hgetall(state.decided_key(agent))
        nexus = {
            key: await live.redis.zcard(graph.nexus(agent, key))
            for key in (
                "tag:ops/heartbeat",
                "err:reverted",
                "err:slippage",
                "tool:swap",
                "url:rpc.example.com/v1",
            )
        }
        return {"stats": stats, "decided": decided, "nexus": nexus}

    await publish_all()

    async def all_decided() -> dict[str, Any] | None:
        snap = await snapshot()
        return snap if snap["stats"].get("candidates") == len(batch) else None

    first = await live.eventually(all_decided, timeout=15)
    assert first["nexus"]["err:reverted"] == 1
    assert first["nexus"]["url:rpc.example.com/v1"] == 1  # no query string (no secrets)

    # The "crash": the same events arrive again, then a sentinel behind them.
    await publish_all()
    await client.publish_episode(
        EpisodeV1(
            agent_id=agent, ts=BASE_TS + 90_000, event_id="sentinel", text=f"sentinel {marker}"
        )
    )

    async def sentinel_decided() -> dict[str, Any] | None:
        snap = await snapshot()
        return snap if snap["stats"].get("candidates") == len(batch) + 1 else None

    second = await live.eventually(sentinel_decided, timeout=15)
    await asyncio.sleep(0.5)
    second = await snapshot()
    assert second["nexus"] == first["nexus"]
    del second["decided"][next(k for k in second["decided"] if k not in first["decided"])]
    assert second["decided"] == first["decided"]

    def of_agent(records: list[Any]) -> list[dict[str, Any]]:
        # The write path's decisions (each applied entry's witness link is there too).
        decoded = [orjson.loads(record.value) for record in records]
        return [
            event
            for event in decoded
            if event["agent_id"] == agent and event.get("type") != "GrimoireWitness"
        ]

    await live.read_topic(
        live.settings.bootstrap_servers,
        client.topics.memory_events,
        until=lambda records: len(of_agent(records)) >= len(batch) + 1,
        timeout=10,
    )
    await asyncio.sleep(0.5)  # anything that would wrongly follow (a duplicate) lands right behind
    events = of_agent(
        await live.read_topic(
            live.settings.bootstrap_servers,
            client.topics.memory_events,
            until=lambda _: False,
            timeout=1,
        )
    )
    assert len(events) == len(batch) + 1
    assert len({e["candidate_id"] for e in events}) == len(events)

    # Stats moved by exactly the sentinel's own decision, nothing for the redelivered copies.
    sentinel = next(e for e in events if e["source_event_id"] == "sentinel")
    expected = dict(first["stats"])
    expected["candidates"] += 1
    expected[sentinel["action"]] = expected.get(sentinel["action"], 0) + 1
    if sentinel["off_topic"]:
        expected["off_topic"] = expected.get("off_topic", 0) + 1
    if sentinel.get("quality") is not None:
        expected["quality_sum"] = expected.get("quality_sum", 0) + sentinel["quality"]
    assert second["stats"].keys() == expected.keys()
    for name, value in expected.items():
        assert abs(second["stats"][name] - value) < 1e-6, name

    for event in events:
        assert set(event["admission"]) == {
            "composite",
            "future_utility",
            "factual_confidence",
            "novelty",
            "recency",
            "type_prior",
        }
    actions = sorted(e["action"] for e in events)
    # Four identical heartbeats: the first is decided on its merits, the repeats
    # fold into one aggregate instead of piling up.
    assert actions.count("aggregate") == 3
