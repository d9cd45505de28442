"""Contract: what the SDK's wire records serialize to is what the worker accepts."""

from __future__ import annotations

import orjson
import pytest

from grimoire.streams.inbound.events import SCHEMAS, Accepted, Rejection, normalize_event
from grimoire.streams.inbound.recall_request import (
    RECALL_REQUEST_SCHEMA,
    RecallLimits,
    RecallQuery,
    parse_recall_request,
)
from grimoire.streams.inbound.validators import InputLimits
from grimoire.streams.model.records import EventType, Layer
from grimoire.streams.recall.options import RecallBudgets
from grimoire.topics.schemas import EpisodeV1, RecallRequestV1, ToolEventV1, TranscriptV1

LIMITS = InputLimits()
TS = 1_767_225_600_000
USER_LINE = {"role": "user", "content": "x"}


def accepted(event_type: EventType, raw: bytes) -> Accepted:
    outcome = normalize_event(event_type, raw, LIMITS)
    assert isinstance(outcome, Accepted), outcome
    return outcome


def test_episode_record_is_accepted_with_its_fields() -> None:
    record = EpisodeV1(
        agent_id="golem-7",
        ts=TS,
        text="ETH funding flipped negative",
        event_id="ev-1",
        episode_type="action",
        tick=42,
        block=19_000_000,
        outcome="ok",
        importance=0.8,
        regime="bear",
        tags=["market", "funding"],
        run_id="run-1",
        session_id="sess-1",
        actor_id="strategist",
    )
    result = accepted(EventType.EPISODE, record.dumps_json())
    assert (result.agent_id, result.source_event_id, result.ts_ms) == ("golem-7", "ev-1", TS)
    (cand,) = result.candidates
    assert cand.text == "ETH funding flipped negative"
    assert cand.layer is Layer.ACTION
    assert (cand.tick, cand.block) == (42, 19_000_000)
    assert cand.tags == ("market", "funding")
    assert cand.importance == 0.8
    assert cand.regime == "bear"
    prov = cand.provenance
    assert (prov.session_id, prov.run_id, prov.actor_id) == ("sess-1", "run-1", "strategist")


def test_minimal_episode_record() -> None:
    raw = EpisodeV1(agent_id="golem-7", ts=TS, text="tick").dumps_json()
    (cand,) = accepted(EventType.EPISODE, raw).candidates
    assert cand.layer is Layer.OBSERVATION
    assert cand.provenance.source_event_id.startswith("sha256:")


def test_tool_event_record_is_accepted_with_its_fields() -> None:
    record = ToolEventV1(
        agent_id="coder-1",
        ts=TS,
        tool="pytest",
        event_id="ev-2",
        args={"path": "tests/unit", "flags": ["-q"]},
        args_digest="sha256:abc",
        error="2 failed",
        paths=["tests/unit/test_x.py"],
        urls=["https://docs.pytest.org"],
        latency_ms=812.5,
        tick=7,
        run_id="run-2",
        session_id="sess-2",
        tags=["ci"],
    )
    (cand,) = accepted(EventType.TOOL, record.dumps_json()).candidates
    assert cand.provenance.tool == "pytest"
    assert (cand.tick, cand.tags) == (7, ("ci",))
    assert (cand.provenance.run_id, cand.provenance.session_id) == ("run-2", "sess-2")
    for piece in ("pytest", "2 failed", "tests/unit/test_x.py", "https://docs.pytest.org"):
        assert piece in cand.text


def test_transcript_record_is_accepted_with_its_fields() -> None:
    record = TranscriptV1(
        agent_id="coder-1",
        ts=TS,
        line={
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "check the lockfile"},
                {"type": "tool_use", "name": "Bash", "input": {"command": "uv lock"}},
            ],
        },
        event_id="ev-3",
        session_id="sess-3",
        run_id="run-3",
        tick=9,
    )
    parts = accepted(EventType.TRANSCRIPT, record.dumps_json()).candidates
    assert [p.layer for p in parts] == [Layer.CONTEMPLATION, Layer.ACTION]
    assert parts[1].provenance.tool == "Bash"
    assert all(p.tick == 9 for p in parts)
    assert all(p.provenance.session_id == "sess-3" for p in parts)
    assert all(p.provenance.run_id == "run-3" for p in parts)


@pytest.mark.parametrize(
    ("record", "event_type"),
    [
        (EpisodeV1(agent_id="a", ts=TS, text="t"), EventType.EPISODE),
        (ToolEventV1(agent_id="a", ts=TS, tool="t"), EventType.TOOL),
        (
            TranscriptV1(agent_id="a", ts=TS, line={"role": "user", "content": "x"}),
            EventType.TRANSCRIPT,
        ),
    ],
    ids=["episode", "tool", "transcript"],
)
def test_schema_field_matches_the_normalizer(record: object, event_type: EventType) -> None:
    assert record.schema == SCHEMAS[event_type]  # type: ignore[attr-defined]
    decoded = orjson.loads(record.dumps_json())  # type: ignore[attr-defined]
    assert decoded["schema"] == SCHEMAS[event_type]
    accepted(event_type, record.dumps_json())  # type: ignore[attr-defined]


def test_records_are_rejected_on_the_wrong_stream() -> None:
    raw = EpisodeV1(agent_id="a", ts=TS, text="t").dumps_json()
    outcome = normalize_event(EventType.TOOL, raw, LIMITS)
    assert isinstance(outcome, Rejection)
    assert outcome.reason == "unsupported_schema"


def test_none_fields_are_omitted() -> None:
    decoded = orjson.loads(EpisodeV1(agent_id="a", ts=TS, text="t").dumps_json())
    assert set(decoded) == {"agent_id", "ts", "text", "episode_type", "schema"}
    decoded = orjson.loads(ToolEventV1(agent_id="a", ts=TS, tool="t").dumps_json())
    assert set(decoded) == {"agent_id", "ts", "tool", "schema"}
    request = RecallRequestV1(agent_id="a", query="q", reply_to="r", correlation_id="c")
    assert set(orjson.loads(request.dumps_json())) == {
        "agent_id",
        "query",
        "reply_to",
        "correlation_id",
        "schema",
    }


def test_recall_request_record_is_accepted() -> None:
    record = RecallRequestV1(
        agent_id="golem-7",
        query="funding flip",
        reply_to="grimoire.replies.sdk-1",
        correlation_id="corr-1",
        k=5,
        as_of=TS,
    )
    assert record.schema == RECALL_REQUEST_SCHEMA
    assert orjson.loads(record.dumps_json())["schema"] == RECALL_REQUEST_SCHEMA
    result = parse_recall_request(record.dumps_json(), RecallLimits(), LIMITS)
    assert result == RecallQuery(
        agent_id="golem-7",
        query="funding flip",
        reply_to="grimoire.replies.sdk-1",
        correlation_id="corr-1",
        as_of_ms=TS,
        budgets=RecallBudgets(max_items=5),
    )


def test_minimal_recall_request_record_gets_default_k() -> None:
    record = RecallRequestV1(agent_id="a", query="q", reply_to="r", correlation_id="c")
    result = parse_recall_request(
        record.dumps_json(), RecallLimits(defaults=RecallBudgets(max_items=4)), LIMITS
    )
    assert isinstance(result, RecallQuery)
    assert (result.k, result.as_of_ms) == (4, None)
