"""Raw input bytes → validated memory candidates, or a reason to dead-letter them.

One function per input stream. Each is pure: it sees only the payload and the
limits, so a replay of the log reproduces every decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.inbound.transcript import transcript_parts
from grimoire.streams.inbound.validators import (
    INVALID_VALUE,
    OVERSIZE,
    Fields,
    InputLimits,
    plausible_agent_id,
)
from grimoire.streams.model.decay import DecayClass, parse_decay_class
from grimoire.streams.model.field_state import Affect
from grimoire.streams.model.ids import content_event_id, memory_id
from grimoire.streams.model.nexus_keys import KeySource, extract_keys
from grimoire.streams.model.records import (
    PUBLISHED_PROVENANCES,
    EventType,
    HyperedgeRef,
    Kind,
    Layer,
    MemoryCandidate,
    Provenance,
    Role,
)
from grimoire.streams.model.text import normalize_text, normalized_hash
from grimoire.streams.write.quality import score_importance

INVALID_JSON = "invalid_json"
NOT_AN_OBJECT = "not_an_object"
TOO_DEEP = "too_deeply_nested"
# No wire schema nests past a few levels (an object of lists of objects); the
# content id hashes the payload re-encoded, and orjson encodes 254 levels at most.
MAX_NESTING = 32
UNSUPPORTED_SCHEMA = "unsupported_schema"

SCHEMAS: Mapping[EventType, str] = {
    EventType.EPISODE: "grimoire.episode/1",
    EventType.TOOL: "grimoire.tool_event/1",
    EventType.TRANSCRIPT: "grimoire.transcript/1",
}

EPISODE_TYPES = frozenset(
    {"observation", "action", "regime_shift", "alert", "report", "coordination"}
)
# Kinds an agent may publish directly; summaries and aggregates are Grimoire's own.
EPISODE_KINDS = frozenset(
    {"episode", "warning", "insight", "heuristic", "causal_link", "strategy_fragment"}
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
    depth = nesting_depth(value, MAX_NESTING)
    if depth > MAX_NESTING:
        raise InvalidEvent(TOO_DEEP, f"payload nests deeper than {MAX_NESTING} levels")
    return value


def nesting_depth(value: Any, limit: int) -> int:
    """How deep `value` nests (a scalar is 0), counted up to `limit + 1`; iterative,
    so no payload can exhaust the stack."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def normalize_event(event_type: EventType, raw: bytes, limits: InputLimits) -> Accepted | Rejection:
    """Validate one raw payload of the given stream; never raises on bad input."""
    agent_id: str | None = None
    try:
        data = decode_object(raw)
        fields = Fields(data, limits)
        agent_id = plausible_agent_id(data, limits)
        return _NORMALIZERS[event_type](fields)
    except InvalidEvent as exc:
        return Rejection(exc.reason, exc.detail, exc.field, agent_id)


def _check_schema(fields: Fields, event_type: EventType) -> None:
    schema = fields.text("schema")
    if schema and schema != SCHEMAS[event_type]:
        raise InvalidEvent(
            UNSUPPORTED_SCHEMA, f"expected {SCHEMAS[event_type]}, got {schema}", "schema"
        )


# The sequencer's clade route (`grimoire.streams.clade.copies.ROUTE_FIELD`, which
# imports this module): not the producer's, so not part of the event's content.
_ROUTE_FIELD: Final = "clade_route"


def _source_event_id(fields: Fields) -> str:
    given = fields.identifier("event_id")
    if given:
        return given
    sent = {k: v for k, v in fields.data.items() if k != _ROUTE_FIELD}
    return content_event_id(orjson.dumps(sent, option=orjson.OPT_SORT_KEYS))


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
    channel: str
    entities: tuple[str, ...]
    affect: Affect | None
    origin: str  # `Provenance.provenance`
    decay_class: str
    pinned: bool


def _origin(fields: Fields) -> str:
    """The event's `provenance`, lower case; absent or "" reads as "self"."""
    given = fields.identifier("provenance")
    origin = given.casefold().replace("-", "_")
    if not origin:
        return "self"
    if origin not in PUBLISHED_PROVENANCES:
        allowed = ", ".join(sorted(PUBLISHED_PROVENANCES))
        raise InvalidEvent(
            INVALID_VALUE, f"unknown provenance {given!r} (one of {allowed})", "provenance"
        )
    return origin


