"""Tenant keys on the Kafka side, without services: the recall handler and the
sequencer (commands) with an Authenticator over the reference key store.

A recall request without a key, with a key for another agent, a revoked key or a
wrong secret gets an `unauthorized` error reply on its reply topic and an
`unauthorized` dead letter, both counted; a prefix key, an admin key or switched
off answers. A refused command is dead-lettered and never journaled; an admitted
one is journaled without its key. No secret reaches a dead letter."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from grimoire.agents.handlers.auth import (
    API_KEY_HEADER,
    presented_key,
    redacted,
    without_api_key,
)
from grimoire.agents.handlers.recall import RecallHandler
from grimoire.agents.journal.cipher import SealedPayload, open_sealed
from grimoire.agents.journal.sequencer import Sequencer
from grimoire.agents.ports import InputMessage
from grimoire.streams.journal.entry import EntryKind, associated_data, decode_entry
from grimoire.streams.trust.tenancy import TenantScope, format_token, parse_token
from grimoire.tables.testing.api_keys import InMemoryApiKeyStore, InMemoryAuthMetrics
from grimoire.tables.testing.keystore import InMemoryKeyStore
from grimoire.tables.trust.api_keys import Authenticator
from tests.support.handlers import (
    REPLY_TO,
    TOPICS,
    TS,
    RecordingUsage,
    Rig,
    recall_request,
    seeded,
)


class Keys:
    """A reference key store with one key per kind of scope, and their tokens."""

    def __init__(self) -> None:
        self.store = InMemoryApiKeyStore()
        self.metrics = InMemoryAuthMetrics()
        self.tokens: dict[str, str] = {}
        self.ids: dict[str, str] = {}

    async def add(self, name: str, scope: TenantScope) -> str:
        record, token = await self.store.create(scope, name, now_ms=TS)
        self.tokens[name], self.ids[name] = token, record.key_id
        return token

    def authenticator(self, *, enabled: bool = True) -> Authenticator:
        # No cache: each test sees the store as it is.
        return Authenticator(self.store, enabled=enabled, ttl_s=0.0)


async def keys() -> Keys:
    made = Keys()
    await made.add("agent-1", TenantScope(agent_ids=frozenset({"agent-1"})))
    await made.add("agent-2", TenantScope(agent_ids=frozenset({"agent-2"})))
    await made.add("fleet", TenantScope(agent_prefix="agent-"))
    await made.add("admin", TenantScope(admin=True))
    return made


def guarded(rig: Rig, made: Keys, *, enabled: bool = True) -> RecallHandler:
    """The rig's recall handler, checking keys."""
    return RecallHandler(
        rig.store,
        rig.embedder,
        rig.sink,
        TOPICS,
        usage=RecordingUsage(rig),
        authenticator=made.authenticator(enabled=enabled),
        auth_metrics=made.metrics,
    )


def with_header(message: InputMessage, token: str) -> InputMessage:
    return InputMessage(
        message.value,
        message.topic,
        message.partition,
        message.offset,
        headers=(("other", b"x"), (API_KEY_HEADER, token.encode())),
    )


def assert_refused(rig: Rig, made: Keys, outcome: str) -> dict[str, Any]:
    """One error reply and one dead letter, both `unauthorized`, and the counts."""
    (reply,) = rig.on(REPLY_TO)
    assert reply["correlation_id"] == "corr-1"
    assert reply["items"] == []
    assert reply["error"].startswith(f"unauthorized: {outcome}")
    (dead,) = rig.on(TOPICS.dead_letters)
    assert (dead["reason"], dead["field"], dead["agent_id"]) == (
        "unauthorized",
        "api_key",
        "agent-1",
    )
    assert dead["detail"].startswith(outcome)
    assert dict(made.metrics.counts) == {f"auth_{outcome}": 1, "auth_refused_kafka": 1}
    assert rig.recorded == []  # nothing served, nothing counted as used
    for token in made.tokens.values():
        _, secret = parse_token(token) or ("", "")
        assert all(secret not in value.decode() for _, _, value in rig.sink.sent)
    return dead


