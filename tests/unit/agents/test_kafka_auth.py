"""Tenant keys on the Kafka side, without services: the recall and fact-query
handlers and the sequencer (every input kind) with an Authenticator over the
reference key store.

A recall request without a key, with a revoked key or a wrong secret is
dead-lettered `unauthorized`, counted, and answered nowhere. A good key must name
one of its own reply topics (`{namespace}<key id>-…`; an admin key any in the
namespace): otherwise the request is refused and nothing is written to the topic
it named. A good key that does not reach the agent gets an `unauthorized` error
reply on its own reply topic. A prefix key, an admin key or switched off answers.
Every journaled input (episode, tool event, transcript, outcome, fact, command)
whose key does not reach its agent is dead-lettered and never journaled; an
admitted one is journaled without its key; one batch looks a key up once. No
secret reaches a dead letter."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from grimoire.agents.auth import (
    API_KEY_HEADER,
    presented_key,
    redacted,
    without_api_key,
)
from grimoire.agents.handlers.facts import FactQueryHandler
from grimoire.agents.handlers.recall import RecallHandler
from grimoire.agents.journal.apply import with_agent
from grimoire.agents.journal.cipher import SealedPayload, open_sealed
from grimoire.agents.journal.sequencer import Sequencer
from grimoire.agents.ports import InputMessage
from grimoire.streams.journal.entry import EntryKind, associated_data, decode_entry
from grimoire.streams.trust.tenancy import TenantScope, format_token, parse_token
from grimoire.tables.testing.api_keys import InMemoryApiKeyStore, InMemoryAuthMetrics
from grimoire.tables.testing.fact_store import InMemoryFactStore
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

    def reply_topic(self, name: str) -> str:
        """One of the key's own reply topics (what the SDK names with that key)."""
        return f"{TOPICS.reply_namespace}{self.ids[name]}-c1"

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


def keyed(made: Keys, name: str, **fields: Any) -> InputMessage:
    """A recall request with `name`'s key (in its header), on `name`'s reply topic."""
    message = recall_request(reply_to=made.reply_topic(name), **fields)
    return with_header(message, made.tokens[name])


def with_header(message: InputMessage, token: str) -> InputMessage:
    return InputMessage(
        message.value,
        message.topic,
        message.partition,
        message.offset,
        headers=(("other", b"x"), (API_KEY_HEADER, token.encode())),
    )


def replies(rig: Rig) -> list[tuple[str, dict[str, Any]]]:
    """Everything sent to any reply topic."""
    return [
        (topic, orjson.loads(value))
        for topic, _, value in rig.sink.sent
        if topic.startswith(TOPICS.reply_namespace)
    ]


def assert_refused(
    rig: Rig, made: Keys, outcome: str, *, replied_on: str | None = None, field: str = "api_key"
) -> dict[str, Any]:
    """One `unauthorized` dead letter and its counts; one error reply on
    `replied_on`, or none anywhere."""
    if replied_on is None:
        assert replies(rig) == []
    else:
        ((topic, reply),) = replies(rig)
        assert topic == replied_on
        assert reply["correlation_id"] == "corr-1"
        assert reply["items"] == []
        assert reply["error"].startswith(f"unauthorized: {outcome}")
    (dead,) = rig.on(TOPICS.dead_letters)
    assert (dead["reason"], dead["field"], dead["agent_id"]) == ("unauthorized", field, "agent-1")
    assert dead["detail"].startswith(outcome)
    assert dict(made.metrics.counts) == {f"auth_{outcome}": 1, "auth_refused_kafka": 1}
    assert rig.recorded == []  # nothing served, nothing counted as used
    for token in made.tokens.values():
        _, secret = parse_token(token) or ("", "")
        assert all(secret not in value.decode() for _, _, value in rig.sink.sent)
    return dead