def _decay_class(fields: Fields) -> str:
    """The event's `decay_class` as stored; "" leaves the kind's half-life."""
    given = fields.identifier("decay_class")
    try:
        parsed = parse_decay_class(given)
    except ValueError as exc:
        allowed = ", ".join(c.value for c in DecayClass)
        raise InvalidEvent(
            INVALID_VALUE, f"unknown decay_class {given!r} (one of {allowed})", "decay_class"
        ) from exc
    return "" if parsed is None else parsed.value


def _common(fields: Fields, event_type: EventType) -> _Common:
    _check_schema(fields, event_type)
    return _Common(
        agent_id=fields.agent_id(),
        source_event_id=_source_event_id(fields),
        ts_ms=fields.timestamp_ms("ts"),
        tick=fields.integer("tick"),
        block=fields.integer("block"),
        session_id=fields.identifier("session_id"),
        run_id=fields.identifier("run_id"),
        actor_id=fields.identifier("actor_id"),
        tags=fields.string_list("tags"),
        regime=fields.text("regime", max_chars=fields.limits.max_id_chars),
        channel=fields.identifier("channel"),
        entities=fields.string_list("entities"),
        affect=fields.affect("affect"),
        origin=_origin(fields),
        decay_class=_decay_class(fields),
        pinned=fields.boolean("pinned") or False,
    )


@dataclass(frozen=True, slots=True)
class _EventPart:
    """One memory an event yields, with what only that part knows."""

    text: str
    layer: Layer
    role: Role | None = None
    tool: str = ""
    error: str = ""
    paths: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()
    kind: Kind = Kind.EPISODE
    importance: float | None = None  # None: derived from kind, type and error evidence
    episode_type: str = ""
    outcome: str = ""
    field: str = "text"  # where the text came from, named by a dead letter
    latency_ms: float | None = None


def _candidates(
    common: _Common,
    event_type: EventType,
    parts: list[_EventPart],
    edge_id: str | None,
    limits: InputLimits,
) -> Accepted:
    if len(parts) > limits.max_parts_per_event:
        raise InvalidEvent(
            OVERSIZE,
            f"the event has {len(parts)} parts, limit {limits.max_parts_per_event}",
            parts[0].field,
        )
    candidates = []
    for index, part in enumerate(parts):
        clean = normalize_text(part.text)
        # The stored text, not just each field, stays within the limit: a tool
        # event's text joins its result, paths and urls.
        if len(clean) > limits.max_text_chars:
            raise InvalidEvent(
                OVERSIZE,
                f"the memory text has {len(clean)} chars after normalisation, "
                f"limit {limits.max_text_chars}",
                part.field,
            )
        keys = extract_keys(
            KeySource(
                text=clean,
                tool=part.tool,
                error=part.error,
                paths=part.paths,
                urls=part.urls,
                tags=common.tags,
                channel=common.channel,
                regime=common.regime,
                entities=common.entities,
                run_id=common.run_id,
                session_id=common.session_id,
            )
        )
        has_error = bool(part.error) or any(key.startswith("err:") for key in keys)
        importance = score_importance(
            kind=part.kind,
            episode_type=part.episode_type,
            explicit=part.importance,
            has_error=has_error,
        )
        hyperedge = HyperedgeRef(edge_id, part.role) if edge_id and part.role is not None else None
        candidates.append(
            MemoryCandidate(
                id=memory_id(common.agent_id, common.source_event_id, index, common.ts_ms),
                agent_id=common.agent_id,
                kind=part.kind,
                layer=part.layer,
                text=clean,
                ts_ms=common.ts_ms,
                provenance=Provenance(
                    source_event_id=common.source_event_id,
                    event_type=event_type.value,
                    session_id=common.session_id,
                    run_id=common.run_id,
                    actor_id=common.actor_id,
                    tool=part.tool,
                    provenance=common.origin,
                ),
                normalized_hash=normalized_hash(clean),
                tick=common.tick,
                block=common.block,
                tags=common.tags,
                importance=importance,
                regime=common.regime,
                keys=keys,
                episode_type=part.episode_type,
                outcome=part.outcome,
                has_error=has_error,
                affect=common.affect,
                hyperedge=hyperedge,
                decay_class=common.decay_class,
                pinned=common.pinned,
                latency_ms=part.latency_ms,
            )
        )
    return Accepted(common.agent_id, common.source_event_id, common.ts_ms, tuple(candidates))


