"""The SDK's failure modes: clean timeouts and rejected requests."""

from __future__ import annotations

import asyncio
import time
import uuid

import orjson
import pytest
from aiokafka import TopicPartition

from grimoire.infra.settings import Settings
from grimoire.topics.client import GrimoireClient, RecallFailed, RecallTimeout
from grimoire.topics.options import RecallBudgets


async def test_recall_without_a_worker_times_out_cleanly(settings: Settings) -> None:
    # A prefix no worker serves: the request is published but never answered.
    async with GrimoireClient(settings.bootstrap_servers, f"nobody{uuid.uuid4().hex[:6]}") as sdk:
        started = time.monotonic()
        with pytest.raises(RecallTimeout):
            await sdk.recall("agent-x", "anything", timeout=0.5)
        assert time.monotonic() - started < 5
        assert sdk._pending == {}  # no leaked waiters


async def test_a_rejected_request_is_answered_with_its_reason(client: GrimoireClient) -> None:
    with pytest.raises(RecallFailed, match="invalid_value"):
        await client.recall("agent-x", "anything", k=0, timeout=10)


async def test_a_budget_above_the_workers_ceiling_is_answered_with_its_reason(
    client: GrimoireClient,
) -> None:
    # Ceilings are the worker's configuration: the SDK sends, the worker says no.
    with pytest.raises(RecallFailed, match="invalid_value: 'max_items'"):
        await client.recall("agent-x", "anything", budgets=RecallBudgets(max_items=10_000))


async def test_unknown_correlation_ids_on_the_reply_topic_are_ignored(
    client: GrimoireClient,
) -> None:
    stray = orjson.dumps({"correlation_id": "not-mine", "items": []})
    await client.publish_raw(client.reply_topic, "agent-x", stray)
    await client.publish_raw(client.reply_topic, "agent-x", b"not json at all")
    answer = await client.recall("agent-x", "still works", timeout=10)
    assert answer.items == ()


async def test_the_reply_topic_is_fetched_only_while_a_reply_is_awaited(
    client: GrimoireClient,
) -> None:
    # An idle client would poll the broker every fetch wait, all its life.
    replies = TopicPartition(client.reply_topic, 0)
    assert client._consumer is not None
    await client.recall("agent-x", "before", timeout=10)
    assert client._consumer.paused() == {replies}
    # A reply produced while paused is still read: the position did not move.
    stray = orjson.dumps({"correlation_id": "not-mine", "items": []})
    await client.publish_raw(client.reply_topic, "agent-x", stray)
    first, second = await asyncio.gather(
        client.recall("agent-x", "one", timeout=10), client.recall("agent-x", "two", timeout=10)
    )
    assert first.items == second.items == ()
    assert client._consumer.paused() == {replies}
    assert client._pending == {}
