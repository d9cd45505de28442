"""GET /v1/agents/{agent}/memories/{memory_id} (the memory with its full text: the
second step of lazy reconstruction after a recall's gist) and .../graph (its
nexus-key neighbourhood). A memory of another agent is a 404, like a missing one;
a copy a clade sibling shared carries `origin`, the original's agent and id."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from grimoire.infra.http.clades import clade_origin
from grimoire.infra.http.errors import ApiError, json_response
from grimoire.infra.http.routing import agent_endpoint, deps_of, int_param
from grimoire.tables.memory.inspect import memory_detail, neighbourhood

__all__ = ["routes"]

MAX_DEPTH = 3
MAX_PER_KEY = 50
MAX_NODES = 500


def _not_found(agent_id: str, memory_id: str) -> ApiError:
    return ApiError(404, "not_found", f"agent {agent_id!r} has no memory {memory_id!r}")


@agent_endpoint
async def memory(request: Request, agent_id: str) -> Response:
    memory_id = str(request.path_params["memory_id"])
    deps = deps_of(request)
    found = await memory_detail(deps.redis, deps.prefix, agent_id, memory_id)
    if found is None:
        raise _not_found(agent_id, memory_id)
    # A clade copy says whose memory it copies (docs/clades.md).
    origin = clade_origin(found)
    if origin is not None:
        found["origin"] = origin
    return json_response(found)


@agent_endpoint
async def graph(request: Request, agent_id: str) -> Response:
    memory_id = str(request.path_params["memory_id"])
    depth = int_param(request, "depth", 1, 1, MAX_DEPTH)
    per_key = int_param(request, "per_key", 10, 1, MAX_PER_KEY)
    max_nodes = int_param(request, "max_nodes", 200, 1, MAX_NODES)
    deps = deps_of(request)
    found = await neighbourhood(
        deps.redis,
        deps.prefix,
        agent_id,
        memory_id,
        depth=depth,
        per_key=per_key,
        max_nodes=max_nodes,
    )
    if found is None:
        raise _not_found(agent_id, memory_id)
    return json_response({"memory_id": memory_id, **found.to_json(depth)})


def routes() -> list[Route]:
    return [
        Route("/v1/agents/{agent:path}/memories/{memory_id}", memory, methods=["GET"]),
        Route("/v1/agents/{agent:path}/memories/{memory_id}/graph", graph, methods=["GET"]),
    ]
