"""The agent-level reads: which agents a key sees, an agent's PLAYBOOK.md, stats
and witness audit, and the health check."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from grimoire.infra.http.errors import ApiError, json_response
from grimoire.infra.http.routing import (
    CHALLENGE,
    agent_endpoint,
    bearer_token,
    deps_of,
    endpoint,
    refused,
)
from grimoire.infra.http.stats import agent_stats
from grimoire.streams.trust.tenancy import AuthOutcome, parse_token
from grimoire.tables.maintenance.curator_store import RedisCuratorStore, playbook_text
from grimoire.tables.maintenance.ledger import known_agents
from grimoire.tables.trust.witness_store import RedisWitnessLog, audit

__all__ = ["routes"]

# An agent id no key's scope is about: a key's authenticity is judged against it
# (an unauthenticated key is refused whatever the agent; a good one may answer
# "forbidden" here and still list the agents it does reach).
_PROBE_AGENT = "-"


@endpoint
async def health(_request: Request) -> Response:
    return json_response({"ok": True})


@endpoint
async def list_agents(request: Request) -> Response:
    deps = deps_of(request)
    token = bearer_token(request)
    decision = await deps.authenticator.check(token, _PROBE_AGENT)
    if decision.outcome is AuthOutcome.UNAUTHENTICATED:
        await refused(request, decision)
        raise ApiError(401, "unauthenticated", decision.detail, headers=CHALLENGE)
    agents = sorted([agent async for agent in known_agents(deps.redis, deps.prefix)])
    if deps.authenticator.enabled:
        parsed = parse_token(token or "")
        record = None if parsed is None else await deps.authenticator.store.get(parsed[0])
        # A key removed since the check sees nothing.
        agents = [agent for agent in agents if record is not None and record.scope.allows(agent)]
    return json_response({"agents": agents})


@agent_endpoint
async def playbook(request: Request, agent_id: str) -> Response:
    deps = deps_of(request)
    text = await playbook_text(
        RedisCuratorStore(deps.redis, deps.prefix), agent_id, deps.settings.recall.clade_discount
    )
    if text is None:
        raise ApiError(404, "not_found", f"no PLAYBOOK.md yet for {agent_id!r}")
    return Response(text, media_type="text/markdown; charset=utf-8")


@agent_endpoint
async def stats(request: Request, agent_id: str) -> Response:
    deps = deps_of(request)
    return json_response(await agent_stats(deps.redis, deps.prefix, agent_id, deps.settings))


@agent_endpoint
async def audit_verify(request: Request, agent_id: str) -> Response:
    deps = deps_of(request)
    verdict = await audit(RedisWitnessLog(deps.redis, deps.prefix), agent_id)
    return json_response(
        {
            "agent_id": agent_id,
            "verified": verdict.ok,
            "records": verdict.count,
            "first_broken": verdict.first_broken,
            "reason": verdict.reason,
            "head": verdict.head,
        }
    )


def routes() -> list[Route]:
    return [
        Route("/v1/health", health, methods=["GET"]),
        Route("/v1/agents", list_agents, methods=["GET"]),
        Route("/v1/agents/{agent:path}/playbook", playbook, methods=["GET"]),
        Route("/v1/agents/{agent:path}/stats", stats, methods=["GET"]),
        Route("/v1/agents/{agent:path}/audit", audit_verify, methods=["GET"]),
    ]
