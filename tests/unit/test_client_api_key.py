"""The SDK and tenant keys, without a broker: `GrimoireClient(api_key=...)` puts its
key on every recall request and command it sends, and a refused key comes back as
`RecallUnauthorized` (a `RecallFailed`)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from grimoire.topics import RecallFailed, RecallUnauthorized
from grimoire.topics.client import GrimoireClient
from grimoire.topics.schemas import CommandV1

TOKEN = "gmk_0123456789abcdef." + "s" * 43


class Wire:
    """Stands in for the producer: keeps what was published, and answers recall
    requests with `reply` (None: no answer)."""

    def __init__(self, client: GrimoireClient, reply: dict[str, Any] | None = None) -> None:
        self.client = client
        self.reply = reply
        self.sent: list[tuple[str, str, dict[str, Any]]] = []

    async def publish_raw(self, topic: str, key: str, value: bytes, *, wait: bool = True) -> None:
        payload = orjson.loads(value)
        self.sent.append((topic, key, payload))
        if self.reply is not None and "correlation_id" in payload:
            future = self.client._pending[payload["correlation_id"]]
            future.set_result({"correlation_id": payload["correlation_id"], **self.reply})


def client_on(monkeypatch: pytest.MonkeyPatch, **kw: Any) -> tuple[GrimoireClient, Wire]:
    reply = kw.pop("reply", {"agent_id": "a", "items": []})
    client = GrimoireClient("127.0.0.1:1", "gm", client_id="c1", **kw)
    wire = Wire(client, reply)
    monkeypatch.setattr(client, "publish_raw", wire.publish_raw)
    return client, wire


async def test_recall_requests_and_commands_carry_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, wire = client_on(monkeypatch, api_key=TOKEN)
    await client.recall("a", "q", timeout=1.0)
    await client.send_command(CommandV1(agent_id="a", command="forget"))
    (_, _, request), (_, _, command) = wire.sent
    assert request["api_key"] == TOKEN
    assert request["reply_to"] == "gm.replies.c1"
    assert command["api_key"] == TOKEN


async def test_a_command_s_own_key_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    client, wire = client_on(monkeypatch, api_key=TOKEN)
    await client.send_command(CommandV1(agent_id="a", command="forget", api_key="gmk_other"))
    assert wire.sent[0][2]["api_key"] == "gmk_other"


async def test_without_a_key_nothing_is_added(monkeypatch: pytest.MonkeyPatch) -> None:
    client, wire = client_on(monkeypatch)
    await client.recall("a", "q", timeout=1.0)
    await client.send_command(CommandV1(agent_id="a", command="forget"))
    assert all("api_key" not in payload for _, _, payload in wire.sent)


async def test_a_refused_key_raises_recall_unauthorized(monkeypatch: pytest.MonkeyPatch) -> None:
    reply = {"agent_id": "a", "items": [], "error": "unauthorized: forbidden: no"}
    client, _ = client_on(monkeypatch, reply=reply)
    with pytest.raises(RecallUnauthorized, match="forbidden") as raised:
        await client.recall("a", "q", timeout=1.0)
    assert isinstance(raised.value, RecallFailed)


async def test_other_errors_stay_recall_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    reply = {"agent_id": "a", "items": [], "error": "invalid_value: 'k' must be >= 1"}
    client, _ = client_on(monkeypatch, reply=reply)
    with pytest.raises(RecallFailed) as raised:
        await client.recall("a", "q", timeout=1.0)
    assert not isinstance(raised.value, RecallUnauthorized)


async def test_a_refusal_means_the_pipeline_is_up(monkeypatch: pytest.MonkeyPatch) -> None:
    # wait_until_ready probes with a recall: a worker that refuses the key answered.
    reply = {"agent_id": "_probe", "items": [], "error": "unauthorized: unauthenticated: no"}
    client, wire = client_on(monkeypatch, reply=reply)
    await client.wait_until_ready(timeout=2.0)
    assert len(wire.sent) == 1
