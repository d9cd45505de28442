"""POST /v1/agents/{agent}/recall and /search: the worker's recall through Kafka.

The body is checked by the worker's own parser first (`parse_recall_request`, the
same limits), so a bad request is a 400 naming the field instead of an error reply
a round trip later; then it goes out with the client SDK and the RecallResultV1
JSON comes back. Search is the same request with `record_usage: false`: the worker
answers it the same way and counts nothing (inspection)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from grimoire.infra.http.errors import ApiError, json_response
from grimoire.infra.http.routing import (
    agent_endpoint,
    deps_of,
    json_object,
    metrics_of,
    unknown_fields,
)
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.inbound.recall_request import RecallQuery, parse_recall_request
from grimoire.streams.inbound.validators import INVALID_VALUE, WRONG_TYPE
from grimoire.topics.client import RecallAnswer, RecallFailed, RecallTimeout
from grimoire.topics.options import RecallAffect, RecallBudgets, RecallFilters, RecallState

__all__ = ["BODY_FIELDS", "routes"]

#: What a recall or search body may hold (RecallRequestV1 less the routing fields).
BODY_FIELDS: Final = frozenset(
    {"query", "k", "as_of", "filters", "budgets", "state", "mode", "explain", "expand_episodes"}
)
_PAD: Final = ("pleasure", "arousal", "dominance")


def _checked(agent_id: str, body: Mapping[str, Any], request: Request) -> RecallQuery:
    deps = deps_of(request)
    unknown_fields(body, BODY_FIELDS)
    wire = {
        **body,
        "agent_id": agent_id,
        # Placeholders for the routing fields the SDK fills in: checked here only
        # for their shape.
        "reply_to": deps.client.topics.reply_topic("http"),
        "correlation_id": "http",
    }
    parsed = parse_recall_request(
        orjson.dumps(wire), deps.settings.recall_limits, deps.settings.input_limits
    )
    if isinstance(parsed, Rejection):
        raise ApiError(400, parsed.reason, parsed.detail, field=parsed.field)
    return parsed


def _options(
    query: RecallQuery, body: Mapping[str, Any]
) -> tuple[RecallFilters | None, RecallBudgets | None, RecallState | None]:
    """The SDK's typed options for what the body set (the worker fills in the rest)."""
    try:
        filters = None
        if body.get("filters"):
            found = query.filters
            filters = RecallFilters(
                since=found.since_ms,
                until=found.until_ms,
                session_id=found.session_id or None,
                run_id=found.run_id or None,
                actor_id=found.actor_id or None,
                event_type_prefix=found.event_type_prefix or None,
                kinds=found.kinds,
                layers=found.layers,
            )
        budgets = RecallBudgets(**body["budgets"]) if body.get("budgets") else None
        state = None
        if body.get("state"):
            raw = dict(body["state"])
            affect = raw.pop("affect", None)
            if affect is not None:
                pad = {name: affect[name] for name in _PAD if name in affect}
                drives = {name: level for name, level in affect.items() if name not in _PAD}
                raw["affect"] = RecallAffect(**pad, drives=drives)
            state = RecallState(**raw)
    except TypeError as bad:
        raise ApiError(400, WRONG_TYPE, str(bad)) from None
    except ValueError as bad:
        raise ApiError(400, INVALID_VALUE, str(bad)) from None
    return filters, budgets, state


def _result(answer: RecallAnswer) -> dict[str, Any]:
    """The RecallResultV1 JSON of an answer."""
    result: dict[str, Any] = {
        "correlation_id": answer.correlation_id,
        "agent_id": answer.agent_id,
        "items": [item.asdict() for item in answer.items],
        "watermark": answer.watermark,
        "as_of": answer.as_of,
        "mode": answer.mode,
        "budget": answer.budget,
        "timings_ms": answer.timings_ms,
        "schema": "grimoire.recall_result/1",
    }
    return result


async def _ask(request: Request, agent_id: str, *, route: str) -> Response:
    body = await json_object(request)
    query = _checked(agent_id, body, request)
    filters, budgets, state = _options(query, body)
    deps = deps_of(request)
    started = time.perf_counter()
    try:
        answer = await deps.client.recall(
            agent_id,
            query.query,
            k=body.get("k"),
            as_of=query.as_of_ms,
            filters=filters,
            budgets=budgets,
            state=state,
            mode=body.get("mode"),
            explain=body.get("explain"),
            expand_episodes=body.get("expand_episodes"),
            # Search counts nothing; a recall leaves the worker's default (it counts).
            record_usage=False if route == "search" else None,
            timeout=deps.settings.http.recall_timeout_s,
        )
    except RecallTimeout:
        raise ApiError(
            504,
            "timeout",
            f"no worker answered within {deps.settings.http.recall_timeout_s}s",
        ) from None
    except RecallFailed as failed:
        reason, _, detail = str(failed).partition(": ")
        if reason == "unauthorized":
            # The HTTP key was good; the worker refused the API's own key.
            why = f"the worker refused the API's Kafka key: {detail}"
            raise ApiError(502, reason, why) from None
        status = 502 if reason == "internal_error" else 400
        raise ApiError(status, reason or "recall_failed", detail or str(failed)) from None
    metrics_of(request).observe_recall(route, time.perf_counter() - started, answer.timings_ms)
    return json_response(_result(answer))


@agent_endpoint
async def recall(request: Request, agent_id: str) -> Response:
    return await _ask(request, agent_id, route="recall")


@agent_endpoint
async def search(request: Request, agent_id: str) -> Response:
    return await _ask(request, agent_id, route="search")


def routes() -> list[Route]:
    return [
        Route("/v1/agents/{agent:path}/recall", recall, methods=["POST"]),
        Route("/v1/agents/{agent:path}/search", search, methods=["POST"]),
    ]