async def test_a_request_without_a_key_is_dead_lettered_and_answered_nowhere() -> None:
    rig, made = await seeded(), await keys()
    await guarded(rig, made).handle(recall_request())
    dead = assert_refused(rig, made, "unauthenticated")
    assert "no API key" in dead["detail"]


async def test_a_key_for_another_agent_is_forbidden_on_its_own_reply_topic() -> None:
    rig, made = await seeded(), await keys()
    message = recall_request(api_key=made.tokens["agent-2"], reply_to=made.reply_topic("agent-2"))
    await guarded(rig, made).handle(message)
    dead = assert_refused(rig, made, "forbidden", replied_on=made.reply_topic("agent-2"))
    assert "agent-1" in dead["detail"]
    # The dead letter's preview keeps the key id, never the secret.
    assert f"gmk_{made.ids['agent-2']}.***" in dead["payload"]


@pytest.mark.parametrize("reply_of", ["client", "agent-2"])
async def test_a_reply_topic_the_key_does_not_own_is_refused_and_left_alone(
    reply_of: str,
) -> None:
    # A good key that reaches the agent, naming another client's reply topic (a
    # keyless one, or another key's): refused, and nothing is written there.
    rig, made = await seeded(), await keys()
    reply_to = REPLY_TO if reply_of == "client" else made.reply_topic(reply_of)
    message = with_header(recall_request(reply_to=reply_to), made.tokens["agent-1"])
    await guarded(rig, made).handle(message)
    dead = assert_refused(rig, made, "forbidden", field="reply_to")
    assert made.ids["agent-1"] in dead["detail"] and reply_to in dead["detail"]


@pytest.mark.parametrize("name", ["agent-1", "fleet", "admin"])
async def test_keys_that_reach_the_agent_are_answered_on_their_reply_topic(name: str) -> None:
    rig, made = await seeded(), await keys()
    await guarded(rig, made).handle(keyed(made, name))
    ((topic, reply),) = replies(rig)
    assert topic == made.reply_topic(name)
    assert "error" not in reply
    assert {item["agent_id"] for item in reply["items"]} == {"agent-1"}
    assert rig.on(TOPICS.dead_letters) == []
    assert not made.metrics.counts


async def test_an_admin_key_may_name_any_reply_topic_in_the_namespace() -> None:
    rig, made = await seeded(), await keys()
    await guarded(rig, made).handle(recall_request(api_key=made.tokens["admin"]))
    (reply,) = rig.on(REPLY_TO)
    assert "error" not in reply and reply["items"]


async def test_the_payload_key_wins_over_the_header() -> None:
    rig, made = await seeded(), await keys()
    message = recall_request(api_key=made.tokens["agent-2"], reply_to=made.reply_topic("agent-2"))
    await guarded(rig, made).handle(with_header(message, made.tokens["admin"]))
    assert_refused(rig, made, "forbidden", replied_on=made.reply_topic("agent-2"))


async def test_a_revoked_key_is_refused_and_answered_nowhere() -> None:
    rig, made = await seeded(), await keys()
    await made.store.revoke(made.ids["agent-1"])
    await guarded(rig, made).handle(keyed(made, "agent-1"))
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
    await guarded(rig, made).handle(recall_request(api_key=value, reply_to=f"{REPLY_TO}x"))
    dead = assert_refused(rig, made, "unauthenticated")
    assert detail in dead["detail"]


async def test_a_wrong_secret_is_unauthenticated_even_on_the_key_s_reply_topic() -> None:
    rig, made = await seeded(), await keys()
    wrong = format_token(made.ids["agent-1"], "w" * 43)
    await guarded(rig, made).handle(
        recall_request(api_key=wrong, reply_to=made.reply_topic("agent-1"))
    )
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
    await guarded(rig, made).handle(
        recall_request(reply_to="grimoire.memory-events", api_key=made.tokens["admin"])
    )
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