async def test_a_request_without_a_key_is_refused_and_dead_lettered() -> None:
    rig, made = await seeded(), await keys()
    await guarded(rig, made).handle(recall_request())
    dead = assert_refused(rig, made, "unauthenticated")
    assert "no API key" in dead["detail"]


async def test_a_key_for_another_agent_is_forbidden() -> None:
    rig, made = await seeded(), await keys()
    await guarded(rig, made).handle(recall_request(api_key=made.tokens["agent-2"]))
    dead = assert_refused(rig, made, "forbidden")
    assert "agent-1" in dead["detail"]
    # The dead letter's preview keeps the key id, never the secret.
    assert f"gmk_{made.ids['agent-2']}.***" in dead["payload"]


@pytest.mark.parametrize("name", ["agent-1", "fleet", "admin"])
async def test_keys_that_reach_the_agent_are_answered(name: str) -> None:
    rig, made = await seeded(), await keys()
    await guarded(rig, made).handle(recall_request(api_key=made.tokens[name]))
    (reply,) = rig.on(REPLY_TO)
    assert "error" not in reply
    assert {item["agent_id"] for item in reply["items"]} == {"agent-1"}
    assert rig.on(TOPICS.dead_letters) == []
    assert not made.metrics.counts


async def test_the_key_may_come_as_a_header() -> None:
    rig, made = await seeded(), await keys()
    await guarded(rig, made).handle(with_header(recall_request(), made.tokens["fleet"]))
    (reply,) = rig.on(REPLY_TO)
    assert "error" not in reply and reply["items"]


async def test_the_payload_key_wins_over_the_header() -> None:
    rig, made = await seeded(), await keys()
    message = with_header(recall_request(api_key=made.tokens["agent-2"]), made.tokens["admin"])
    await guarded(rig, made).handle(message)
    assert_refused(rig, made, "forbidden")


async def test_a_revoked_key_is_refused() -> None:
    rig, made = await seeded(), await keys()
    await made.store.revoke(made.ids["agent-1"])
    await guarded(rig, made).handle(recall_request(api_key=made.tokens["agent-1"]))
    dead = assert_refused(rig, made, "unauthenticated")
    assert "revoked" in dead["detail"]


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        (format_token("ab" * 8, "s" * 43), "unknown API key"),
        ("gmk_garbage", "malformed API key"),
        (12345, "'api_key' must be a string"),
    ],
)
async def test_wrong_unknown_and_malformed_keys_are_unauthenticated(
    value: object, detail: str
) -> None:
    rig, made = await seeded(), await keys()
    await guarded(rig, made).handle(recall_request(api_key=value))
    dead = assert_refused(rig, made, "unauthenticated")
    assert detail in dead["detail"]


async def test_a_wrong_secret_is_unauthenticated() -> None:
    rig, made = await seeded(), await keys()
    wrong = format_token(made.ids["agent-1"], "w" * 43)
    await guarded(rig, made).handle(recall_request(api_key=wrong))
    dead = assert_refused(rig, made, "unauthenticated")
    assert "wrong API key secret" in dead["detail"]


async def test_switched_off_every_request_is_answered() -> None:
    rig, made = await seeded(), await keys()
    await guarded(rig, made, enabled=False).handle(recall_request())
    (reply,) = rig.on(REPLY_TO)
    assert "error" not in reply and reply["items"]
    assert not made.metrics.counts


async def test_a_refusal_outside_the_reply_namespace_gets_no_reply() -> None:
    # The request is refused for its reply_to before its key is looked at: the
    # dead letter says why, and no reply leaves the namespace.
    rig, made = await seeded(), await keys()
    await guarded(rig, made).handle(recall_request(reply_to="grimoire.memory-events"))
    assert rig.on("grimoire.memory-events") == []
    (dead,) = rig.on(TOPICS.dead_letters)
    assert (dead["reason"], dead["field"]) == ("invalid_value", "reply_to")


