"""GET /v1/agents/{agent}/episodes (newest first) and .../episodes/{episode_id}
(its members with their roles). An episode is a hyperedge: a transcript turn
(`turn:<id>`) or a run (`run:<id>`); the id may hold `/`, so it ends the path."""

from __future__ import annotations

from dataclasses import asdict

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from grimoire.infra.http.errors import ApiError, json_response
from grimoire.infra.http.routing import agent_endpoint, deps_of, int_param
from grimoire.tables.memory.inspect import episode_members, episodes

__all__ = ["routes"]

MAX_LIMIT = 500


@agent_endpoint
async def list_episodes(request: Request, agent_id: str) -> Response:
    limit = int_param(request, "limit", 50, 1, MAX_LIMIT)
    offset = int_param(request, "offset", 0, 0, 1_000_000)
    deps = deps_of(request)
    found = await episodes(deps.redis, deps.prefix, agent_id, limit=limit, offset=offset)
    return json_response([asdict(episode) for episode in found])


@agent_endpoint
async def episode(request: Request, agent_id: str) -> Response:
    episode_id = str(request.path_params["episode_id"])
    deps = deps_of(request)
    members = await episode_members(deps.redis, deps.prefix, agent_id, episode_id)
    if not members:
        raise ApiError(404, "not_found", f"agent {agent_id!r} has no episode {episode_id!r}")
    return json_response(
        {
            "episode_id": episode_id,
            "members": [asdict(member) for member in members],
        }
    )


def routes() -> list[Route]:
    return [
        Route("/v1/agents/{agent:path}/episodes", list_episodes, methods=["GET"]),
        Route("/v1/agents/{agent:path}/episodes/{episode_id:path}", episode, methods=["GET"]),
    ]
