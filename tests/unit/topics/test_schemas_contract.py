"""Contract: what the SDK's wire records serialize to is what the worker accepts."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import orjson
import pytest

from grimoire.streams.inbound.events import SCHEMAS, Rejection, normalize_event
from grimoire.streams.inbound.recall_request import (
    RECALL_REQUEST_SCHEMA,
    RecallLimits,
    RecallQuery,
    parse_recall_request,
)
from grimoire.streams.inbound.validators import InputLimits
from grimoire.streams.model.records import EventType, Layer
from grimoire.streams.recall.options import RetrievalBudgets
from grimoire.topics import schemas
from grimoire.topics.schemas import (
    EpisodeV1,
    MaintenanceCommandV1,
    RecallItemV1,
    RecallRequestV1,
    RecallResultV1,
    ToolEventV1,
    TranscriptV1,
)
from tests.support.inbound import accept

LIMITS = InputLimits()
TS = 1_767_225_600_000
USER_LINE = {"role": "user", "content": "x"}


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
    result = accept(EventType.EPISODE, record.dumps_json())
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
    (cand,) = accept(EventType.EPISODE, raw).candidates
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
    (cand,) = accept(EventType.TOOL, record.dumps_json()).candidates
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
    parts = accept(EventType.TRANSCRIPT, record.dumps_json()).candidates
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
    accept(event_type, record.dumps_json())  # type: ignore[attr-defined]


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
        budgets=RetrievalBudgets(max_items=5),
    )


def test_minimal_recall_request_record_gets_default_k() -> None:
    record = RecallRequestV1(agent_id="a", query="q", reply_to="r", correlation_id="c")
    result = parse_recall_request(
        record.dumps_json(), RecallLimits(defaults=RetrievalBudgets(max_items=4)), LIMITS
    )
    assert isinstance(result, RecallQuery)
    assert (result.k, result.as_of_ms) == (4, None)


# The wire field names in declaration order (= JSON key order). Renaming or reordering
# one is a wire change: bump the schema version instead of editing this table.
FIELDS: dict[str, tuple[str, ...]] = {
    "DeadLetterV1": (
        "reason", "detail", "source_topic", "field", "agent_id", "partition", "offset",
        "payload", "schema",
    ),
    "EpisodeV1": (
        "agent_id", "ts", "text", "event_id", "episode_type", "tick", "block", "outcome",
        "importance", "regime", "tags", "run_id", "session_id", "actor_id", "kind", "error",
        "paths", "urls", "channel", "entities", "affect", "provenance", "decay_class",
        "pinned", "schema",
    ),
    "FactV1": (
        "agent_id", "ts", "subject", "predicate", "object", "valid_from", "object_is_entity",
        "event_id", "schema",
    ),
    "FactQueryV1": (
        "agent_id", "query", "reply_to", "correlation_id", "block", "ts", "subject",
        "predicate", "entity", "hops", "api_key", "schema",
    ),
    "FactResultV1": (
        "correlation_id", "agent_id", "query", "facts", "neighbours", "error", "schema",
    ),
    "MaintenanceCommandV1": (
        "agent_id", "reason", "force_compaction", "issued_by", "pressure", "schema",
    ),
    "WitnessEventV1": (
        "agent_id", "seq", "journal_partition", "journal_offset", "op", "ids",
        "fields_digest", "prev_hash", "hash", "type", "schema",
    ),
    "CommandV1": (
        "agent_id", "command", "source_event_id", "memory_id", "config", "import_chunk", "clade",
        "ts", "event_id", "api_key", "schema",
    ),
    "CladeMessageV1": (
        "agent_id", "op", "origin_agent_id", "origin_memory_id", "clade", "ts", "event_id",
        "entry", "success", "issued_by", "schema",
    ),
    "MaintenanceEventV1": (
        "type", "agent_id", "tick", "ts", "worker", "tasks", "postponed", "pressure", "report",
        "schema",
    ),
    "MemoryEventV1": (
        "type", "agent_id", "memory_id", "source_event_id", "kind", "layer", "ts",
        "candidate_id", "action", "reason", "confidence", "quality", "admission", "off_topic",
        "target_id", "nexus_keys", "hyperedge_id", "schema",
    ),
    "OutcomeV1": (
        "agent_id", "ts", "outcome", "memory_ids", "run_id", "quality", "event_id", "schema",
    ),
    "RecallItemV1": (
        "id", "agent_id", "kind", "layer", "gist", "ts", "score", "lanes", "source_event_id",
        "text", "reasons", "scores", "tokens", "session_id", "hyperedge_ids", "episode",
        "causal", "evidence", "origin",
    ),
    "RecallRequestV1": (
        "agent_id", "query", "reply_to", "correlation_id", "k", "as_of", "filters", "budgets",
        "state", "mode", "explain", "expand_episodes", "record_usage", "serving_run_id",
        "include_causal", "api_key", "schema",
    ),
    "RecallResultV1": (
        "correlation_id", "agent_id", "items", "watermark", "watermark_tick",
        "watermark_block", "as_of", "mode", "budget", "timings_ms", "error", "learning",
        "embedded_query", "schema",
    ),
    "ToolEventV1": (
        "agent_id", "ts", "tool", "event_id", "args", "args_digest", "result", "error",
        "paths", "urls", "latency_ms", "tick", "run_id", "session_id", "tags", "actor_id",
        "channel", "entities", "affect", "provenance", "decay_class", "pinned", "schema",
    ),
    "TranscriptV1": (
        "agent_id", "ts", "line", "event_id", "session_id", "run_id", "tick", "turn_id",
        "actor_id", "tags", "channel", "entities", "affect", "provenance", "decay_class",
        "pinned", "schema",
    ),
}  # fmt: skip


def test_every_wire_record_is_pinned() -> None:
    assert sorted(schemas.__all__) == sorted(FIELDS)


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_wire_field_names_are_pinned(name: str) -> None:
    record_type = getattr(schemas, name)
    assert tuple(f.name for f in dataclasses.fields(record_type)) == FIELDS[name]
    params = record_type.__dataclass_params__
    assert params.frozen  # a record is a value: sent as built


def item(**extra: object) -> RecallItemV1:
    fields: dict[str, object] = {
        "id": "m-1",
        "agent_id": "a",
        "kind": "episode",
        "layer": "observation",
        "gist": "disk full",
        "ts": TS,
        "score": 0.5,
        "lanes": ["canonical"],
        "source_event_id": "ev-1",
    }
    return RecallItemV1(**{**fields, **extra})  # type: ignore[arg-type]


def test_json_bytes_are_those_of_the_faust_records() -> None:
    # Byte for byte what the Faust-based records wrote: top-level None fields dropped,
    # declaration order, a nested record's None fields kept (they were never stripped).
    command = MaintenanceCommandV1(agent_id="a", force_compaction=False)
    assert command.dumps_json() == (
        b'{"agent_id":"a","reason":"block","force_compaction":false,'
        b'"schema":"grimoire.maintenance_command/1"}'
    )
    result = RecallResultV1(
        correlation_id="c", agent_id="a", items=[item(scores={"a": 1.0})], watermark=3
    )
    assert result.dumps_json() == (
        b'{"correlation_id":"c","agent_id":"a","items":[{"id":"m-1","agent_id":"a",'
        b'"kind":"episode","layer":"observation","gist":"disk full","ts":1767225600000,'
        b'"score":0.5,"lanes":["canonical"],"source_event_id":"ev-1","text":null,'
        b'"reasons":null,"scores":{"a":1.0},"tokens":null,"session_id":null,'
        b'"hyperedge_ids":null,"episode":null,"causal":null,"evidence":null,"origin":null}],"watermark":3,'
        b'"schema":"grimoire.recall_result/1"}'
    )


def test_a_result_decodes_back_into_records() -> None:
    sent = RecallResultV1(
        correlation_id="c",
        agent_id="a",
        items=[item(text="the full text", episode=[{"id": "m-2", "role": "outcome"}])],
        budget={"tokens_used": 7},
    )
    decoded = orjson.loads(sent.dumps_json())
    decoded["added_by_a_newer_worker"] = True  # unknown keys are ignored
    decoded["items"][0]["also_new"] = 1
    assert RecallResultV1.from_wire(decoded) == sent
    assert RecallItemV1.from_wire(decoded["items"][0]) == sent.items[0]
    with pytest.raises(TypeError):
        RecallItemV1.from_wire({"id": "m-1"})  # required fields missing


def test_asdict_keeps_every_field() -> None:
    assert item().asdict() == {name: getattr(item(), name) for name in FIELDS["RecallItemV1"]}


def test_records_are_keyword_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        EpisodeV1("a", TS, "t")  # type: ignore[misc]
    record = EpisodeV1(agent_id="a", ts=TS, text="t")
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.text = "changed"  # type: ignore[misc]


def test_the_schemas_import_without_faust() -> None:
    # The SDK installs without Faust: importing the records must not need it.
    code = (
        "import sys, grimoire.topics.schemas; "
        "sys.exit(','.join(m for m in ('faust', 'mode') if m in sys.modules) or None)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