async def test_an_invalid_request_s_dead_letter_hides_the_secret_too() -> None:
    rig, made = await seeded(), await keys()
    await guarded(rig, made).handle(recall_request(api_key=made.tokens["admin"], k=0))
    (dead,) = rig.on(TOPICS.dead_letters)
    assert dead["reason"] == "invalid_value"
    _, secret = parse_token(made.tokens["admin"]) or ("", "")
    assert secret not in dead["payload"]
    assert f"gmk_{made.ids['admin']}.***" in dead["payload"]


# -- commands: checked by the sequencer, before anything is journaled --------------


def command(**fields: Any) -> InputMessage:
    data = {"agent_id": "agent-1", "command": "pin", "memory_id": "m-1", "ts": TS, **fields}
    return InputMessage(orjson.dumps(data), TOPICS.commands, partition=0, offset=3)


def sequencer(rig: Rig, made: Keys, journal_keys: InMemoryKeyStore, **kw: Any) -> Sequencer:
    return Sequencer(
        journal_keys,
        rig.sink,
        TOPICS,
        authenticator=made.authenticator(**kw),
        auth_metrics=made.metrics,
    )


async def journaled(rig: Rig, journal_keys: InMemoryKeyStore) -> list[dict[str, Any]]:
    """The journal's entries, opened."""
    opened = []
    for raw in rig.sink.on(TOPICS.journal):
        entry = decode_entry(raw)
        key = await journal_keys.key(entry.agent_id, entry.key_id)
        assert key is not None
        sealed = SealedPayload(entry.key_id, entry.nonce, entry.ciphertext)
        plain = open_sealed(
            key, sealed, associated=associated_data(entry.agent_id, entry.key_id, entry.seq)
        )
        opened.append({"kind": entry.kind, **orjson.loads(plain)})
    return opened


@pytest.mark.parametrize(
    ("fields", "outcome"),
    [
        ({}, "unauthenticated"),
        ({"api_key": "agent-2"}, "forbidden"),
        ({"api_key": "revoked"}, "unauthenticated"),
    ],
)
async def test_a_refused_command_is_dead_lettered_and_never_journaled(
    fields: dict[str, str], outcome: str
) -> None:
    rig, made, journal_keys = Rig(), await keys(), InMemoryKeyStore()
    if fields.get("api_key") == "revoked":
        await made.store.revoke(made.ids["agent-1"])
        fields = {"api_key": made.tokens["agent-1"]}
    elif "api_key" in fields:
        fields = {"api_key": made.tokens[fields["api_key"]]}
    report = await sequencer(rig, made, journal_keys).append(EntryKind.COMMAND, [command(**fields)])
    assert (report.journaled, report.dead_lettered) == (0, 1)
    assert rig.sink.on(TOPICS.journal) == []
    (dead,) = rig.on(TOPICS.dead_letters)
    assert (dead["reason"], dead["agent_id"], dead["source_topic"]) == (
        "unauthorized",
        "agent-1",
        TOPICS.commands,
    )
    assert dead["detail"].startswith(outcome)
    assert dict(made.metrics.counts) == {f"auth_{outcome}": 1, "auth_refused_kafka": 1}
    assert await journal_keys.next_sequence("agent-1") == 1  # no number was spent on it


@pytest.mark.parametrize("name", ["agent-1", "fleet", "admin"])
async def test_an_admitted_command_is_journaled_without_its_key(name: str) -> None:
    rig, made, journal_keys = Rig(), await keys(), InMemoryKeyStore()
    report = await sequencer(rig, made, journal_keys).append(
        EntryKind.COMMAND, [command(api_key=made.tokens[name])]
    )
    assert (report.journaled, report.dead_lettered) == (1, 0)
    (entry,) = await journaled(rig, journal_keys)
    assert entry == {
        "kind": EntryKind.COMMAND,
        "agent_id": "agent-1",
        "command": "pin",
        "memory_id": "m-1",
        "ts": TS,
    }
    assert rig.on(TOPICS.dead_letters) == []


