"""An agent's runtime configuration: read it, or change part of it.

A change is a `configure` command through the journal (202): it is applied at its
place in the agent's journal, so the next event after it is the first one handled
under it, on every worker, and a replay reaches the same configuration. The body
is validated here as the worker will (merged into the configuration as stored
now), so a bad one is a 400 and never reaches the journal."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from grimoire.infra.http.commands import send_command
from grimoire.infra.http.errors import ApiError, json_response
from grimoire.infra.http.routing import (
    CHALLENGE,
    agent_endpoint,
    authorize,
    deps_of,
    endpoint,
    json_object,
    refused,
)
from grimoire.streams.config.agent_config import apply_update
from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.trust.tenancy import AuthOutcome
from grimoire.tables.config.store import RedisConfigStore, RedisDefaultConfig
from grimoire.tables.maintenance.ledger import known_agents

__all__ = ["routes"]


@agent_endpoint
async def get_config(request: Request, agent_id: str) -> Response:
    deps = deps_of(request)
    config = (await RedisConfigStore(deps.redis, deps.prefix).load([agent_id]))[agent_id]
    return json_response({"agent_id": agent_id, "config": config.to_wire()})


@agent_endpoint
async def put_config(request: Request, agent_id: str) -> Response:
    deps = deps_of(request)
    update = await json_object(request)
    current = (await RedisConfigStore(deps.redis, deps.prefix).load([agent_id]))[agent_id]
    try:
        expected = apply_update(current, update)
    except InvalidEvent as bad:
        raise ApiError(400, bad.reason, bad.detail, field=bad.field) from None
    event_id = await send_command(request, agent_id, "configure", config=dict(update))
    # `expected`: the configuration once applied, unless another change lands first.
    return json_response(
        {
            "accepted": True,
            "command": "configure",
            "event_id": event_id,
            "config": expected.to_wire(),
        },
        202,
    )


# No agent can have this id (`~` is outside the agent-id alphabet): only an admin
# key's scope reaches it, and the deployment's defaults are an admin's business.
_DEPLOYMENT = "~deployment"


async def _admin(request: Request) -> None:
    decision = await authorize(request, _DEPLOYMENT)
    if not decision.ok:
        await refused(request, decision)
        if decision.outcome is AuthOutcome.UNAUTHENTICATED:
            raise ApiError(401, "unauthenticated", decision.detail, headers=CHALLENGE)
        raise ApiError(403, "forbidden", "the deployment's defaults need an admin key")


@endpoint
async def get_defaults(request: Request) -> Response:
    await _admin(request)
    deps = deps_of(request)
    config = await RedisDefaultConfig(deps.keys_redis, deps.prefix).load()
    return json_response({"config": config.to_wire()})


@endpoint
async def put_defaults(request: Request) -> Response:
    """New defaults: kept for agents to come (a new agent's first journal entry
    carries them) and sent as a `configure` to every agent there already."""
    await _admin(request)
    deps = deps_of(request)
    update = await json_object(request)
    defaults = RedisDefaultConfig(deps.keys_redis, deps.prefix)
    try:
        merged = apply_update(await defaults.load(), update)
    except InvalidEvent as bad:
        raise ApiError(400, bad.reason, bad.detail, field=bad.field) from None
    await defaults.save(merged)
    agents = sorted([agent async for agent in known_agents(deps.redis, deps.prefix)])
    for agent_id in agents:
        await send_command(request, agent_id, "configure", config=dict(update))
    return json_response({"accepted": True, "config": merged.to_wire(), "agents": len(agents)}, 202)


def routes() -> list[Route]:
    return [
        Route("/v1/config", get_defaults, methods=["GET"]),
        Route("/v1/config", put_defaults, methods=["PUT"]),
        Route("/v1/agents/{agent:path}/config", get_config, methods=["GET"]),
        Route("/v1/agents/{agent:path}/config", put_config, methods=["PUT"]),
    ]