async def test_an_invalid_request_is_answered_only_on_its_key_s_own_topic() -> None:
    rig, made = await seeded(), await keys()
    handler = guarded(rig, made)
    await handler.handle(recall_request(k=0))  # no key: nowhere
    await handler.handle(with_header(recall_request(k=0), made.tokens["agent-1"]))  # not its own
    assert replies(rig) == []
    await handler.handle(keyed(made, "agent-1", k=0))
    ((topic, reply),) = replies(rig)
    assert topic == made.reply_topic("agent-1")
    assert reply["error"].startswith("invalid_value")
    assert len(rig.on(TOPICS.dead_letters)) == 3


async def test_a_failure_reply_goes_only_to_the_key_s_own_topic() -> None:
    rig, made = await seeded(), await keys()
    handler = guarded(rig, made)
    await handler.reply_failure(recall_request(), "internal_error")
    await handler.reply_failure(
        with_header(recall_request(), made.tokens["agent-1"]), "internal_error"
    )
    assert replies(rig) == []
    await handler.reply_failure(keyed(made, "agent-1"), "internal_error")
    ((topic, reply),) = replies(rig)
    assert topic == made.reply_topic("agent-1")
    assert reply["error"].startswith("internal_error")


# -- fact queries: the same rules as a recall ----------------------------------------


def fact_query(made: Keys, name: str | None, *, reply_to: str | None = None) -> InputMessage:
    data = {
        "agent_id": "agent-1",
        "query": "valid_at",
        "block": 3,
        "reply_to": reply_to or (made.reply_topic(name) if name else REPLY_TO),
        "correlation_id": "corr-1",
    }
    message = InputMessage(orjson.dumps(data), TOPICS.fact_queries, partition=0, offset=4)
    return message if name is None else with_header(message, made.tokens[name])


def fact_handler(rig: Rig, made: Keys) -> FactQueryHandler:
    return FactQueryHandler(
        InMemoryFactStore(),
        rig.sink,
        TOPICS,
        authenticator=made.authenticator(),
        auth_metrics=made.metrics,
    )


@pytest.mark.parametrize(
    ("name", "reply_of", "outcome", "field", "replied"),
    [
        (None, None, "unauthenticated", "api_key", False),
        ("revoked", "revoked", "unauthenticated", "api_key", False),
        ("agent-2", "agent-2", "forbidden", "api_key", True),
        ("agent-1", "fleet", "forbidden", "reply_to", False),
    ],
)
async def test_a_refused_fact_query_is_answered_only_on_its_key_s_own_topic(
    name: str | None, reply_of: str | None, outcome: str, field: str, replied: bool
) -> None:
    rig, made = Rig(), await keys()
    if name == "revoked":
        await made.add("revoked", TenantScope(agent_ids=frozenset({"agent-1"})))
        await made.store.revoke(made.ids["revoked"])
    reply_to = made.reply_topic(reply_of) if reply_of else REPLY_TO
    await fact_handler(rig, made).handle(fact_query(made, name, reply_to=reply_to))
    (dead,) = rig.on(TOPICS.dead_letters)
    assert (dead["reason"], dead["field"], dead["detail"].split(":")[0]) == (
        "unauthorized",
        field,
        outcome,
    )
    assert dict(made.metrics.counts) == {f"auth_{outcome}": 1, "auth_refused_kafka": 1}
    sent = replies(rig)
    if replied:
        ((topic, reply),) = sent
        assert topic == reply_to and reply["error"].startswith(f"unauthorized: {outcome}")
    else:
        assert sent == []


@pytest.mark.parametrize("name", ["agent-1", "fleet", "admin"])
async def test_a_fact_query_with_a_good_key_is_answered(name: str) -> None:
    rig, made = Rig(), await keys()
    await fact_handler(rig, made).handle(fact_query(made, name))
    ((topic, reply),) = replies(rig)
    assert topic == made.reply_topic(name)
    assert "error" not in reply and reply["facts"] == []
    assert rig.on(TOPICS.dead_letters) == [] and not made.metrics.counts


