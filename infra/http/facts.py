"""The agent's bi-temporal facts over HTTP (docs/design.md §7).

* `GET /v1/agents/{agent}/facts?valid_at=N` (versions holding at block N, as known
  now) or `?known_at=T` (what the agent knew at event time T ms; with `valid_at`
  too, only what held at that block as known then), narrowed by `subject` and
  `predicate`.
* `GET /v1/agents/{agent}/facts/neighbours?entity=&hops=&valid_at=`: entities
  within `hops` links of `entity` over active facts (or those valid at a block).
* `POST /v1/agents/{agent}/facts`: assert a fact (`FactV1`'s fields without
  `agent_id`), checked by the worker's own parser, then published to
  `{prefix}.facts` as the SDK's `assert_fact` does, with the caller's key as its
  `grimoire-api-key` header: journaled and applied (202).

Reads come straight from the fact store, answered by the same code the worker's
fact-query handler runs (`FactQueryHandler.answer`), so HTTP and Kafka answers
are the same."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from grimoire.agents.handlers.facts import FactQueryHandler
from grimoire.infra.http.errors import ApiError, json_response
from grimoire.infra.http.routing import (
    agent_endpoint,
    caller_key,
    deps_of,
    int_param,
    json_object,
    path_agent_record,
    unknown_fields,
)
from grimoire.streams.facts.exceptions import InvalidFact
from grimoire.streams.facts.queries import MAX_HOPS
from grimoire.streams.facts.values import entity_name, predicate_name
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.inbound.fact import FactQuery, FactQueryKind, parse_fact
from grimoire.streams.inbound.validators import INVALID_VALUE, MISSING_FIELD
from grimoire.tables.facts.store import RedisFactStore
from grimoire.topics.schemas import FactResultV1

__all__ = ["FACT_FIELDS", "routes"]

#: What a POST body may hold (`FactV1` without `agent_id` and `schema`).
FACT_FIELDS = frozenset(
    {"ts", "subject", "predicate", "object", "valid_from", "object_is_entity", "event_id"}
)
_MAX_BLOCK = (1 << 63) - 1


class _NoSink:
    """A read answers the caller here, never on a topic."""

    async def send(
        self, topic: str, key: str, value: bytes, *, partition: int | None = None
    ) -> None:
        raise AssertionError("an HTTP fact read sends nothing")

    async def flush(self) -> None:
        return None


def _optional_int(request: Request, name: str) -> int | None:
    if not request.query_params.get(name):
        return None
    return int_param(request, name, 0, 0, _MAX_BLOCK)


def _normalised(request: Request, name: str, normalise: Any) -> str | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value: str = normalise(raw)
    except InvalidFact as bad:
        raise ApiError(400, INVALID_VALUE, str(bad), field=name) from None
    return value


async def _answer(request: Request, query: FactQuery) -> FactResultV1:
    deps = deps_of(request)
    handler = FactQueryHandler(
        store=RedisFactStore(deps.redis, deps.prefix),
        sink=_NoSink(),
        topics=deps.client.topics,
        limits=deps.settings.input_limits,
    )
    return await handler.answer(query)


def _query(agent_id: str, kind: FactQueryKind, **fields: Any) -> FactQuery:
    return FactQuery(agent_id=agent_id, kind=kind, reply_to="", correlation_id="", **fields)


@agent_endpoint
async def facts(request: Request, agent_id: str) -> Response:
    block = _optional_int(request, "valid_at")
    known_at = _optional_int(request, "known_at")
    subject = _normalised(request, "subject", entity_name)
    predicate = _normalised(request, "predicate", predicate_name)
    if block is None and known_at is None:
        raise ApiError(
            400, MISSING_FIELD, "give 'valid_at' (a block) or 'known_at' (ms)", field="valid_at"
        )
    kind = FactQueryKind.VALID_AT if known_at is None else FactQueryKind.AS_KNOWN_AT
    query = _query(
        agent_id, kind, block=block, ts_ms=known_at, subject=subject, predicate=predicate
    )
    result = await _answer(request, query)
    return json_response(
        {
            "agent_id": agent_id,
            "query": query.kind.value,
            "valid_at": block,
            "known_at": known_at,
            "facts": result.facts or [],
        }
    )


@agent_endpoint
async def neighbours(request: Request, agent_id: str) -> Response:
    entity = _normalised(request, "entity", entity_name)
    if entity is None:
        raise ApiError(400, MISSING_FIELD, "'entity' is required", field="entity")
    hops = int_param(request, "hops", 1, 1, MAX_HOPS)
    block = _optional_int(request, "valid_at")
    query = _query(agent_id, FactQueryKind.NEIGHBOURS, entity=entity, hops=hops, block=block)
    result = await _answer(request, query)
    return json_response(
        {
            "agent_id": agent_id,
            "entity": entity,
            "hops": hops,
            "valid_at": block,
            "neighbours": result.neighbours or [],
        }
    )


@agent_endpoint
async def assert_fact(request: Request, agent_id: str) -> Response:
    body = await json_object(request)
    unknown_fields(body, FACT_FIELDS, unlisted=frozenset({"agent_id"}))
    raw = path_agent_record(body, agent_id)
    deps = deps_of(request)
    checked = parse_fact(raw, deps.settings.input_limits)
    if isinstance(checked, Rejection):
        raise ApiError(400, checked.reason, checked.detail, field=checked.field)
    await deps.client.publish_raw(
        deps.client.topics.facts, agent_id, raw, api_key=caller_key(request)
    )
    return json_response(
        {
            "accepted": True,
            "fact_id": checked.fact_id,
            "event_id": checked.source_event_id,
            "subject": checked.subject,
            "predicate": checked.predicate,
            "object": checked.object,
            "valid_from": checked.valid_from,
        },
        202,
    )


def routes() -> list[Route]:
    return [
        Route("/v1/agents/{agent:path}/facts/neighbours", neighbours, methods=["GET"]),
        Route("/v1/agents/{agent:path}/facts", facts, methods=["GET"]),
        Route("/v1/agents/{agent:path}/facts", assert_fact, methods=["POST"]),
    ]
