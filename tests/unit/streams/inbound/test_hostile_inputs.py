"""What an outside probe of a fresh clone found, each pinned as a regression:

* agent ids that only look alike (`TENV1` / `tenV1`) or that a TAG would split
  (`tenV2,evil`) are refused at the edge or kept apart, on every input kind;
* `max_text_chars` counts the stored (NFKC) text, and a transcript line may become
  at most `max_parts_per_event` memories;
* `reply_to` must be `{prefix}.replies.<client id>`, and a bad `reply_to` or an
  oversize `correlation_id` is dead-lettered once with no reply;
* a reply never exceeds `max_reply_bytes`: it is cut from the tail and says so.

The same cases through the real worker are in tests/integration/test_hostile_inputs.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from grimoire.agents.dead_letters import MAX_DETAIL_CHARS
from grimoire.agents.handlers.recall import bounded_reply
from grimoire.streams.inbound.events import (
    MAX_NESTING,
    TOO_DEEP,
    Accepted,
    Rejection,
    nesting_depth,
    normalize_event,
)
from grimoire.streams.inbound.maintenance_command import (
    MaintenanceCommand,
    parse_maintenance_command,
)
from grimoire.streams.inbound.outcome import parse_outcome
from grimoire.streams.inbound.recall_request import (
    RecallLimits,
    RecallQuery,
    parse_recall_request,
)
from grimoire.streams.inbound.validators import InputLimits, plausible_agent_id
from grimoire.streams.learn.outcomes import Outcome
from grimoire.streams.model.records import EventType
from grimoire.tables.queries import tenant_filter
from grimoire.topics.schemas import RecallItemV1, RecallResultV1
from tests.support.handlers import REPLY_TO, TOPICS, TS, Rig, episode, messages, recall_request

LIMITS = InputLimits()
RECALL = RecallLimits()
NAMESPACE = TOPICS.reply_namespace  # "grimoire.replies."
LIGATURE = "\ufdfa"  # one character, eighteen after NFKC


def _dumps(**fields: Any) -> bytes:
    return orjson.dumps(fields)


# -- agent ids: one alphabet on every input kind -------------------------------------

VALID_AGENTS = ["a", "golem-7", "TENV1", "tenV1", "Agent_1.b", "svc@team", "x+y=z/w", "a" * 128]
INVALID_AGENTS = [
    "tenV2,evil",  # the TAG's old separator
    "a|b",  # the TAG's separator now
    "{a}",  # tag syntax, Redis Cluster hash tag
    "a:b",  # the separator inside Redis keys
    "a*",  # glob
    "tenv\u0131",  # dotless i: non-ASCII
    "\uff54\uff45\uff4eV1",  # fullwidth, NFKC-equal to tenV1
    "a\u200bb",  # zero-width space
    "a b",
    "a\u00a0b",
]


def _every_kind(agent_id: str) -> list[tuple[str, Any]]:
    """(kind, what its parser returns) for a minimal valid payload of each input kind."""
    line = {"role": "user", "content": "hello there"}
    request = _dumps(agent_id=agent_id, query="q", reply_to=REPLY_TO, correlation_id="c")
    ingest = {
        EventType.EPISODE: _dumps(agent_id=agent_id, ts=TS, text="t"),
        EventType.TOOL: _dumps(agent_id=agent_id, ts=TS, tool="bash"),
        EventType.TRANSCRIPT: _dumps(agent_id=agent_id, ts=TS, line=line),
    }
    return [
        *((kind.value, normalize_event(kind, raw, LIMITS)) for kind, raw in ingest.items()),
        ("outcome", parse_outcome(_dumps(agent_id=agent_id, ts=TS, outcome="positive"), LIMITS)),
        ("maintenance", parse_maintenance_command(_dumps(agent_id=agent_id), LIMITS)),
        ("recall", parse_recall_request(request, RECALL, LIMITS, reply_namespace=NAMESPACE)),
    ]


@pytest.mark.parametrize("agent_id", VALID_AGENTS)
def test_a_valid_agent_id_is_accepted_unchanged_on_every_input_kind(agent_id: str) -> None:
    for kind, parsed in _every_kind(agent_id):
        assert isinstance(parsed, Accepted | Outcome | MaintenanceCommand | RecallQuery), kind
        assert parsed.agent_id == agent_id, kind
    assert plausible_agent_id({"agent_id": agent_id}, LIMITS) == agent_id


@pytest.mark.parametrize("agent_id", INVALID_AGENTS)
def test_an_agent_id_outside_the_alphabet_is_dead_lettered_on_every_input_kind(
    agent_id: str,
) -> None:
    for kind, parsed in _every_kind(agent_id):
        assert isinstance(parsed, Rejection), kind
        assert (parsed.reason, parsed.field) == ("invalid_value", "agent_id"), kind
        # Nor does it key the dead letter.
        assert parsed.agent_id is None, kind
    assert plausible_agent_id({"agent_id": agent_id}, LIMITS) is None


def test_an_overlong_agent_id_is_oversize() -> None:
    for kind, parsed in _every_kind("a" * 129):
        assert isinstance(parsed, Rejection), kind
        assert (parsed.reason, parsed.field) == ("oversize", "agent_id"), kind


def test_the_tenant_filter_is_exact_and_escapes_every_separator() -> None:
    assert str(tenant_filter("TENV1")) == "@agent_id:{TENV1}"
    assert str(tenant_filter("tenV1")) == "@agent_id:{tenV1}"
    assert str(tenant_filter("tenV2,evil")) == "@agent_id:{tenV2\\,evil}"
    assert str(tenant_filter("a|b")) == "@agent_id:{a\\|b}"
    assert str(tenant_filter("x+y=z/w@q")) == "@agent_id:{x\\+y\\=z\\/w\\@q}"
    # Characters RediSearch does not list are escaped too: a literal either way.
    assert str(tenant_filter("a`b\tc")) == "@agent_id:{a\\`b\\\tc}"


async def one_event_from_each(*agents: str) -> Rig:
    """A rig after one batch: event e1, "disk full on node seven", from each agent in
    turn, a millisecond apart."""
    rig = Rig()
    payloads = (episode(a, "disk full on node seven", TS + i, "e1") for i, a in enumerate(agents))
    await rig.ingest.handle(EventType.EPISODE, messages(*payloads))
    return rig


async def test_agents_differing_in_case_keep_their_own_memories() -> None:
    rig = await one_event_from_each("TENV1", "tenV1")
    events = rig.events()
    assert [(e["agent_id"], e["action"]) for e in events] == [
        ("TENV1", "admit"),
        ("tenV1", "admit"),
    ]
    owners = {str(doc["agent_id"]) for doc in rig.store.hashes()}
    assert owners == {"TENV1", "tenV1"}


async def test_a_comma_agent_never_reaches_the_store() -> None:
    rig = await one_event_from_each("tenV2", "tenV2,evil")
    assert [e["action"] for e in rig.events()] == ["admit"]
    (letter,) = rig.on(TOPICS.dead_letters)
    assert (letter["reason"], letter["field"]) == ("invalid_value", "agent_id")
    assert "agent_id" not in letter


# -- max_text_chars counts the normalised text -----------------------------------------


def test_text_that_grows_under_nfkc_past_the_limit_is_oversize() -> None:
    # 16,000 characters on the wire, 288,000 once normalised.
    raw = _dumps(agent_id="a", ts=TS, text=LIGATURE * 16_000)
    rejected = normalize_event(EventType.EPISODE, raw, LIMITS)
    assert isinstance(rejected, Rejection)
    assert (rejected.reason, rejected.field) == ("oversize", "text")
    # The limit is on the normalised length: 888 ligatures are 15,984 characters.
    fits = normalize_event(
        EventType.EPISODE, _dumps(agent_id="a", ts=TS, text=LIGATURE * 888), LIMITS
    )
    assert isinstance(fits, Accepted)
    assert len(fits.candidates[0].text) == 15_984
    over = normalize_event(
        EventType.EPISODE, _dumps(agent_id="a", ts=TS, text=LIGATURE * 889), LIMITS
    )
    assert isinstance(over, Rejection)
    assert (over.reason, over.field) == ("oversize", "text")


@pytest.mark.parametrize(
    ("event_type", "payload", "field"),
    [
        (EventType.EPISODE, {"tags": [LIGATURE * 1_000]}, "tags"),
        (EventType.TOOL, {"tool": "bash", "result": LIGATURE * 1_000}, "result"),
        (EventType.TOOL, {"tool": "bash", "error": LIGATURE * 1_000}, "error"),
        (
            EventType.TRANSCRIPT,
            {"line": {"role": "user", "content": [{"type": "text", "text": LIGATURE * 1_000}]}},
            "line.content.text",
        ),
    ],
)
def test_every_text_field_is_measured_after_normalising(
    event_type: EventType, payload: dict[str, Any], field: str
) -> None:
    base: dict[str, Any] = {"agent_id": "a", "ts": TS, "text": "t"}
    rejected = normalize_event(event_type, orjson.dumps({**base, **payload}), LIMITS)
    assert isinstance(rejected, Rejection)
    assert (rejected.reason, rejected.field) == ("oversize", field)


def test_a_recall_query_is_measured_after_normalising() -> None:
    raw = _dumps(agent_id="a", query=LIGATURE * 300, reply_to=REPLY_TO, correlation_id="c")
    rejected = parse_recall_request(raw, RECALL, LIMITS)
    assert isinstance(rejected, Rejection)
    assert (rejected.reason, rejected.field) == ("oversize", "query")


def test_a_memory_text_joined_from_fields_stays_within_the_limit() -> None:
    # A tool event's memory text joins result, paths and urls: each field fits,
    # together they do not.
    small = InputLimits(max_text_chars=60)
    raw = _dumps(agent_id="a", ts=TS, tool="bash", result="r" * 40, paths=["/p" * 15])
    rejected = normalize_event(EventType.TOOL, raw, small)
    assert isinstance(rejected, Rejection)
    assert (rejected.reason, rejected.field) == ("oversize", "result")
    fits = _dumps(agent_id="a", ts=TS, tool="bash", result="r" * 20, paths=["/p" * 5])
    assert isinstance(normalize_event(EventType.TOOL, fits, small), Accepted)


# -- parts per event -------------------------------------------------------------------


def _blocks(n: int) -> bytes:
    content = [{"type": "text", "text": f"block number {i}"} for i in range(n)]
    return _dumps(agent_id="a", ts=TS, line={"role": "assistant", "content": content})


def test_a_transcript_line_of_two_thousand_blocks_is_dead_lettered_not_cut() -> None:
    rejected = normalize_event(EventType.TRANSCRIPT, _blocks(2_000), LIMITS)
    assert isinstance(rejected, Rejection)
    assert (rejected.reason, rejected.field) == ("oversize", "line.content")
    assert rejected.agent_id == "a"


def test_parts_per_event_is_a_limit() -> None:
    at_cap = normalize_event(EventType.TRANSCRIPT, _blocks(64), LIMITS)
    assert isinstance(at_cap, Accepted)
    assert len(at_cap.candidates) == 64
    over = normalize_event(EventType.TRANSCRIPT, _blocks(65), LIMITS)
    assert isinstance(over, Rejection)
    assert over.reason == "oversize"
    three = InputLimits(max_parts_per_event=3)
    assert isinstance(normalize_event(EventType.TRANSCRIPT, _blocks(3), three), Accepted)
    assert isinstance(normalize_event(EventType.TRANSCRIPT, _blocks(4), three), Rejection)


def test_empty_blocks_do_not_count_as_parts() -> None:
    content = [{"type": "text", "text": "  "}] * 100 + [{"type": "text", "text": "said"}]
    raw = _dumps(agent_id="a", ts=TS, line={"role": "assistant", "content": content})
    accepted = normalize_event(EventType.TRANSCRIPT, raw, LIMITS)
    assert isinstance(accepted, Accepted)
    assert len(accepted.candidates) == 1


# -- reply_to and correlation_id -------------------------------------------------------

OUTSIDE = [
    "grimoire.memory-events",
    "grimoire.episodes",
    "grimoire.dead-letters",
    "grimoire.journal",
    "grimoire.replies.",  # no client id
    "grimoire.replies.a.b",  # a client id has no dots
    "grimoire.repliesx",
    "other.replies.client-1",  # another deployment's reply topic
    "brand-new-topic",  # the broker would auto-create it
]


@pytest.mark.parametrize("reply_to", OUTSIDE)
def test_reply_to_outside_the_reply_namespace_is_invalid(reply_to: str) -> None:
    raw = _dumps(agent_id="a", query="q", reply_to=reply_to, correlation_id="c")
    rejected = parse_recall_request(raw, RECALL, LIMITS, reply_namespace=NAMESPACE)
    assert isinstance(rejected, Rejection)
    assert (rejected.reason, rejected.field) == ("invalid_value", "reply_to")


@pytest.mark.parametrize("client", ["client-1", "sdk_1", "0a1b2c3d4e5f", "C"])
def test_reply_to_inside_the_namespace_is_accepted(client: str) -> None:
    reply_to = TOPICS.reply_topic(client)
    raw = _dumps(agent_id="a", query="q", reply_to=reply_to, correlation_id="c")
    parsed = parse_recall_request(raw, RECALL, LIMITS, reply_namespace=NAMESPACE)
    assert isinstance(parsed, RecallQuery)
    assert parsed.reply_to == reply_to


def test_a_megabyte_correlation_id_is_oversize() -> None:
    raw = _dumps(agent_id="a", query="q", reply_to=REPLY_TO, correlation_id="c" * (1 << 20))
    rejected = parse_recall_request(raw, RECALL, LIMITS, reply_namespace=NAMESPACE)
    assert isinstance(rejected, Rejection)
    assert (rejected.reason, rejected.field) == ("oversize", "correlation_id")


@pytest.mark.parametrize("reply_to", ["grimoire.memory-events", "other.replies.x", "new-topic"])
async def test_a_reply_to_outside_the_namespace_gets_one_dead_letter_and_no_reply(
    reply_to: str,
) -> None:
    rig = Rig()
    await rig.recall.handle(recall_request(reply_to=reply_to))
    assert [topic for topic, _, _ in rig.sink.sent] == [TOPICS.dead_letters]
    (letter,) = rig.on(TOPICS.dead_letters)
    assert (letter["reason"], letter["field"]) == ("invalid_value", "reply_to")


async def test_a_megabyte_correlation_id_gets_one_small_dead_letter_and_no_reply() -> None:
    rig = Rig()
    await rig.recall.handle(recall_request(correlation_id="c" * (1 << 20)))
    assert [topic for topic, _, _ in rig.sink.sent] == [TOPICS.dead_letters]
    (value,) = rig.sink.on(TOPICS.dead_letters)
    assert len(value) < 16 * 1024
    letter = orjson.loads(value)
    assert (letter["reason"], letter["field"]) == ("oversize", "correlation_id")
    # The failure path (a recall that could not be served) is bounded the same way.
    await rig.recall.reply_failure(recall_request(correlation_id="c" * (1 << 20)), "internal_error")
    assert len(rig.sink.sent) == 1


async def test_a_detail_quoting_a_huge_value_stays_small() -> None:
    rig = Rig()
    kinds = ["k" * 16_000] * 60
    await rig.recall.handle(recall_request(filters={"kinds": kinds}))
    (letter_bytes,) = rig.sink.on(TOPICS.dead_letters)
    letter = orjson.loads(letter_bytes)
    assert (letter["reason"], letter["field"]) == ("invalid_value", "filters.kinds")
    assert len(letter["detail"]) <= MAX_DETAIL_CHARS
    (error_bytes,) = rig.sink.on(REPLY_TO)
    assert len(error_bytes) < 4 * 1024
    assert orjson.loads(error_bytes)["error"].startswith("invalid_value: ")


# -- replies are bounded in bytes ------------------------------------------------------


def _item(n: int, text_chars: int) -> RecallItemV1:
    return RecallItemV1(
        id=f"m-{n:03d}",
        agent_id="a",
        kind="episode",
        layer="observation",
        gist=f"gist {n}",
        ts=TS + n,
        score=1.0 - n / 1000,
        lanes=["canonical"],
        source_event_id=f"e-{n}",
        text="é" * text_chars if text_chars else None,
        tokens=10,
    )


def _result(items: list[RecallItemV1]) -> RecallResultV1:
    return RecallResultV1(
        correlation_id="c-1",
        agent_id="a",
        items=items,
        watermark=TS,
        mode="full",
        budget={
            "tokens_used": 10 * len(items),
            "token_budget": 2000,
            "items": len(items),
            "max_items": 100,
        },
        timings_ms={"total": 1.0},
    )


def test_a_reply_within_the_limit_is_sent_as_it_is() -> None:
    result = _result([_item(n, 100) for n in range(5)])
    bounded = bounded_reply(result, 64 * 1024)
    assert bounded.payload == result.dumps_json()
    assert not bounded.truncated
    assert bounded.item_ids == tuple(f"m-{n:03d}" for n in range(5))


def test_an_oversize_reply_keeps_the_longest_prefix_that_fits_and_says_so() -> None:
    items = [_item(n, 4_000 if n < 3 else 0) for n in range(60)]
    result = _result(items)
    full = len(result.dumps_json())
    limit = 30_000  # the three texts are 24,000 bytes
    assert full > limit
    bounded = bounded_reply(result, limit)
    reply = orjson.loads(bounded.payload)
    assert len(bounded.payload) <= limit
    kept = len(reply["items"])
    assert 3 <= kept < 60
    assert [i["id"] for i in reply["items"]] == [f"m-{n:03d}" for n in range(kept)]
    assert reply["items"] == orjson.loads(result.dumps_json())["items"][:kept]  # texts intact
    assert reply["budget"] == {
        "tokens_used": 600,
        "token_budget": 2000,
        "items": kept,
        "max_items": 100,
        "truncated": 1,
        "max_reply_bytes": limit,
        "dropped_items": 60 - kept,
        "dropped_texts": 0,
    }
    # One more item would not have fitted.
    every = orjson.loads(result.dumps_json())["items"]
    assert len(orjson.dumps({**reply, "items": every[: kept + 1]})) > limit
    # Deterministic: the same result cuts to the same bytes.
    assert bounded_reply(result, limit).payload == bounded.payload


def test_when_one_item_is_too_big_the_full_texts_go() -> None:
    result = _result([_item(n, 6_000) for n in range(20)])  # 12,000 bytes of text each
    bounded = bounded_reply(result, 8_000)
    reply = orjson.loads(bounded.payload)
    assert len(bounded.payload) <= 8_000
    assert reply["items"]
    assert all(item["text"] is None for item in reply["items"])
    assert reply["budget"]["dropped_texts"] == len(reply["items"])
    assert reply["budget"]["dropped_items"] == 20 - len(reply["items"])


def test_below_the_envelope_the_reply_has_no_items() -> None:
    bounded = bounded_reply(_result([_item(0, 10)]), 10)
    reply = orjson.loads(bounded.payload)
    assert reply["items"] == []
    assert reply["budget"]["dropped_items"] == 1


async def test_the_handler_bounds_an_answer_of_long_memories() -> None:
    rig = Rig()
    words = [f"w{n}" for n in range(2_000)]
    long_texts = [" ".join(["disk", *words[n * 40 : n * 40 + 40]]) * 20 for n in range(40)]
    await rig.ingest.handle(
        EventType.EPISODE,
        messages(*(episode("agent-1", t, TS + n, f"e{n}") for n, t in enumerate(long_texts))),
    )
    rig.sink.sent.clear()
    budgets = {"token_budget": 200_000, "full_text_items": 40, "canonical_k": 100, "bm25_k": 100}
    request = {"query": "disk", "k": 40, "record_usage": False, "budgets": budgets}
    await rig.recall.handle(recall_request(**request))
    (whole,) = rig.sink.on(REPLY_TO)
    whole_items = orjson.loads(whole)["items"]
    assert len(whole_items) > 5
    limit = len(whole) // 3
    rig.recall.limits = replace(rig.recall.limits, max_reply_bytes=limit)
    rig.sink.sent.clear()
    await rig.recall.handle(recall_request(**request))
    await rig.recall.handle(recall_request(**request))
    first, second = (orjson.loads(value) for value in rig.sink.on(REPLY_TO))
    assert max(len(value) for value in rig.sink.on(REPLY_TO)) <= limit
    assert (first["items"], first["budget"]) == (second["items"], second["budget"])
    reply = first
    assert "error" not in reply
    assert reply["items"] == whole_items[: len(reply["items"])]
    assert reply["budget"]["truncated"] == 1
    assert reply["budget"]["dropped_items"] == len(whole_items) - len(reply["items"])
    assert not rig.on(TOPICS.dead_letters)


@pytest.mark.parametrize("depth", [33, 300, 1_000])
def test_a_payload_nested_past_the_limit_is_refused_by_name_on_every_input(depth: int) -> None:
    # Between 255 and 1,023 levels orjson parses a payload it cannot encode again,
    # and the event id of a payload without one hashes the re-encoded payload.
    deep = b"[" * depth + b"1" + b"]" * depth
    raw = b'{"agent_id":"a-1","ts":1790000000000,"text":"deep","meta":' + deep + b"}"
    episode_outcome = normalize_event(EventType.EPISODE, raw, InputLimits())
    assert isinstance(episode_outcome, Rejection) and episode_outcome.reason == TOO_DEEP
    outcome = parse_outcome(raw, InputLimits())
    assert isinstance(outcome, Rejection) and outcome.reason == TOO_DEEP


def test_nesting_up_to_the_limit_is_accepted() -> None:
    data: Any = "leaf"
    for _ in range(MAX_NESTING - 1):  # the payload object itself is a level
        data = [data]
    raw = orjson.dumps({"agent_id": "a-1", "ts": 1_790_000_000_000, "text": "t", "meta": data})
    assert isinstance(normalize_event(EventType.EPISODE, raw, InputLimits()), Accepted)
    assert nesting_depth({"a": [{"b": [1]}]}, 10) == 4 and nesting_depth(7, 10) == 0
