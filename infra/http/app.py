"""The app factory: `create_app(deps)` builds the Starlette app over what `deps`
holds (no module-level clients), with every route of `openapi.yaml`.

Why Starlette + uvicorn: a small ASGI toolkit and server with nothing to couple to
the worker (Faust's own web views would tie the API to a worker process and its
event loop; the API runs on its own, and several can run side by side)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from importlib import resources
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from grimoire.infra.http import (
    agents,
    causal,
    clades,
    commands,
    config,
    episodes,
    events,
    exchange,
    facts,
    memories,
    recall,
)
from grimoire.infra.http.deps import HttpDeps
from grimoire.infra.http.errors import ApiError, http_exception_handler
from grimoire.infra.http.inspector import inspector_routes
from grimoire.infra.http.metrics import AgentFilter, HttpMetrics, StoreCollector
from grimoire.infra.http.routing import (
    CHALLENGE,
    bearer_token,
    deps_of,
    endpoint,
    metrics_of,
    refused,
)

__all__ = ["OPENAPI_FILE", "create_app", "openapi_text"]

OPENAPI_FILE = "openapi.yaml"


def openapi_text() -> str:
    return resources.files("grimoire.infra.http").joinpath(OPENAPI_FILE).read_text()


def _no_agent(_agent_id: str) -> bool:
    return False


async def _visible_agents(request: Request) -> AgentFilter:
    """Whose per-agent series the scrape may see: with tenant keys on, the agents
    its key reaches (an admin key: all), none without a key; all with keys off.
    A key that does not authenticate is a 401 (counted), as on any route."""
    deps = deps_of(request)
    if not deps.authenticator.enabled:
        return None
    token = bearer_token(request)
    if token is None:
        return _no_agent
    identity = await deps.authenticator.identify(token)
    if identity.refused is not None:
        await refused(request, identity.refused)
        raise ApiError(401, "unauthenticated", identity.refused.detail, headers=CHALLENGE)
    return None if identity.admin else identity.scope.allows


@endpoint
async def prometheus_metrics(request: Request) -> Response:
    metrics = metrics_of(request)
    visible = await _visible_agents(request)
    if metrics.collector is not None:
        await metrics.collector.refresh()
    return Response(generate_latest(metrics.scoped(visible)), media_type=CONTENT_TYPE_LATEST)


@endpoint
async def openapi(request: Request) -> Response:
    return Response(request.app.state.openapi, media_type="application/yaml")


def api_routes() -> list[BaseRoute]:
    """Every route, in matching order (the agent id may hold `/`, so the agent
    segment matches greedily and each route's fixed tail tells them apart)."""
    return [
        Route("/metrics", prometheus_metrics, methods=["GET"]),
        Route("/openapi.yaml", openapi, methods=["GET"]),
        *agents.routes(),
        *recall.routes(),
        *events.routes(),
        *memories.routes(),
        *causal.routes(),
        *facts.routes(),
        *exchange.routes(),
        *episodes.routes(),
        *commands.routes(),
        *config.routes(),
        *clades.routes(),
        *inspector_routes(),
    ]


def create_app(
    deps: HttpDeps,
    *,
    lifespan: Callable[[Any], AbstractAsyncContextManager[None]] | None = None,
) -> Starlette:
    """The API over `deps`. `lifespan` is for a server that owns what `deps` holds
    (`owned_resources`); tests hand in started clients and leave it out."""
    app = Starlette(
        routes=api_routes(),
        exception_handlers={HTTPException: http_exception_handler},
        lifespan=lifespan,
    )
    app.state.deps = deps
    app.state.metrics = HttpMetrics(
        StoreCollector(deps.redis, deps.prefix, deps.settings, journal_lag=deps.journal_lag)
    )
    app.state.openapi = openapi_text()
    return app
