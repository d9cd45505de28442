"""Decoding an outcome event: a malformed one is dead-lettered, never applied."""

from __future__ import annotations

import orjson

from grimoire.streams.clade.copies import ROUTE_FIELD, parse_route, without_route
from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.inbound.events import UNSUPPORTED_SCHEMA, Rejection, decode_object
from grimoire.streams.inbound.validators import (
    INVALID_VALUE,
    OVERSIZE,
    Fields,
    InputLimits,
    plausible_agent_id,
)
from grimoire.streams.learn.outcomes import Outcome, OutcomeKind
from grimoire.streams.model.ids import content_event_id

__all__ = ["MAX_OUTCOME_MEMORIES", "OUTCOME_SCHEMA", "parse_outcome"]

OUTCOME_SCHEMA = "grimoire.outcome/1"
MAX_OUTCOME_MEMORIES = 256


def parse_outcome(raw: bytes, limits: InputLimits) -> Outcome | Rejection:
    agent_id: str | None = None
    try:
        data = Fields(decode_object(raw), limits)
        agent_id = plausible_agent_id(data.data, limits)
        schema = data.text("schema")
        if schema and schema != OUTCOME_SCHEMA:
            raise InvalidEvent(UNSUPPORTED_SCHEMA, f"expected {OUTCOME_SCHEMA}", "schema")
        kind_text = data.identifier("outcome", required=True)
        try:
            kind = OutcomeKind(kind_text)
        except ValueError:
            known = ", ".join(k.value for k in OutcomeKind)
            raise InvalidEvent(
                INVALID_VALUE, f"'outcome' must be one of {known}", "outcome"
            ) from None
        memory_ids = data.string_list("memory_ids")
        if len(memory_ids) > MAX_OUTCOME_MEMORIES:
            raise InvalidEvent(OVERSIZE, f"at most {MAX_OUTCOME_MEMORIES} memory_ids", "memory_ids")
        quality = data.unit_float("quality", 0.0) if data.data.get("quality") is not None else None
        if quality is not None and kind is not OutcomeKind.RUN_ENDED:
            raise InvalidEvent(INVALID_VALUE, "'quality' belongs to run_ended", "quality")
        run_id = data.identifier("run_id")
        if quality is not None and not run_id:
            raise InvalidEvent(INVALID_VALUE, "a run's quality needs its 'run_id'", "run_id")
        event_id = data.identifier("event_id")
        return Outcome(
            outcome_id=event_id
            or content_event_id(
                orjson.dumps(without_route(data.data), option=orjson.OPT_SORT_KEYS)
            ),
            agent_id=data.agent_id(),
            ts_ms=data.timestamp_ms("ts"),
            kind=kind,
            memory_ids=tuple(sorted(set(memory_ids))),
            run_id=run_id,
            quality=quality,
            route=parse_route(data.data.get(ROUTE_FIELD), limits) if quality is not None else (),
        )
    except InvalidEvent as exc:
        return Rejection(exc.reason, exc.detail, exc.field, agent_id)
