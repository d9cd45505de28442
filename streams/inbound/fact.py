"""Decoding a fact assert (`grimoire.fact/1`) and a fact query
(`grimoire.fact_query/1`): a malformed one is dead-lettered, never applied.

An assert names its subject, predicate and object, the block its validity starts
at (`valid_from`) and its event time (`ts`, the transaction time: when the agent
learned it). The object is an entity unless `object_is_entity` is false (a value
such as a fee tier); entity names are normalised as nexus keys normalise them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

import orjson

from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.facts.exceptions import InvalidFact
from grimoire.streams.facts.queries import MAX_HOPS
from grimoire.streams.facts.values import Fact, entity_name, fact_id_for, predicate_name
from grimoire.streams.inbound.events import UNSUPPORTED_SCHEMA, Rejection, decode_object
from grimoire.streams.inbound.recall_request import reply_address
from grimoire.streams.inbound.validators import (
    INVALID_VALUE,
    MISSING_FIELD,
    Fields,
    InputLimits,
    plausible_agent_id,
)
from grimoire.streams.model.ids import content_event_id

__all__ = [
    "FACT_QUERY_SCHEMA",
    "FACT_SCHEMA",
    "MAX_FACT_VALUE_CHARS",
    "FactQuery",
    "FactQueryKind",
    "parse_fact",
    "parse_fact_query",
]

FACT_SCHEMA: Final = "grimoire.fact/1"
FACT_QUERY_SCHEMA: Final = "grimoire.fact_query/1"
MAX_FACT_VALUE_CHARS: Final = 1_000


def _entity(data: Fields, name: str) -> str:
    raw = data.text(name, required=True, max_chars=MAX_FACT_VALUE_CHARS)
    try:
        return entity_name(raw)
    except InvalidFact as exc:
        raise InvalidEvent(INVALID_VALUE, str(exc), name) from None


def parse_fact(raw: bytes, limits: InputLimits) -> Fact | Rejection:
    agent_id: str | None = None
    try:
        data = Fields(decode_object(raw), limits)
        agent_id = plausible_agent_id(data.data, limits)
        schema = data.text("schema")
        if schema and schema != FACT_SCHEMA:
            raise InvalidEvent(UNSUPPORTED_SCHEMA, f"expected {FACT_SCHEMA}", "schema")
        agent = data.agent_id()
        subject = _entity(data, "subject")
        predicate_raw = data.text("predicate", required=True, max_chars=limits.max_id_chars)
        predicate = predicate_name(predicate_raw)
        is_entity = data.boolean("object_is_entity")
        is_entity = True if is_entity is None else is_entity
        if is_entity:
            obj = _entity(data, "object")
        else:
            obj = data.text("object", required=True, max_chars=MAX_FACT_VALUE_CHARS).strip()
        valid_from = data.integer("valid_from", required=True)
        assert valid_from is not None
        ts_ms = data.timestamp_ms("ts")
        event_id = data.identifier("event_id") or content_event_id(
            orjson.dumps(data.data, option=orjson.OPT_SORT_KEYS)
        )
        return Fact(
            fact_id=fact_id_for(agent, event_id),
            agent_id=agent,
            subject=subject,
            predicate=predicate,
            object=obj,
            object_is_entity=is_entity,
            valid_from=valid_from,
            known_from_ms=ts_ms,
            source_event_id=event_id,
        )
    except InvalidEvent as exc:
        return Rejection(exc.reason, exc.detail, exc.field, agent_id)


class FactQueryKind(StrEnum):
    VALID_AT = "valid_at"  # versions holding at `block`, as known now
    AS_KNOWN_AT = "as_known_at"  # what was known at `ts` (optionally at `block`)
    NEIGHBOURS = "neighbours"  # entities within `hops` of `entity`


@dataclass(frozen=True, slots=True)
class FactQuery:
    agent_id: str
    kind: FactQueryKind
    reply_to: str
    correlation_id: str
    block: int | None = None
    ts_ms: int | None = None
    subject: str | None = None
    predicate: str | None = None
    entity: str | None = None
    hops: int = 1


def parse_fact_query(
    raw: bytes, limits: InputLimits, *, reply_namespace: str | None = None
) -> FactQuery | Rejection:
    agent_id: str | None = None
    try:
        data = Fields(decode_object(raw), limits)
        agent_id = plausible_agent_id(data.data, limits)
        schema = data.text("schema")
        if schema and schema != FACT_QUERY_SCHEMA:
            raise InvalidEvent(UNSUPPORTED_SCHEMA, f"expected {FACT_QUERY_SCHEMA}", "schema")
        agent = data.agent_id()
        reply_to, correlation_id = reply_address(data, reply_namespace)
        name = data.identifier("query", required=True)
        try:
            kind = FactQueryKind(name)
        except ValueError:
            known = ", ".join(k.value for k in FactQueryKind)
            raise InvalidEvent(INVALID_VALUE, f"'query' must be one of {known}", "query") from None
        block = data.integer("block")
        subject = _entity(data, "subject") if data.data.get("subject") is not None else None
        predicate: str | None = None
        if data.data.get("predicate") is not None:
            predicate = predicate_name(
                data.text("predicate", required=True, max_chars=limits.max_id_chars)
            )
        ts_ms: int | None = None
        entity: str | None = None
        hops = 1
        if kind is FactQueryKind.VALID_AT and block is None:
            raise InvalidEvent(MISSING_FIELD, "'valid_at' needs 'block'", "block")
        if kind is FactQueryKind.AS_KNOWN_AT:
            ts_ms = data.timestamp_ms("ts")
        if kind is FactQueryKind.NEIGHBOURS:
            entity = _entity(data, "entity")
            asked = data.integer("hops")
            hops = 1 if asked is None else asked
            if hops > MAX_HOPS:
                raise InvalidEvent(INVALID_VALUE, f"'hops' must be at most {MAX_HOPS}", "hops")
        return FactQuery(
            agent_id=agent,
            kind=kind,
            reply_to=reply_to,
            correlation_id=correlation_id,
            block=block,
            ts_ms=ts_ms,
            subject=subject,
            predicate=predicate,
            entity=entity,
            hops=hops,
        )
    except InvalidEvent as exc:
        return Rejection(exc.reason, exc.detail, exc.field, agent_id)