def _optional_unit(fields: Fields, name: str) -> float | None:
    return fields.unit_float(name, 0.0) if fields.data.get(name) is not None else None


def _run_edge(common: _Common) -> str | None:
    return f"run:{common.run_id}" if common.run_id else None


_EPISODE_ROLES = {
    "alert": Role.TRIGGER,
    "regime_shift": Role.TRIGGER,
    "action": Role.ACTION,
    "report": Role.OUTCOME,
    "observation": Role.CONTEXT,
    "coordination": Role.CONTEXT,
}


def _episode(fields: Fields) -> Accepted:
    common = _common(fields, EventType.EPISODE)
    text = fields.text("text", required=True)
    episode_type = fields.text("episode_type") or "observation"
    if episode_type not in EPISODE_TYPES:
        raise InvalidEvent(INVALID_VALUE, f"unknown episode_type {episode_type!r}", "episode_type")
    kind_name = fields.text("kind") or Kind.EPISODE.value
    if kind_name not in EPISODE_KINDS:
        raise InvalidEvent(INVALID_VALUE, f"kind {kind_name!r} cannot be published", "kind")
    outcome = fields.text("outcome", max_chars=fields.limits.max_id_chars)
    part = _EventPart(
        text=text,
        layer=Layer.ACTION if episode_type == "action" else Layer.OBSERVATION,
        role=Role.OUTCOME if outcome else _EPISODE_ROLES[episode_type],
        error=fields.text("error"),
        paths=fields.string_list("paths"),
        urls=fields.string_list("urls"),
        kind=Kind(kind_name),
        importance=_optional_unit(fields, "importance"),
        episode_type=episode_type,
        outcome=outcome,
    )
    return _candidates(common, EventType.EPISODE, [part], _run_edge(common), fields.limits)


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
    part = _EventPart(
        text=" ".join([f"tool {tool} {outcome}", *paths, *urls]),
        layer=Layer.ACTION,
        role=Role.ACTION,
        tool=tool,
        error=error,
        paths=paths,
        urls=urls,
        episode_type="action",  # a tool call is something the agent did
        outcome="error" if error else "ok",
        field="result",
        latency_ms=latency,
    )
    return _candidates(common, EventType.TOOL, [part], _run_edge(common), fields.limits)


def _transcript(fields: Fields) -> Accepted:
    common = _common(fields, EventType.TRANSCRIPT)
    line: Any = fields.data.get("line")
    if line is None:
        raise InvalidEvent("missing_field", "field 'line' is required", "line")
    if isinstance(line, str):
        fields.text("line")
        try:
            line = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise InvalidEvent("invalid_json", f"'line' is not JSON: {exc}", "line") from exc
    turn = fields.identifier("turn_id") or common.run_id or common.source_event_id
    parts = [
        _EventPart(
            text=part.text,
            layer=part.layer,
            role=_LAYER_ROLES[part.layer],
            tool=part.tool,
            error=part.text if part.is_error else "",
            episode_type="action" if part.layer is Layer.ACTION else "dialogue",
            field="line.content",
        )
        for part in transcript_parts(line, fields.limits)
    ]
    return _candidates(common, EventType.TRANSCRIPT, parts, f"turn:{turn}", fields.limits)


# Within a turn: what was heard starts it, thinking is context, tool calls are the
# actions, and what came back or was said is its outcome.
_LAYER_ROLES = {
    Layer.INPUT: Role.TRIGGER,
    Layer.CONTEMPLATION: Role.CONTEXT,
    Layer.ACTION: Role.ACTION,
    Layer.OBSERVATION: Role.OUTCOME,
    Layer.OUTPUT: Role.OUTCOME,
}


_NORMALIZERS = {
    EventType.EPISODE: _episode,
    EventType.TOOL: _tool_event,
    EventType.TRANSCRIPT: _transcript,
}