# -- every journaled input: checked by the sequencer, before anything is journaled --

# Each checked kind, its topic and a payload (the sequencer reads the agent id and
# the key only; the fold judges the rest).
KINDS = {
    EntryKind.EPISODE: (TOPICS.episodes, {"text": "disk full"}),
    EntryKind.TOOL_EVENT: (TOPICS.tool_events, {"tool": "sh", "text": "ls"}),
    EntryKind.TRANSCRIPT: (TOPICS.transcripts, {"turn_id": "t-1"}),
    EntryKind.OUTCOME: (TOPICS.outcomes, {"outcome": "success"}),
    EntryKind.FACT: (TOPICS.facts, {"subject": "a", "predicate": "b", "object": "c"}),
    EntryKind.COMMAND: (TOPICS.commands, {"command": "pin", "memory_id": "m-1"}),
}


def input_of(kind: EntryKind, offset: int = 3, **fields: Any) -> InputMessage:
    topic, payload = KINDS[kind]
    data = {"agent_id": "agent-1", "ts": TS, **payload, **fields}
    return InputMessage(orjson.dumps(data), topic, partition=0, offset=offset)


def command(**fields: Any) -> InputMessage:
    return input_of(EntryKind.COMMAND, **fields)


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
        entry = await with_agent(decode_entry(raw), journal_keys)
        key = await journal_keys.key(entry.agent_id, entry.key_id)
        assert key is not None
        sealed = SealedPayload(entry.key_id, entry.nonce, entry.ciphertext)
        plain = open_sealed(
            key, sealed, associated=associated_data(entry.agent_id, entry.key_id, entry.seq)
        )
        opened.append({"kind": entry.kind, **orjson.loads(plain)})
    return opened


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize(
    ("key", "outcome"),
    [
        (None, "unauthenticated"),
        ("agent-2", "forbidden"),
        ("revoked", "unauthenticated"),
        ("malformed", "unauthenticated"),
    ],
)
@pytest.mark.parametrize("carried", ["header", "payload"])
async def test_a_refused_input_is_dead_lettered_and_never_journaled(
    kind: EntryKind, key: str | None, outcome: str, carried: str
) -> None:
    rig, made, journal_keys = Rig(), await keys(), InMemoryKeyStore()
    if key == "revoked":
        await made.store.revoke(made.ids["agent-1"])
    token = {"revoked": made.tokens["agent-1"], "malformed": "gmk_nope"}.get(
        key or "", made.tokens.get(key or "")
    )
    if token is not None and carried == "payload":
        message = input_of(kind, api_key=token)
    else:
        message = input_of(kind)
        if token is not None:
            message = with_header(message, token)
    report = await sequencer(rig, made, journal_keys).append(kind, [message])
    assert (report.journaled, report.dead_lettered) == (0, 1)
    assert rig.sink.on(TOPICS.journal) == []
    (dead,) = rig.on(TOPICS.dead_letters)
    assert (dead["reason"], dead["field"], dead["agent_id"], dead["source_topic"]) == (
        "unauthorized",
        "api_key",
        "agent-1",
        KINDS[kind][0],
    )
    assert dead["detail"].startswith(outcome)
    assert dict(made.metrics.counts) == {f"auth_{outcome}": 1, "auth_refused_kafka": 1}
    assert await journal_keys.next_sequence("agent-1") == 1  # no number was spent on it
    for name in made.tokens:
        _, secret = parse_token(made.tokens[name]) or ("", "")
        assert all(secret not in value.decode() for _, _, value in rig.sink.sent)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("name", ["agent-1", "fleet", "admin"])
