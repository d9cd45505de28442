"""grimoire.streams.inbound.events: rejections with stable reasons, accepted candidates, ids."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from grimoire.streams.inbound.events import Accepted, Rejection, normalize_event
from grimoire.streams.inbound.validators import InputLimits
from grimoire.streams.model.records import EventType, Kind, Layer, MemoryCandidate
from tests.support.inbound import DROP, accept, payload

LIMITS = InputLimits()
TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
AGENT = "agent-1"
_ANY = object()


def episode(**overrides: Any) -> bytes:
    return payload({"agent_id": AGENT, "ts": TS, "text": "disk full on node 7"}, overrides)


def tool_event(**overrides: Any) -> bytes:
    return payload({"agent_id": AGENT, "ts": TS, "tool": "bash", "result": "ok"}, overrides)


def transcript(**overrides: Any) -> bytes:
    return payload(
        {"agent_id": AGENT, "ts": TS, "line": {"role": "user", "content": "hello"}}, overrides
    )


def only(accepted: Accepted) -> MemoryCandidate:
    assert len(accepted.candidates) == 1, accepted.candidates
    return accepted.candidates[0]


SMALL = InputLimits(max_text_chars=50)
EPISODE, TOOL, TRANSCRIPT = EventType.EPISODE, EventType.TOOL, EventType.TRANSCRIPT

# (id, stream, payload, limits, reason, field, agent_id on the rejection)
REJECTIONS: list[tuple[str, EventType, bytes, InputLimits, str, str | None, object]] = [
    ("malformed-json", EPISODE, b'{"agent_id": "agent-1", ', LIMITS, "invalid_json", None, None),
    ("invalid-utf8", EPISODE, b'{"text": "\xff\xfe"}', LIMITS, "invalid_json", None, None),
    ("json-list", EPISODE, b'[{"agent_id": "agent-1"}]', LIMITS, "not_an_object", None, None),
    ("json-string", TOOL, b'"agent-1"', LIMITS, "not_an_object", None, None),
    ("missing-agent", EPISODE, episode(agent_id=DROP), LIMITS, "missing_field", "agent_id", None),
    ("null-agent", EPISODE, episode(agent_id=None), LIMITS, "missing_field", "agent_id", None),
    ("empty-agent", EPISODE, episode(agent_id=""), LIMITS, "missing_field", "agent_id", None),
    ("agent-int", EPISODE, episode(agent_id=7), LIMITS, "wrong_type", "agent_id", None),
    (
        "agent-space",
        EPISODE,
        episode(agent_id="agent 1"),
        LIMITS,
        "invalid_value",
        "agent_id",
        _ANY,
    ),
    ("agent-tab", TOOL, tool_event(agent_id="agent\t1"), LIMITS, "invalid_value", "agent_id", _ANY),
    ("text-oversize", EPISODE, episode(text="x" * 51), SMALL, "oversize", "text", AGENT),
    ("text-nul", EPISODE, episode(text="a\x00b"), LIMITS, "control_characters", "text", AGENT),
    ("text-bell", EPISODE, episode(text="a\x07b"), LIMITS, "control_characters", "text", AGENT),
    ("text-missing", EPISODE, episode(text=DROP), LIMITS, "missing_field", "text", AGENT),
    ("text-blank", EPISODE, episode(text=" \n\t "), LIMITS, "missing_field", "text", AGENT),
    ("text-number", EPISODE, episode(text=42), LIMITS, "wrong_type", "text", AGENT),
    ("ts-missing", EPISODE, episode(ts=DROP), LIMITS, "missing_field", "ts", AGENT),
    (
        "ts-before-2000",
        EPISODE,
        episode(ts=946_684_799_999),
        LIMITS,
        "timestamp_out_of_range",
        "ts",
        AGENT,
    ),
    (
        "ts-after-2100",
        EPISODE,
        episode(ts=4_102_444_800_001),
        LIMITS,
        "timestamp_out_of_range",
        "ts",
        AGENT,
    ),
    (
        "ts-iso-1999",
        EPISODE,
        episode(ts="1999-12-31T23:59:59Z"),
        LIMITS,
        "timestamp_out_of_range",
        "ts",
        AGENT,
    ),
    (
        "ts-seconds",
        EPISODE,
        episode(ts=1_767_225_600),
        LIMITS,
        "timestamp_out_of_range",
        "ts",
        AGENT,
    ),
    (
        "ts-naive-iso",
        EPISODE,
        episode(ts="2026-01-01T00:00:00"),
        LIMITS,
        "invalid_value",
        "ts",
        AGENT,
    ),
    ("ts-garbage", EPISODE, episode(ts="yesterday"), LIMITS, "invalid_value", "ts", AGENT),
    ("ts-bool", EPISODE, episode(ts=True), LIMITS, "wrong_type", "ts", AGENT),
    ("ts-list", EPISODE, episode(ts=[TS]), LIMITS, "wrong_type", "ts", AGENT),
    ("tick-string", EPISODE, episode(tick="3"), LIMITS, "wrong_type", "tick", AGENT),
    ("tick-bool", EPISODE, episode(tick=True), LIMITS, "wrong_type", "tick", AGENT),
    ("tick-float", EPISODE, episode(tick=3.5), LIMITS, "wrong_type", "tick", AGENT),
    ("tick-negative", EPISODE, episode(tick=-1), LIMITS, "invalid_value", "tick", AGENT),
    ("block-negative", TOOL, tool_event(block=-5), LIMITS, "invalid_value", "block", AGENT),
    (
        "importance-1.5",
        EPISODE,
        episode(importance=1.5),
        LIMITS,
        "invalid_value",
        "importance",
        AGENT,
    ),
    (
        "importance-neg",
        EPISODE,
        episode(importance=-0.1),
        LIMITS,
        "invalid_value",
        "importance",
        AGENT,
    ),
    (
        "importance-str",
        EPISODE,
        episode(importance="high"),
        LIMITS,
        "wrong_type",
        "importance",
        AGENT,
    ),
    (
        "episode-type-unknown",
        EPISODE,
        episode(episode_type="dream"),
        LIMITS,
        "invalid_value",
        "episode_type",
        AGENT,
    ),
    (
        "schema-version",
        EPISODE,
        episode(schema="grimoire.episode/2"),
        LIMITS,
        "unsupported_schema",
        "schema",
        AGENT,
    ),
    (
        "schema-other-stream",
        EPISODE,
        episode(schema="grimoire.tool_event/1"),
        LIMITS,
        "unsupported_schema",
        "schema",
        AGENT,
    ),
    ("tags-string", EPISODE, episode(tags="a,b"), LIMITS, "wrong_type", "tags", AGENT),
    ("tags-item-int", EPISODE, episode(tags=["a", 1]), LIMITS, "wrong_type", "tags", AGENT),
    (
        "tags-too-many",
        EPISODE,
        episode(tags=[f"t{i}" for i in range(65)]),
        LIMITS,
        "oversize",
        "tags",
        AGENT,
    ),
    (
        "session-space",
        EPISODE,
        episode(session_id="s 1"),
        LIMITS,
        "invalid_value",
        "session_id",
        AGENT,
    ),
    ("event-id-int", EPISODE, episode(event_id=12), LIMITS, "wrong_type", "event_id", AGENT),
    ("tool-missing", TOOL, tool_event(tool=DROP), LIMITS, "missing_field", "tool", AGENT),
    ("tool-space", TOOL, tool_event(tool="rm -rf"), LIMITS, "invalid_value", "tool", AGENT),
    (
        "latency-negative",
        TOOL,
        tool_event(latency_ms=-1),
        LIMITS,
        "invalid_value",
        "latency_ms",
        AGENT,
    ),
    (
        "latency-string",
        TOOL,
        tool_event(latency_ms="5ms"),
        LIMITS,
        "wrong_type",
        "latency_ms",
        AGENT,
    ),
    ("args-list", TOOL, tool_event(args=["x"]), LIMITS, "wrong_type", "args", AGENT),
    ("paths-string", TOOL, tool_event(paths="/etc"), LIMITS, "wrong_type", "paths", AGENT),
    (
        "tool-schema",
        TOOL,
        tool_event(schema="grimoire.episode/1"),
        LIMITS,
        "unsupported_schema",
        "schema",
        AGENT,
    ),
    (
        "role-unknown",
        TRANSCRIPT,
        transcript(line={"role": "system", "content": "be nice"}),
        LIMITS,
        "invalid_value",
        "line.role",
        AGENT,
    ),
    (
        "role-missing",
        TRANSCRIPT,
        transcript(line={"content": "hi"}),
        LIMITS,
        "missing_field",
        "line.role",
        AGENT,
    ),
    (
        "block-type-unknown",
        TRANSCRIPT,
        transcript(line={"role": "user", "content": [{"type": "image", "source": {}}]}),
        LIMITS,
        "invalid_value",
        "line.content",
        AGENT,
    ),
    (
        "block-not-object",
        TRANSCRIPT,
        transcript(line={"role": "user", "content": ["hi"]}),
        LIMITS,
        "wrong_type",
        "line.content",
        AGENT,
    ),
    (
        "content-empty-string",
        TRANSCRIPT,
        transcript(line={"role": "user", "content": ""}),
        LIMITS,
        "empty_content",
        "line.content",
        AGENT,
    ),
    (
        "content-empty-list",
        TRANSCRIPT,
        transcript(line={"role": "assistant", "content": []}),
        LIMITS,
        "empty_content",
        "line.content",
        AGENT,
    ),
    (
        "content-blank-blocks",
        TRANSCRIPT,
        transcript(
            line={
                "role": "assistant",
                "content": [{"type": "text", "text": "  "}, {"type": "thinking"}],
            }
        ),
        LIMITS,
        "empty_content",
        "line.content",
        AGENT,
    ),
    (
        "content-number",
        TRANSCRIPT,
        transcript(line={"role": "user", "content": 5}),
        LIMITS,
        "wrong_type",
        "line.content",
        AGENT,
    ),
    (
        "content-control",
        TRANSCRIPT,
        transcript(line={"role": "user", "content": "a\x1bb"}),
        LIMITS,
        "control_characters",
        "line.content",
        AGENT,
    ),
    (
        "line-invalid-json-string",
        TRANSCRIPT,
        transcript(line='{"role": "user", '),
        LIMITS,
        "invalid_json",
        "line",
        AGENT,
    ),
    (
        "line-list",
        TRANSCRIPT,
        transcript(line=[{"role": "user", "content": "hi"}]),
        LIMITS,
        "wrong_type",
        "line",
        AGENT,
    ),
]


@pytest.mark.parametrize(
    ("event_type", "raw", "limits", "reason", "field", "agent_id"),
    [pytest.param(*case[1:], id=case[0]) for case in REJECTIONS],
)
def test_rejections(
    event_type: EventType,
    raw: bytes,
    limits: InputLimits,
    reason: str,
    field: str | None,
    agent_id: object,
) -> None:
    outcome = normalize_event(event_type, raw, limits)
    assert isinstance(outcome, Rejection), outcome
    assert outcome.reason == reason
    assert outcome.field == field
    assert outcome.detail
    if agent_id is not _ANY:
        assert outcome.agent_id == agent_id


def test_rejection_carries_a_valid_agent_id_and_only_a_string_one() -> None:
    bad_tick = normalize_event(EPISODE, episode(agent_id="golem-7", tick=-3), LIMITS)
    assert isinstance(bad_tick, Rejection)
    assert bad_tick.agent_id == "golem-7"
    int_agent = normalize_event(EPISODE, episode(agent_id=7, tick=-3), LIMITS)
    assert isinstance(int_agent, Rejection)
    assert int_agent.agent_id is None


def test_transcript_role_of_unhashable_type_is_rejected_not_raised() -> None:
    """normalize_event promises never to raise on bad input.

    A role that is a JSON list/object currently raises TypeError (unhashable) from
    `role not in _TEXT_LAYER` in streams/inbound/transcript.py.
    """
    for role in (["user"], {"name": "user"}):
        raw = transcript(line={"role": role, "content": "hi"})
        outcome = normalize_event(TRANSCRIPT, raw, LIMITS)
        assert isinstance(outcome, Rejection)
        assert outcome.reason in {"wrong_type", "invalid_value"}
        assert outcome.field == "line.role"
        assert outcome.agent_id == AGENT


def test_transcript_without_line_is_a_missing_field() -> None:
    """Every other absent required field is `missing_field`; `line` reports wrong_type."""
    outcome = normalize_event(TRANSCRIPT, transcript(line=DROP), LIMITS)
    assert isinstance(outcome, Rejection)
    assert outcome.reason == "missing_field"
    assert outcome.field == "line"


# --- acceptance ---------------------------------------------------------------------


def test_episode_becomes_one_observation_candidate() -> None:
    raw = episode(
        text="  Disk   full\n\ton   node 7  ",
        event_id="ev-1",
        tick=12,
        block=99,
        session_id="sess-1",
        run_id="run-1",
        actor_id="golem",
        tags=["ops", "disk"],
        importance=0.75,
        regime="bull",
    )
    accepted = accept(EPISODE, raw)
    assert accepted.agent_id == AGENT
    assert accepted.source_event_id == "ev-1"
    assert accepted.ts_ms == TS
    cand = only(accepted)
    assert cand.kind is Kind.EPISODE
    assert cand.layer is Layer.OBSERVATION
    assert cand.text == "Disk full on node 7"
    assert cand.ts_ms == TS
    assert cand.agent_id == AGENT
    assert (cand.tick, cand.block, cand.tags) == (12, 99, ("ops", "disk"))
    assert cand.importance == 0.75
    assert cand.regime == "bull"
    prov = cand.provenance
    assert prov.source_event_id == "ev-1"
    assert prov.event_type == "episode"
    assert (prov.session_id, prov.run_id, prov.actor_id, prov.tool) == (
        "sess-1",
        "run-1",
        "golem",
        "",
    )


def test_episode_defaults() -> None:
    cand = only(accept(EPISODE, episode()))
    assert cand.importance == 0.3  # a routine observation, derived by score_importance
    assert cand.tick is None
    assert cand.block is None
    assert cand.tags == ()
    assert cand.provenance.session_id == ""


def test_action_episode_is_in_the_action_layer() -> None:
    assert only(accept(EPISODE, episode(episode_type="action"))).layer is Layer.ACTION
    assert only(accept(EPISODE, episode(episode_type="alert"))).layer is Layer.OBSERVATION


def test_limits_are_inclusive() -> None:
    assert only(accept(EPISODE, episode(text="y" * 50), SMALL)).text == "y" * 50
    assert accept(EPISODE, episode(ts=946_684_800_000)).ts_ms == 946_684_800_000
    assert accept(EPISODE, episode(ts=4_102_444_800_000)).ts_ms == 4_102_444_800_000
    assert only(accept(EPISODE, episode(importance=0))).importance == 0.0
    assert only(accept(EPISODE, episode(importance=1))).importance == 1.0
    assert only(accept(EPISODE, episode(tick=0))).tick == 0


def test_text_keeps_newlines_and_tabs_but_collapses_them() -> None:
    assert only(accept(EPISODE, episode(text="a\r\nb\tc"))).text == "a b c"


@pytest.mark.parametrize(
    ("ts", "expected"),
    [
        pytest.param(TS, TS, id="epoch-ms"),
        pytest.param(1_767_225_600_123.9, 1_767_225_600_123, id="epoch-ms-float"),
        pytest.param("2026-01-01T00:00:00Z", 1_767_225_600_000, id="iso-z"),
        pytest.param("2026-01-01T00:00:00+00:00", 1_767_225_600_000, id="iso-utc-offset"),
        pytest.param("2026-01-01T02:00:00+02:00", 1_767_225_600_000, id="iso-plus-2"),
        pytest.param("2025-12-31T19:00:00-05:00", 1_767_225_600_000, id="iso-minus-5"),
        pytest.param("2026-01-01T00:00:00.250Z", 1_767_225_600_250, id="iso-millis"),
        pytest.param("2000-01-01T00:00:00Z", 946_684_800_000, id="iso-2000"),
    ],
)
def test_timestamps(ts: object, expected: int) -> None:
    assert only(accept(EPISODE, episode(ts=ts))).ts_ms == expected


def _exact_ms(dt: datetime) -> int:
    return (dt - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


@pytest.mark.parametrize(
    "iso",
    ["2039-07-06T01:24:33.693Z", "2039-03-01T09:47:14.436Z", "2038-09-10T09:42:49.752Z"],
)
def test_iso_millisecond_timestamps_after_2038_are_exact(iso: str) -> None:
    """parse_iso_ms goes through float seconds and truncates: x.693 s can become x692 ms."""
    dt = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    expected = _exact_ms(dt)
    assert expected % 1000 == int(iso[20:23])  # sanity of the hand computation
    assert only(accept(EPISODE, episode(ts=iso))).ts_ms == expected


def test_tool_event_error_text_has_tool_error_paths_and_urls() -> None:
    raw = tool_event(
        tool="bash",
        result=DROP,
        error="exit 1: No such file",
        paths=["/etc/app/config.yaml"],
        urls=["https://example.com/doc"],
        args={"cmd": "cat"},
        latency_ms=12.5,
    )
    cand = only(accept(TOOL, raw))
    assert cand.layer is Layer.ACTION
    assert cand.provenance.tool == "bash"
    assert cand.provenance.event_type == "tool"
    for piece in (
        "bash",
        "exit 1: No such file",
        "/etc/app/config.yaml",
        "https://example.com/doc",
    ):
        assert piece in cand.text
    assert "fail" in cand.text


def test_tool_event_result_text() -> None:
    cand = only(accept(TOOL, tool_event(tool="grep", result="3 matches in src")))
    assert "grep" in cand.text
    assert "3 matches in src" in cand.text
    assert "fail" not in cand.text


def _parts(line: object, **overrides: Any) -> tuple[MemoryCandidate, ...]:
    return tuple(accept(TRANSCRIPT, transcript(line=line, **overrides)).candidates)


def test_transcript_user_blocks() -> None:
    line = {
        "role": "user",
        "content": [
            {"type": "text", "text": "please  read\nconfig"},
            {
                "type": "tool_result",
                "tool_use_id": "tu_1",
                "is_error": True,
                "content": [{"type": "text", "text": "permission denied"}],
            },
        ],
    }
    parts = _parts(line, event_id="ev-t")
    assert [p.layer for p in parts] == [Layer.INPUT, Layer.OBSERVATION]
    assert parts[0].text == "please read config"
    assert parts[1].text.startswith("tool_error")
    assert "permission denied" in parts[1].text
    assert all(p.provenance.event_type == "transcript" for p in parts)


def test_transcript_tool_result_without_error_flag() -> None:
    line = {"role": "user", "content": [{"type": "tool_result", "content": "42 lines"}]}
    (part,) = _parts(line)
    assert part.layer is Layer.OBSERVATION
    assert not part.text.startswith("tool_error")
    assert "42 lines" in part.text


def test_transcript_assistant_blocks() -> None:
    line = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "the config is probably stale"},
            {
                "type": "tool_use",
                "id": "tu_1",
                "name": "Read",
                "input": {"path": "app/config.yaml"},
            },
            {"type": "text", "text": "Done, config updated."},
        ],
    }
    parts = _parts(line)
    assert [p.layer for p in parts] == [Layer.CONTEMPLATION, Layer.ACTION, Layer.OUTPUT]
    assert parts[0].text == "the config is probably stale"
    assert parts[1].provenance.tool == "Read"
    assert "Read" in parts[1].text
    assert "app/config.yaml" in parts[1].text
    assert parts[2].text == "Done, config updated."
    assert len({p.id for p in parts}) == 3
    assert {p.ts_ms for p in parts} == {TS}
    assert len({p.provenance.source_event_id for p in parts}) == 1


def test_transcript_string_content() -> None:
    (part,) = _parts({"role": "user", "content": "  hello   there "})
    assert (part.layer, part.text) == (Layer.INPUT, "hello there")
    (reply,) = _parts({"role": "assistant", "content": "hi"})
    assert reply.layer is Layer.OUTPUT


def test_transcript_claude_wrapper_and_bare_forms_agree() -> None:
    blocks = [{"type": "text", "text": "ship it"}]
    wrapped = {"type": "assistant", "message": {"role": "assistant", "content": blocks}}
    bare = {"role": "assistant", "content": blocks}
    (w,) = _parts(wrapped, event_id="ev-1")
    (b,) = _parts(bare, event_id="ev-1")
    assert (w.layer, w.text) == (Layer.OUTPUT, "ship it")
    assert (b.layer, b.text) == (Layer.OUTPUT, "ship it")
    assert w.id == b.id  # same agent, event id, part and ts


def test_transcript_line_may_be_a_json_string() -> None:
    line = orjson.dumps({"role": "user", "content": "from a jsonl file"}).decode()
    (part,) = _parts(line)
    assert (part.layer, part.text) == (Layer.INPUT, "from a jsonl file")


def test_transcript_skips_blank_text_blocks() -> None:
    line = {
        "role": "assistant",
        "content": [{"type": "text", "text": "   "}, {"type": "text", "text": "real"}],
    }
    (part,) = _parts(line)
    assert part.text == "real"


# --- determinism and ids ------------------------------------------------------------


def test_same_payload_normalizes_identically() -> None:
    raw = transcript(
        line={
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "x"}, {"type": "text", "text": "y"}],
        }
    )
    assert accept(TRANSCRIPT, raw) == accept(TRANSCRIPT, raw)
    assert accept(EPISODE, episode()) == accept(EPISODE, episode())


def test_content_id_ignores_key_order() -> None:
    forward = {"agent_id": AGENT, "ts": TS, "text": "t", "meta": {"a": 1, "b": 2}}
    backward = {"meta": {"b": 2, "a": 1}, "text": "t", "ts": TS, "agent_id": AGENT}
    raw_f, raw_b = orjson.dumps(forward), orjson.dumps(backward)
    assert raw_f != raw_b
    first, second = accept(EPISODE, raw_f), accept(EPISODE, raw_b)
    assert first.source_event_id.startswith("sha256:")
    assert first.source_event_id == second.source_event_id
    assert only(first).id == only(second).id


def test_content_id_ignores_whitespace_between_tokens() -> None:
    compact = b'{"agent_id":"agent-1","ts":1767225600000,"text":"t"}'
    spaced = b'{ "agent_id" : "agent-1",\n "ts": 1767225600000, "text": "t" }'
    assert only(accept(EPISODE, compact)).id == only(accept(EPISODE, spaced)).id


def test_content_id_changes_with_content() -> None:
    one = accept(EPISODE, episode(text="disk full"))
    two = accept(EPISODE, episode(text="disk empty"))
    assert one.source_event_id != two.source_event_id
    assert only(one).id != only(two).id


def test_event_id_pins_the_memory_id_regardless_of_text() -> None:
    one = only(accept(EPISODE, episode(event_id="ev-9", text="first wording")))
    two = only(accept(EPISODE, episode(event_id="ev-9", text="second wording", tags=["x"])))
    assert one.id == two.id
    assert one.provenance.source_event_id == "ev-9"


def test_id_depends_on_agent_event_and_ts() -> None:
    base = only(accept(EPISODE, episode(event_id="ev-9"))).id
    other_agent = only(accept(EPISODE, episode(event_id="ev-9", agent_id="agent-2"))).id
    other_event = only(accept(EPISODE, episode(event_id="ev-10"))).id
    other_ts = only(accept(EPISODE, episode(event_id="ev-9", ts=TS + 1))).id
    assert len({base, other_agent, other_event, other_ts}) == 4


def test_different_agents_never_share_ids() -> None:
    # Identical payloads apart from the agent: content ids and memory ids both differ.
    a = only(accept(EPISODE, episode(agent_id="a")))
    b = only(accept(EPISODE, episode(agent_id="b")))
    assert a.id != b.id
    assert a.provenance.source_event_id != b.provenance.source_event_id
    # With a shared event id the agent alone still separates them.
    c = only(accept(EPISODE, episode(agent_id="a", event_id="ev-1")))
    d = only(accept(EPISODE, episode(agent_id="b", event_id="ev-1")))
    assert c.id != d.id
