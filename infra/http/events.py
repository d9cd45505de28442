"""POST /v1/agents/{agent}/events: publish an episode, tool event or transcript line.

The body is the event's wire fields (`EpisodeV1`, `ToolEventV1`, `TranscriptV1`)
with `kind` naming which, and without `agent_id` (the path names the agent). It is
checked by the worker's own normaliser first, so what would be dead-lettered is a
400 here; what passes is published to the input topic as it is, with the caller's
key as its `grimoire-api-key` header (the worker checks it again before it
journals the event), and the worker journals and applies it (202)."""

from __future__ import annotations

from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from grimoire.infra.http.errors import ApiError, json_response
from grimoire.infra.http.routing import (
    agent_endpoint,
    caller_key,
    deps_of,
    json_object,
    path_agent_record,
)
from grimoire.streams.inbound.events import Rejection, normalize_event
from grimoire.streams.inbound.validators import INVALID_VALUE, MISSING_FIELD
from grimoire.streams.model.records import EventType

__all__ = ["EVENT_KINDS", "routes"]

#: `kind` → the input stream it goes to.
EVENT_KINDS: Final = {
    "episode": EventType.EPISODE,
    "tool_event": EventType.TOOL,
    "transcript": EventType.TRANSCRIPT,
}


@agent_endpoint
async def publish(request: Request, agent_id: str) -> Response:
    body = await json_object(request)
    kind = body.pop("kind", None)
    if kind is None:
        raise ApiError(
            400, MISSING_FIELD, f"'kind' is required: one of {', '.join(EVENT_KINDS)}", field="kind"
        )
    event_type = EVENT_KINDS.get(kind) if isinstance(kind, str) else None
    if event_type is None:
        raise ApiError(
            400, INVALID_VALUE, f"'kind' must be one of {', '.join(EVENT_KINDS)}", field="kind"
        )
    raw = path_agent_record(body, agent_id)
    deps = deps_of(request)
    checked = normalize_event(event_type, raw, deps.settings.input_limits)
    if isinstance(checked, Rejection):
        raise ApiError(400, checked.reason, checked.detail, field=checked.field)
    topics = deps.client.topics
    topic = {
        EventType.EPISODE: topics.episodes,
        EventType.TOOL: topics.tool_events,
        EventType.TRANSCRIPT: topics.transcripts,
    }[event_type]
    await deps.client.publish_raw(topic, agent_id, raw, api_key=caller_key(request))
    return json_response(
        {
            "accepted": True,
            "kind": kind,
            "event_id": checked.source_event_id,
            "candidates": [candidate.id for candidate in checked.candidates],
        },
        202,
    )


def routes() -> list[Route]:
    return [Route("/v1/agents/{agent:path}/events", publish, methods=["POST"])]
