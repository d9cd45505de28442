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
from grimoire.infra.http.errors import http_exception_handler
from grimoire.infra.http.inspector import inspector_routes
from grimoire.infra.http.metrics import HttpMetrics, StoreCollector
from grimoire.infra.http.routing import endpoint, metrics_of

__all__ = ["OPENAPI_FILE", "create_app", "openapi_text"]

OPENAPI_FILE = "openapi.yaml"


def openapi_text() -> str:
    return resources.files("grimoire.infra.http").joinpath(OPENAPI_FILE).read_text()


@endpoint
async def prometheus_metrics(request: Request) -> Response:
    metrics = metrics_of(request)
    if metrics.collector is not None:
        await metrics.collector.refresh()
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


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
