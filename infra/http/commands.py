"""The writes: compact, retract, forget, pin and unpin, each a Kafka command the
journal applies at its place (202: accepted, applied shortly after; watch the
memory-events topic or read the memory again).

Each command carries a fresh `event_id`, so repeating a call is a new command
(pin, unpin, pin again all apply), and the caller's key, which the worker checks
again when tenant keys are on."""

from __future__ import annotations

import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from grimoire.infra.http.errors import ApiError, json_response
from grimoire.infra.http.routing import (
    agent_endpoint,
    caller_key,
    deps_of,
    json_object,
    unknown_fields,
)
from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.inbound.validators import Fields
from grimoire.tables.memory.inspect import memory_exists
from grimoire.topics.schemas import CommandV1

__all__ = ["routes", "send_command"]


async def send_command(request: Request, agent_id: str, command: str, **fields: Any) -> str:
    """Send `command` for the agent as the caller; its (fresh) event id."""
    deps = deps_of(request)
    event_id = f"http-{uuid.uuid4().hex}"
    await deps.client.send_command(
        CommandV1(
            agent_id=agent_id,
            command=command,
            event_id=event_id,
            # The worker judges the caller's own key again (the SDK sends it as the
            # record's header); without HTTP keys the client's
            # (GRIMOIRE_HTTP_KAFKA_API_KEY) goes instead.
            api_key=caller_key(request),
            **fields,
        )
    )
    return event_id


async def _send(request: Request, agent_id: str, command: str, **target: str) -> Response:
    event_id = await send_command(request, agent_id, command, **target)
    return json_response(
        {"accepted": True, "command": command, "event_id": event_id, **target}, 202
    )


@agent_endpoint
async def compact(request: Request, agent_id: str) -> Response:
    unknown_fields(await json_object(request, required=False), frozenset())
    await deps_of(request).client.request_maintenance(agent_id, compact=True)
    return json_response({"accepted": True, "command": "maintenance", "compact": True}, 202)


@agent_endpoint
async def retract(request: Request, agent_id: str) -> Response:
    body = await json_object(request)
    unknown_fields(body, frozenset({"source_event_id"}))
    try:
        source = Fields(body, deps_of(request).settings.input_limits).identifier(
            "source_event_id", required=True
        )
    except InvalidEvent as bad:
        raise ApiError(400, bad.reason, bad.detail, field=bad.field) from None
    return await _send(request, agent_id, "retract", source_event_id=source)


@agent_endpoint
async def forget(request: Request, agent_id: str) -> Response:
    unknown_fields(await json_object(request, required=False), frozenset())
    return await _send(request, agent_id, "forget")


async def _pin(request: Request, agent_id: str, command: str) -> Response:
    memory_id = str(request.path_params["memory_id"])
    deps = deps_of(request)
    if not await memory_exists(deps.redis, deps.prefix, agent_id, memory_id):
        raise ApiError(404, "not_found", f"agent {agent_id!r} has no memory {memory_id!r}")
    return await _send(request, agent_id, command, memory_id=memory_id)


@agent_endpoint
async def pin(request: Request, agent_id: str) -> Response:
    return await _pin(request, agent_id, "pin")


@agent_endpoint
async def unpin(request: Request, agent_id: str) -> Response:
    return await _pin(request, agent_id, "unpin")


def routes() -> list[Route]:
    return [
        Route("/v1/agents/{agent:path}/compact", compact, methods=["POST"]),
        Route("/v1/agents/{agent:path}/retract", retract, methods=["POST"]),
        Route("/v1/agents/{agent:path}/forget", forget, methods=["POST"]),
        Route("/v1/agents/{agent:path}/memories/{memory_id}/pin", pin, methods=["POST"]),
        Route("/v1/agents/{agent:path}/memories/{memory_id}/unpin", unpin, methods=["POST"]),
    ]
