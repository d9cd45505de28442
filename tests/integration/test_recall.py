"""Recall through the real broker, worker and Redis Stack: filters in the RediSearch
lanes, the walk over the nexus index, token budget, episodes, usage accounting."""

from __future__ import annotations

from typing import Any

import pytest

from grimoire.tables.codec.watermark import WINDOW_MEMBER
from grimoire.topics.options import RecallBudgets, RecallFilters
from grimoire.topics.schemas import EpisodeV1, OutcomeV1, TranscriptV1
from tests.support.live import Live

BASE_TS = 1_790_000_000_000


def _line(agent: str, n: int, session: str, actor: str, text: str) -> TranscriptV1:
    return TranscriptV1(
        agent_id=agent,
        ts=BASE_TS + n * 1_000,
        event_id=f"{agent}-{n}",
        session_id=session,
        turn_id=session,  # one hyperedge per session
        actor_id=actor,
        entities=[actor],
        line={"role": "user", "content": text},
    )


LINES = (
    ("s1", "alice", "the staging deploy failed with a timeout on the payments service"),
    ("s1", "bob", "I rolled the payments release back and paged the on-call engineer"),
    ("s2", "alice", "prod deploy of the search service went fine this morning"),
    ("s2", "bob", "the payments database migration is scheduled for friday"),
)


async def _ingest(live: Live, agent: str) -> None:
    for n, (session, actor, text) in enumerate(LINES):
        await live.client.publish_transcript(_line(agent, n, session, actor, text))

    async def all_there() -> Any:
        answer = await live.client.recall(agent, "payments deploy", k=10, record_usage=False)
        return answer if len(answer.items) == len(LINES) else None

    await live.eventually(all_there, timeout=20)


async def test_filters_budget_explain_episodes_and_usage_through_the_pipeline(live: Live) -> None:
    client, keys = live.client, live.keys
    agent, other = live.agents
    await _ingest(live, agent)
    await _ingest(live, other)

    by_session = await client.recall(
        agent, "payments deploy", filters=RecallFilters(session_id="s1")
    )
    assert {item.session_id for item in by_session.items} == {"s1"}
    assert {item.agent_id for item in by_session.items} == {agent}

    by_actor = await client.recall(agent, "deploy", filters=RecallFilters(actor_id="bob"), k=10)
    assert by_actor.items
    assert {item.source_event_id for item in by_actor.items} <= {f"{agent}-1", f"{agent}-3"}

    since = await client.recall(agent, "deploy", filters=RecallFilters(since=BASE_TS + 2_000), k=10)
    assert {item.ts for item in since.items} <= {BASE_TS + 2_000, BASE_TS + 3_000}

    tight = await client.recall(agent, "payments deploy", budgets=RecallBudgets(token_budget=30))
    assert 0 < tight.budget["tokens_used"] <= 30
    assert sum(item.tokens or 0 for item in tight.items) == tight.budget["tokens_used"]

    explained = await client.recall(
        agent, "staging deploy timeout", k=1, explain=True, expand_episodes=True
    )
    (top,) = explained.items
    assert top.source_event_id == f"{agent}-0"
    assert top.scores is not None and {
        "relevance",
        "lexical",
        "semantic",
        "recency",
        "score",
    } <= set(top.scores)
    assert top.episode and {s["id"] for s in top.episode} == {
        item.id for item in by_session.items if item.id != top.id
    }
    assert all(s["role"] for s in top.episode)
    assert explained.timings_ms["total"] > 0 and explained.mode == "full"

    assert await live.redis.exists(keys.memory(agent, top.id))
    # not indexed: a touch never re-indexes
    usage = keys.usage(agent, top.id)
    counts = await live.redis.hmget(usage, ["included_count_total", "last_accessed"])
    assert int(counts[0]) >= 1  # the explained recall counted it (record_usage defaults on)
    assert int(counts[1]) == explained.as_of


async def test_outcomes_through_the_broker_apply_once(live: Live) -> None:
    client, redis_client = live.client, live.redis
    agent, _ = live.agents
    await _ingest(live, agent)
    answer = await client.recall(agent, "staging deploy timeout", k=1, record_usage=False)
    (top,) = answer.items
    key = live.keys.memory(agent, top.id)
    before = float(await redis_client.hget(key, "confidence"))

    positive = OutcomeV1(
        agent_id=agent, ts=BASE_TS + 60_000, outcome="positive", memory_ids=[top.id], event_id="o-1"
    )
    for _ in range(2):  # a redelivery must not apply it twice
        await client.publish_outcome(positive)
    sentinel = OutcomeV1(
        agent_id=agent,
        ts=BASE_TS + 61_000,
        outcome="validated",
        memory_ids=[top.id],
        event_id="o-2",
    )
    await client.publish_outcome(sentinel)

    async def validated() -> Any:
        count = await redis_client.hget(key, "validated_count")
        return count if count is not None and int(count) >= 1 else None

    await live.eventually(validated, timeout=15)
    assert float(await redis_client.hget(key, "confidence")) == pytest.approx(before + 0.1)
    assert float(await redis_client.hget(key, "strength")) == 2.0
    usage = live.keys.usage(agent, top.id)
    assert int(await redis_client.hget(usage, "last_accessed")) == BASE_TS + 60_000


SAD_LINES = (
    "disk full on node seven and the writes are failing",
    "the import job crashed when storage on node seven filled up",
    "paged at night because the disk on node seven was exhausted",
    "free disk space alarm below one percent on node seven",
    "we lost the nightly report since the node seven disk filled",
)


async def test_anti_rumination_through_the_pipeline(live: Live) -> None:
    client = live.client
    agent, _ = live.agents
    glad = EpisodeV1(
        agent_id=agent, ts=BASE_TS, event_id="glad", tick=90, importance=0.9,
        text="celebrated a calm week with the storage cluster healthy", affect={"pleasure": 0.7},
    )  # fmt: skip
    await client.publish_episode(glad)
    for n, text in enumerate(SAD_LINES):
        await client.publish_episode(
            EpisodeV1(
                agent_id=agent,
                ts=BASE_TS + (n + 1) * 1_000,
                event_id=f"sad{n}",
                tick=101 + n,
                importance=0.9,
                text=text,
                affect={"pleasure": -0.8, "arousal": 0.6},
            )
        )

    async def caught_up() -> Any:
        answer = await client.recall(agent, "disk", k=1, record_usage=False)
        return answer if answer.watermark == BASE_TS + len(SAD_LINES) * 1_000 else None

    await live.eventually(caught_up, timeout=20)  # that probe served no window
    first = await client.recall(agent, "disk full on node seven", k=4, explain=True)
    again = await client.recall(agent, "disk full on node seven", k=4)
    injected = [item for item in first.items if "anti-rumination" in (item.reasons or ())]
    assert [item.source_event_id for item in injected] == ["glad"]
    assert first.items[-1].source_event_id == "glad"
    assert injected[0].scores is not None and injected[0].scores["contrarian"] == 1.0
    assert not any("anti-rumination" in (item.reasons or ()) for item in again.items)
    windows = live.keys.contrarian_window(agent)

    async def served() -> Any:
        # Recall is a read: the window served is a journal entry, applied shortly.
        return await live.redis.zscore(windows, WINDOW_MEMBER)

    assert await live.eventually(served, timeout=10) == 1.0  # ticks 100-199