async def test_an_admitted_input_is_journaled_without_its_key(kind: EntryKind, name: str) -> None:
    rig, made, journal_keys = Rig(), await keys(), InMemoryKeyStore()
    batch = [
        with_header(input_of(kind, offset=1), made.tokens[name]),
        input_of(kind, offset=2, api_key=made.tokens[name]),
    ]
    report = await sequencer(rig, made, journal_keys).append(kind, batch)
    assert (report.journaled, report.dead_lettered) == (2, 0)
    expected = {"kind": kind, "agent_id": "agent-1", "ts": TS, **KINDS[kind][1]}
    assert await journaled(rig, journal_keys) == [expected, expected]
    assert rig.on(TOPICS.dead_letters) == []
    assert all(made.tokens[name].encode() not in raw for raw in rig.sink.on(TOPICS.journal))


async def test_switched_off_inputs_pass_and_still_lose_their_key() -> None:
    rig, made, journal_keys = Rig(), await keys(), InMemoryKeyStore()
    seq = sequencer(rig, made, journal_keys, enabled=False)
    report = await seq.append(
        EntryKind.COMMAND, [command(), command(api_key=made.tokens["agent-2"])]
    )
    assert (report.journaled, report.dead_lettered) == (2, 0)
    report = await seq.append(
        EntryKind.EPISODE, [input_of(EntryKind.EPISODE, api_key=made.tokens["agent-2"])]
    )
    assert report.journaled == 1
    entries = await journaled(rig, journal_keys)
    assert len(entries) == 3 and all("api_key" not in entry for entry in entries)
    assert not made.metrics.counts


async def test_maintenance_commands_are_not_checked() -> None:
    # The workers' own block timers issue them without a key.
    rig, made, journal_keys = Rig(), await keys(), InMemoryKeyStore()
    payload = orjson.dumps({"agent_id": "agent-1", "reason": "block", "issued_by": "w-1"})
    message = InputMessage(payload, TOPICS.maintenance, partition=0, offset=1)
    await journal_keys.key_for("agent-1")  # a known agent: the timer sends for no other
    report = await sequencer(rig, made, journal_keys).append(EntryKind.MAINTENANCE, [message])
    assert report.journaled == 1
    assert not made.metrics.counts


async def test_a_refused_input_in_a_batch_leaves_the_others_in_order() -> None:
    rig, made, journal_keys = Rig(), await keys(), InMemoryKeyStore()
    batch = [
        command(api_key=made.tokens["agent-1"], memory_id="m-1"),
        command(api_key=made.tokens["agent-2"], memory_id="m-2"),
        command(api_key=made.tokens["fleet"], memory_id="m-3"),
        command(memory_id="m-4"),
    ]
    report = await sequencer(rig, made, journal_keys).append(EntryKind.COMMAND, batch)
    assert (report.journaled, report.dead_lettered) == (2, 2)
    assert [e["memory_id"] for e in await journaled(rig, journal_keys)] == ["m-1", "m-3"]
    assert [decode_entry(raw).seq for raw in rig.sink.on(TOPICS.journal)] == [1, 2]
    assert made.metrics.counts["auth_refused_kafka"] == 2


@pytest.mark.parametrize("name", ["fleet", "unknown"])
async def test_one_batch_looks_each_key_up_once(name: str) -> None:
    # The authenticator caches nothing here (TTL 0) and never caches an unknown
    # key: the batch's own memo spares the store a read per record.
    rig, made, journal_keys = Rig(), await keys(), InMemoryKeyStore()
    token = format_token("cd" * 8, "s" * 43) if name == "unknown" else made.tokens[name]
    batch = [
        with_header(input_of(EntryKind.EPISODE, offset=n, event_id=f"e{n}"), token)
        for n in range(50)
    ]
    made.store.reads = 0
    report = await sequencer(rig, made, journal_keys).append(EntryKind.EPISODE, batch)
    assert made.store.reads == 1
    if name == "unknown":
        assert (report.journaled, report.dead_lettered) == (0, 50)
        assert made.metrics.counts["auth_refused_kafka"] == 50  # every refusal counted
    else:
        assert (report.journaled, report.dead_lettered) == (50, 0)


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
