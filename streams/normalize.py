"""Raw input bytes → validated memory candidates, or a reason to dead-letter them.

One function per input stream. Each is pure: it sees only the payload and the
limits, so a replay of the log reproduces every decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.fields import INVALID_VALUE, Fields, InputLimits
from grimoire.streams.ids import content_event_id, memory_id
from grimoire.streams.records import EventType, Kind, Layer, MemoryCandidate, Provenance
from grimoire.streams.text import normalize_text, normalized_hash
from grimoire.streams.transcript import TranscriptPart, transcript_parts

INVALID_JSON = "invalid_json"
NOT_AN_OBJECT = "not_an_object"
UNSUPPORTED_SCHEMA = "unsupported_schema"

SCHEMAS: Mapping[EventType, str] = {
    EventType.EPISODE: "grimoire.episode/1",
    EventType.TOOL: "grimoire.tool_event/1",
    EventType.TRANSCRIPT: "grimoire.transcript/1",
}

EPISODE_TYPES = frozenset(
    {"observation", "action", "regime_shift", "alert", "report", "coordination"}
)


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why an input cannot become memory; `reason` is a stable machine-readable code."""

    reason: str
    detail: str
    field: str | None
    agent_id: str | None


@dataclass(frozen=True, slots=True)
class Accepted:
    agent_id: str
    source_event_id: str
    ts_ms: int
    candidates: tuple[MemoryCandidate, ...]


def decode_object(raw: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent(INVALID_JSON, str(exc)) from exc
    if not isinstance(value, dict):
        raise InvalidEvent(NOT_AN_OBJECT, f"payload is a JSON {type(value).__name__}")
    return value


def normalize_event(event_type: EventType, raw: bytes, limits: InputLimits) -> Accepted | Rejection:
    """Validate one raw payload of the given stream; never raises on bad input."""
    agent_id: str | None = None
    try:
        data = decode_object(raw)
        fields = Fields(data, limits)
        maybe_agent = data.get("agent_id")
        agent_id = maybe_agent if isinstance(maybe_agent, str) and maybe_agent else None
        return _NORMALIZERS[event_type](fields)
    except InvalidEvent as exc:
        return Rejection(exc.reason, exc.detail, exc.field, agent_id)


def _check_schema(fields: Fields, event_type: EventType) -> None:
    schema = fields.text("schema")
    if schema and schema != SCHEMAS[event_type]:
        raise InvalidEvent(
            UNSUPPORTED_SCHEMA, f"expected {SCHEMAS[event_type]}, got {schema}", "schema"
        )


def _source_event_id(fields: Fields) -> str:
    given = fields.identifier("event_id")
    if given:
        return given
    return content_event_id(orjson.dumps(fields.data, option=orjson.OPT_SORT_KEYS))


@dataclass(frozen=True, slots=True)
class _Common:
    agent_id: str
    source_event_id: str
    ts_ms: int
    tick: int | None
    block: int | None
    session_id: str
    run_id: str
    actor_id: str
    tags: tuple[str, ...]
    regime: str


def _common(fields: Fields, event_type: EventType) -> _Common:
    _check_schema(fields, event_type)
    return _Common(
        agent_id=fields.identifier("agent_id", required=True),
        source_event_id=_source_event_id(fields),
        ts_ms=fields.timestamp_ms("ts"),
        tick=fields.integer("tick"),
        block=fields.integer("block"),
        session_id=fields.identifier("session_id"),
        run_id=fields.identifier("run_id"),
        actor_id=fields.identifier("actor_id"),
        tags=fields.string_list("tags"),
        regime=fields.text("regime", max_chars=fields.limits.max_id_chars),
    )


def _candidate(
    common: _Common,
    event_type: EventType,
    part: int,
    text: str,
    layer: Layer,
    *,
    tool: str = "",
    importance: float = 0.5,
) -> MemoryCandidate:
    clean = normalize_text(text)
    return MemoryCandidate(
        id=memory_id(common.agent_id, common.source_event_id, part, common.ts_ms),
        agent_id=common.agent_id,
        kind=Kind.EPISODE,
        layer=layer,
        text=clean,
        ts_ms=common.ts_ms,
        provenance=Provenance(
            source_event_id=common.source_event_id,
            event_type=event_type.value,
            session_id=common.session_id,
            run_id=common.run_id,
            actor_id=common.actor_id,
            tool=tool,
        ),
        normalized_hash=normalized_hash(clean),
        tick=common.tick,
        block=common.block,
        tags=common.tags,
        importance=importance,
        regime=common.regime,
    )


def _accepted(common: _Common, candidates: list[MemoryCandidate]) -> Accepted:
    return Accepted(common.agent_id, common.source_event_id, common.ts_ms, tuple(candidates))


def _episode(fields: Fields) -> Accepted:
    common = _common(fields, EventType.EPISODE)
    text = fields.text("text", required=True)
    episode_type = fields.text("episode_type") or "observation"
    if episode_type not in EPISODE_TYPES:
        raise InvalidEvent(INVALID_VALUE, f"unknown episode_type {episode_type!r}", "episode_type")
    fields.text("outcome")
    importance = fields.unit_float("importance", 0.5)
    layer = Layer.ACTION if episode_type == "action" else Layer.OBSERVATION
    candidate = _candidate(common, EventType.EPISODE, 0, text, layer, importance=importance)
    return _accepted(common, [candidate])


def _tool_event(fields: Fields) -> Accepted:
    common = _common(fields, EventType.TOOL)
    tool = fields.identifier("tool", required=True)
    result = fields.text("result")
    error = fields.text("error")
    fields.mapping("args")
    fields.text("args_digest", max_chars=fields.limits.max_id_chars)
    paths = fields.string_list("paths")
    urls = fields.string_list("urls")
    latency = fields.number("latency_ms")
    if latency is not None and latency < 0:
        raise InvalidEvent(INVALID_VALUE, "'latency_ms' must be >= 0", "latency_ms")
    outcome = f"failed: {error}" if error else (f"returned: {result}" if result else "returned")
    text = " ".join([f"tool {tool} {outcome}", *paths, *urls])
    candidate = _candidate(common, EventType.TOOL, 0, text, Layer.ACTION, tool=tool)
    return _accepted(common, [candidate])


def _transcript(fields: Fields) -> Accepted:
    common = _common(fields, EventType.TRANSCRIPT)
    line: Any = fields.data.get("line")
    if isinstance(line, str):
        fields.text("line")
        try:
            line = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise InvalidEvent("invalid_json", f"'line' is not JSON: {exc}", "line") from exc
    parts: list[TranscriptPart] = transcript_parts(line, fields.limits)
    candidates = [
        _candidate(common, EventType.TRANSCRIPT, index, part.text, part.layer, tool=part.tool)
        for index, part in enumerate(parts)
    ]
    return _accepted(common, candidates)


_NORMALIZERS = {
    EventType.EPISODE: _episode,
    EventType.TOOL: _tool_event,
    EventType.TRANSCRIPT: _transcript,
}
