"""The SDK and tenant keys, without a broker: `GrimoireClient(api_key=...)` puts its
key on every record it publishes, as the `grimoire-api-key` header and never in
the payload; its reply topic is its key's own; a command's own key goes in the
header instead of the client's; and a refused key comes back as
`RecallUnauthorized` (a `RecallFailed`)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from grimoire.topics import RecallFailed, RecallUnauthorized
from grimoire.topics.client import (
    API_KEY_HEADER,
    GrimoireClient,
    key_owns_reply_topic,
    keyed_client_id,
)
from grimoire.topics.schemas import (
    CommandV1,
    EpisodeV1,
    FactV1,
    OutcomeV1,
    ToolEventV1,
    TranscriptV1,
)

KEY_ID = "0123456789abcdef"
TOKEN = f"gmk_{KEY_ID}." + "s" * 43
OTHER = "gmk_fedcba9876543210." + "o" * 43


class Producer:
    """Stands in for aiokafka's producer: keeps every record with its headers, and
    answers requests (anything with a correlation id) with `reply` (None: never)."""

    def __init__(self, client: GrimoireClient, reply: dict[str, Any] | None) -> None:
        self.client = client
        self.reply = reply
        self.sent: list[tuple[str, str, dict[str, Any], dict[str, bytes]]] = []

    async def _record(
        self, topic: str, value: bytes, key: bytes, headers: list[tuple[str, bytes]] | None
    ) -> None:
        payload = orjson.loads(value)
        self.sent.append((topic, key.decode(), payload, dict(headers or ())))
        if self.reply is not None and "correlation_id" in payload:
            future = self.client._pending[payload["correlation_id"]]
            future.set_result({"correlation_id": payload["correlation_id"], **self.reply})

    async def send_and_wait(
        self, topic: str, *, value: bytes, key: bytes, headers: Any = None
    ) -> None:
        await self._record(topic, value, key, headers)

    async def send(self, topic: str, *, value: bytes, key: bytes, headers: Any = None) -> None:
        await self._record(topic, value, key, headers)


def client_on(**kw: Any) -> tuple[GrimoireClient, Producer]:
    reply = kw.pop("reply", {"agent_id": "a", "items": []})
    client = GrimoireClient("127.0.0.1:1", "gm", client_id="c1", **kw)
    producer = Producer(client, reply)
    client._producer = producer  # type: ignore[assignment]
    return client, producer


async def test_every_record_carries_the_key_as_a_header_never_in_the_payload() -> None:
    client, producer = client_on(api_key=TOKEN)
    await client.recall("a", "q", timeout=1.0)
    await client.facts_valid_at("a", 3, timeout=1.0)
    await client.send_command(CommandV1(agent_id="a", command="forget"))
    await client.publish_episode(EpisodeV1(agent_id="a", ts=1, text="t"))
    await client.publish_tool_event(ToolEventV1(agent_id="a", ts=1, tool="sh"))
    await client.publish_transcript(TranscriptV1(agent_id="a", ts=1, turn_id="t", line={}))
    await client.publish_outcome(OutcomeV1(agent_id="a", ts=1, outcome="success"))
    await client.assert_fact(
        FactV1(agent_id="a", ts=1, subject="s", predicate="p", object="o", valid_from=1)
    )
    await client.request_maintenance("a")
    topics = client.topics
    assert [topic for topic, *_ in producer.sent] == [
        topics.recall_requests,
        topics.fact_queries,
        topics.commands,
        topics.episodes,
        topics.tool_events,
        topics.transcripts,
        topics.outcomes,
        topics.facts,
        topics.maintenance,
    ]
    for _, _, payload, headers in producer.sent:
        assert headers == {API_KEY_HEADER: TOKEN.encode()}
        assert "api_key" not in payload
    (_, _, request, _), (_, _, query, _) = producer.sent[:2]
    assert request["reply_to"] == query["reply_to"] == f"gm.replies.{KEY_ID}-c1"


async def test_the_reply_topic_is_the_key_s_own() -> None:
    client, _ = client_on(api_key=TOKEN)
    assert client.reply_topic == f"gm.replies.{KEY_ID}-c1"
    assert key_owns_reply_topic(KEY_ID, client.reply_topic, client.topics.reply_namespace)
    assert not key_owns_reply_topic("fedcba9876543210", client.reply_topic, "gm.replies.")
    # A key id is never taken for a longer one's prefix.
    assert not key_owns_reply_topic(KEY_ID[:8], client.reply_topic, "gm.replies.")
    assert keyed_client_id(TOKEN, f"{KEY_ID}-c1") == f"{KEY_ID}-c1"  # not prefixed twice
    assert keyed_client_id("not a token", "c1") == "c1"
    assert keyed_client_id(None, "c1") == "c1"


async def test_a_command_s_own_key_goes_in_its_header() -> None:
    client, producer = client_on(api_key=TOKEN)
    await client.send_command(CommandV1(agent_id="a", command="forget", api_key=OTHER))
    ((_, _, payload, headers),) = producer.sent
    assert headers == {API_KEY_HEADER: OTHER.encode()}
    assert "api_key" not in payload


async def test_a_keyless_client_s_command_may_still_carry_a_key() -> None:
    client, producer = client_on()
    await client.send_command(CommandV1(agent_id="a", command="forget", api_key=OTHER))
    await client.publish_raw("gm.episodes", "a", b"{}", api_key=OTHER)
    assert [headers for *_, headers in producer.sent] == [{API_KEY_HEADER: OTHER.encode()}] * 2


async def test_without_a_key_nothing_is_added() -> None:
    client, producer = client_on()
    await client.recall("a", "q", timeout=1.0)
    await client.send_command(CommandV1(agent_id="a", command="forget"))
    assert all("api_key" not in payload for _, _, payload, _ in producer.sent)
    assert all(headers == {} for *_, headers in producer.sent)
    assert client.reply_topic == "gm.replies.c1"


async def test_a_refused_key_raises_recall_unauthorized() -> None:
    reply = {"agent_id": "a", "items": [], "error": "unauthorized: forbidden: no"}
    client, _ = client_on(reply=reply, api_key=TOKEN)
    with pytest.raises(RecallUnauthorized, match="forbidden") as raised:
        await client.recall("a", "q", timeout=1.0)
    assert isinstance(raised.value, RecallFailed)


async def test_other_errors_stay_recall_failed() -> None:
    reply = {"agent_id": "a", "items": [], "error": "invalid_value: 'k' must be >= 1"}
    client, _ = client_on(reply=reply)
    with pytest.raises(RecallFailed) as raised:
        await client.recall("a", "q", timeout=1.0)
    assert not isinstance(raised.value, RecallUnauthorized)


async def test_a_refusal_means_the_pipeline_is_up() -> None:
    # wait_until_ready probes with a recall: a worker that refuses the key answered.
    reply = {"agent_id": "_probe", "items": [], "error": "unauthorized: forbidden: no"}
    client, producer = client_on(reply=reply, api_key=TOKEN)
    await client.wait_until_ready(timeout=2.0)
    assert len(producer.sent) == 1
