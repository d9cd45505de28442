"""Validation of recall requests into a frozen query value."""

from __future__ import annotations

import re
from dataclasses import dataclass

from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.fields import INVALID_VALUE, Fields, InputLimits, plausible_agent_id
from grimoire.streams.normalize import UNSUPPORTED_SCHEMA, Rejection, decode_object

RECALL_REQUEST_SCHEMA = "grimoire.recall_request/1"
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


@dataclass(frozen=True, slots=True)
class RecallQuery:
    agent_id: str
    query: str
    k: int
    reply_to: str
    correlation_id: str
    as_of_ms: int | None


@dataclass(frozen=True, slots=True)
class RecallLimits:
    default_k: int = 10
    max_k: int = 100
    max_query_chars: int = 4_000


def parse_recall_request(
    raw: bytes, limits: RecallLimits, input_limits: InputLimits
) -> RecallQuery | Rejection:
    agent_id: str | None = None
    try:
        fields = Fields(decode_object(raw), input_limits)
        agent_id = plausible_agent_id(fields.data, fields.limits)
        schema = fields.text("schema")
        if schema and schema != RECALL_REQUEST_SCHEMA:
            raise InvalidEvent(UNSUPPORTED_SCHEMA, f"expected {RECALL_REQUEST_SCHEMA}", "schema")
        reply_to = fields.identifier("reply_to", required=True)
        if not _TOPIC_NAME.match(reply_to):
            raise InvalidEvent(INVALID_VALUE, "'reply_to' is not a valid topic name", "reply_to")
        k = fields.integer("k", minimum=1)
        if k is not None and k > limits.max_k:
            raise InvalidEvent(INVALID_VALUE, f"'k' must be <= {limits.max_k}", "k")
        as_of = fields.timestamp_ms("as_of") if fields.data.get("as_of") is not None else None
        return RecallQuery(
            agent_id=fields.identifier("agent_id", required=True),
            query=fields.text("query", required=True, max_chars=limits.max_query_chars),
            k=k or limits.default_k,
            reply_to=reply_to,
            correlation_id=fields.identifier("correlation_id", required=True),
            as_of_ms=as_of,
        )
    except InvalidEvent as exc:
        return Rejection(exc.reason, exc.detail, exc.field, agent_id)
