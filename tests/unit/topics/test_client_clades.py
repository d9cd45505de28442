"""The SDK's clade commands without a broker: `publish` and `unpublish` send a
`CommandV1` on the commands topic keyed by the agent, with a fresh event id unless
given one, the clade only when named, and the key in the header (the command's own
when given, else the client's), never in the payload."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from grimoire.topics.client import API_KEY_HEADER, GrimoireClient, clade_command

TOKEN = "gmk_0123456789abcdef." + "s" * 43
CALLER = "gmk_fedcba9876543210." + "o" * 43


class Producer:
    """Stands in for aiokafka's producer: keeps every record with its headers."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict[str, Any], dict[str, bytes]]] = []

    async def send_and_wait(
        self, topic: str, *, value: bytes, key: bytes, headers: Any = None
    ) -> None:
        self.sent.append((topic, key.decode(), orjson.loads(value), dict(headers or ())))


def client_on(api_key: str | None = TOKEN) -> tuple[GrimoireClient, Producer]:
    client = GrimoireClient("127.0.0.1:1", "gm", client_id="c1", api_key=api_key)
    producer = Producer()
    client._producer = producer  # type: ignore[assignment]
    return client, producer


async def test_publish_sends_a_publish_command_keyed_by_the_agent() -> None:
    client, producer = client_on()
    sent = await client.publish("golem-1", "m-1", clade="ops", event_id="e-1", ts=1_790_000_000_000)
    ((topic, key, payload, headers),) = producer.sent
    assert (topic, key) == ("gm.commands", "golem-1")
    assert payload == {
        "agent_id": "golem-1",
        "command": "publish",
        "memory_id": "m-1",
        "clade": "ops",
        "ts": 1_790_000_000_000,
        "event_id": "e-1",
        "schema": "grimoire.command/1",
    }
    assert headers == {API_KEY_HEADER: TOKEN.encode()}
    assert sent.event_id == "e-1" and sent.api_key is None


async def test_unpublish_without_a_clade_or_event_id() -> None:
    client, producer = client_on()
    first = await client.unpublish("golem-1", "m-1")
    second = await client.unpublish("golem-1", "m-1")
    (_, _, payload, _), (_, _, again, _) = producer.sent
    assert payload["command"] == "unpublish"
    assert "clade" not in payload  # every clade the agent belongs to
    # A fresh event id each time: repeating a command is a new command.
    assert payload["event_id"].startswith("sdk-") and payload["event_id"] != again["event_id"]
    assert (first.event_id, second.event_id) == (payload["event_id"], again["event_id"])


async def test_a_command_s_own_key_goes_in_the_header_never_the_payload() -> None:
    client, producer = client_on(api_key=None)
    await client.publish("golem-1", "m-1", api_key=CALLER)
    ((_, _, payload, headers),) = producer.sent
    assert headers == {API_KEY_HEADER: CALLER.encode()}
    assert "api_key" not in payload


async def test_without_any_key_no_header() -> None:
    client, producer = client_on(api_key=None)
    await client.publish("golem-1", "m-1")
    assert producer.sent[0][3] == {}


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (("retract", "golem-1", "m-1"), {}),
        (("publish", "", "m-1"), {}),
        (("publish", "golem-1", " "), {}),
        (("unpublish", "golem-1", "m-1"), {"clade": ""}),
    ],
)
def test_a_command_that_is_no_clade_command_is_refused(
    args: tuple[str, str, str], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(ValueError):
        clade_command(*args, **kwargs)


def test_the_command_as_built() -> None:
    command = clade_command("publish", "golem-1", "m-1", clade="ops", event_id="e-1")
    assert (command.command, command.memory_id, command.clade, command.event_id) == (
        "publish",
        "m-1",
        "ops",
        "e-1",
    )