async def test_a_command_s_header_key_is_checked_and_not_journaled() -> None:
    rig, made, journal_keys = Rig(), await keys(), InMemoryKeyStore()
    plain = command()
    report = await sequencer(rig, made, journal_keys).append(
        EntryKind.COMMAND, [with_header(plain, made.tokens["fleet"])]
    )
    assert report.journaled == 1
    (raw,) = rig.sink.on(TOPICS.journal)
    assert made.tokens["fleet"].encode() not in raw


async def test_switched_off_commands_pass_and_still_lose_their_key() -> None:
    rig, made, journal_keys = Rig(), await keys(), InMemoryKeyStore()
    seq = sequencer(rig, made, journal_keys, enabled=False)
    report = await seq.append(
        EntryKind.COMMAND, [command(), command(api_key=made.tokens["agent-2"])]
    )
    assert (report.journaled, report.dead_lettered) == (2, 0)
    entries = await journaled(rig, journal_keys)
    assert all("api_key" not in entry for entry in entries)
    assert not made.metrics.counts


async def test_other_inputs_are_not_checked() -> None:
    # Ingest, outcomes and maintenance are journaled without a key: only commands
    # (and recall requests) act for a tenant.
    rig, made, journal_keys = Rig(), await keys(), InMemoryKeyStore()
    payload = orjson.dumps({"agent_id": "agent-1", "ts": TS, "text": "hello"})
    message = InputMessage(payload, TOPICS.episodes, partition=0, offset=1)
    report = await sequencer(rig, made, journal_keys).append(EntryKind.EPISODE, [message])
    assert report.journaled == 1
    (entry,) = await journaled(rig, journal_keys)
    assert entry["text"] == "hello"


async def test_a_refused_command_in_a_batch_leaves_the_others_in_order() -> None:
    rig, made, journal_keys = Rig(), await keys(), InMemoryKeyStore()
    batch = [
        command(api_key=made.tokens["agent-1"], memory_id="m-1"),
        command(api_key=made.tokens["agent-2"], memory_id="m-2"),
        command(api_key=made.tokens["fleet"], memory_id="m-3"),
    ]
    report = await sequencer(rig, made, journal_keys).append(EntryKind.COMMAND, batch)
    assert (report.journaled, report.dead_lettered) == (2, 1)
    assert [e["memory_id"] for e in await journaled(rig, journal_keys)] == ["m-1", "m-3"]
    assert [decode_entry(raw).seq for raw in rig.sink.on(TOPICS.journal)] == [1, 2]


# -- the helpers ------------------------------------------------------------------


def test_presented_key_prefers_the_payload_then_the_header() -> None:
    message = with_header(command(), "from-header")
    assert presented_key({"api_key": "from-payload"}, message) == "from-payload"
    assert presented_key({}, message) == "from-header"
    assert presented_key({}, command()) is None
    upper = InputMessage(b"{}", "t", headers=(("Grimoire-Api-Key", b"k"),))
    assert presented_key({}, upper) == "k"


def test_redaction_masks_every_secret_and_keeps_the_rest() -> None:
    token = format_token("ab" * 8, "s" * 43)
    raw = f'{{"api_key": "{token}", "note": "{token}", "x": 1}}'.encode()
    masked = redacted(InputMessage(raw, "t"))
    assert b"s" * 43 not in masked.value
    assert masked.value.count(b"gmk_" + b"ab" * 8 + b".***") == 2
    untouched = InputMessage(b'{"x": 1}', "t")
    assert redacted(untouched) is untouched


def test_without_api_key_leaves_other_payloads_byte_for_byte() -> None:
    raw = b'{"agent_id":"a",  "command":"forget"}'
    assert without_api_key(raw, orjson.loads(raw)) is raw
    keyed = b'{"agent_id":"a","api_key":"gmk_x","command":"forget"}'
    assert orjson.loads(without_api_key(keyed, orjson.loads(keyed))) == {
        "agent_id": "a",
        "command": "forget",
    }
