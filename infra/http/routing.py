"""What every route shares: its deps, the agent in its path (validated, then
authorised), query parameters and JSON bodies, and errors turned into answers.

Order of checks on an agent's route: the agent id (400, the same alphabet as the
Kafka inputs), then the key (401 when missing, unknown, wrong or revoked; 403 when
it does not reach the agent), then the request's own parameters (400). A refusal
is counted in the deployment's metrics hash and in this process's
`grimoire_auth_refused_total`."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from grimoire.infra.http.bodies import read_body
from grimoire.infra.http.deps import HttpDeps
from grimoire.infra.http.errors import ApiError, json_response, unexpected_error_handler
from grimoire.infra.http.metrics import HttpMetrics
from grimoire.streams.inbound.validators import AGENT_ID_ALPHABET, INVALID_VALUE, is_agent_id
from grimoire.streams.trust.tenancy import AuthDecision, AuthOutcome
from grimoire.tables.trust.api_keys import SURFACE_HTTP, RedisAuthMetrics

__all__ = [
    "CHALLENGE",
    "AgentHandler",
    "Handler",
    "agent_endpoint",
    "authorize",
    "bearer_token",
    "caller_key",
    "deps_of",
    "endpoint",
    "int_param",
    "json_object",
    "metrics_of",
    "path_agent_record",
    "refused",
    "unknown_fields",
]

logger = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]
AgentHandler = Callable[[Request, str], Awaitable[Response]]

# Larger bodies are refused before they are read whole, chunked ones as they stream
# in (a recall body is a few KB; an event's text is bounded by
# GRIMOIRE_MAX_TEXT_CHARS, 16,000 by default).
MAX_BODY_BYTES = 1 << 20
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="grimoire"'}


def deps_of(request: Request) -> HttpDeps:
    deps: HttpDeps = request.app.state.deps
    return deps


def metrics_of(request: Request) -> HttpMetrics:
    metrics: HttpMetrics = request.app.state.metrics
    return metrics


def endpoint(handler: Handler) -> Handler:
    """Errors as JSON answers: an `ApiError` as itself, a store outage as 503,
    anything else as 500 (logged)."""

    @functools.wraps(handler)
    async def run(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as refused:
            return json_response(refused.body(), refused.status, refused.headers)
        except Exception as failure:
            return await unexpected_error_handler(request, failure)

    return run


def agent_endpoint(handler: AgentHandler) -> Handler:
    """A route under `/v1/agents/{agent}`: the agent id checked and authorised first."""

    @endpoint
    @functools.wraps(handler)
    async def run(request: Request) -> Response:
        agent_id = str(request.path_params["agent"])
        if not is_agent_id(agent_id, deps_of(request).settings.input_limits):
            raise ApiError(
                400,
                INVALID_VALUE,
                f"an agent id is 1-128 of {AGENT_ID_ALPHABET}",
                field="agent",
            )
        await authorize(request, agent_id)
        return await handler(request, agent_id)

    return run


def bearer_token(request: Request) -> str | None:
    """The token of `Authorization: Bearer <token>`; None without one. Any other
    scheme is passed on as it is, to be refused as malformed."""
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return header.strip()
    return token.strip()


def caller_key(request: Request) -> str | None:
    """The key a write goes to the workers with: the caller's own where the API
    checks keys (the worker checks it again, and it names who wrote), else None
    (the API's own Kafka key, `GRIMOIRE_HTTP_KAFKA_API_KEY`, goes instead)."""
    return bearer_token(request) if deps_of(request).authenticator.enabled else None


async def authorize(request: Request, agent_id: str) -> AuthDecision:
    """The request's key judged for `agent_id`; raises 401 / 403 (counted) when refused."""
    deps = deps_of(request)
    decision = await deps.authenticator.check(bearer_token(request), agent_id)
    if decision.ok:
        return decision
    await refused(request, decision)
    if decision.outcome is AuthOutcome.FORBIDDEN:
        raise ApiError(403, "forbidden", decision.detail)
    raise ApiError(401, "unauthenticated", decision.detail, headers=CHALLENGE)


async def refused(request: Request, decision: AuthDecision) -> None:
    deps = deps_of(request)
    metrics_of(request).auth_refused.labels(SURFACE_HTTP, decision.outcome.value).inc()
    counter = deps.auth_metrics or RedisAuthMetrics(deps.redis, deps.prefix)
    try:
        await counter.refused(decision, SURFACE_HTTP)
    except Exception:  # the refusal stands whether or not it could be counted
        logger.warning("could not count a refused request", exc_info=True)
    logger.info(
        "refused %s %s: %s (key %s)",
        request.method,
        request.url.path,
        decision.detail,
        decision.key_id or "-",
    )


def int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(
            400, "wrong_type", f"{name!r} must be an integer, got {raw!r}", field=name
        ) from None
    if not low <= value <= high:
        raise ApiError(
            400, INVALID_VALUE, f"{name!r} must be within [{low}, {high}], got {value}", field=name
        )
    return value


async def json_object(request: Request, *, required: bool = True) -> dict[str, Any]:
    """The body as a JSON object; an empty body is `{}` unless `required`."""
    raw = await read_body(request, MAX_BODY_BYTES)
    if not raw.strip():
        if required:
            raise ApiError(400, "missing_field", "the request needs a JSON object body")
        return {}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as bad:
        raise ApiError(400, "invalid_json", f"the body is not JSON: {bad}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "not_an_object", "the body must be a JSON object")
    return body


def unknown_fields(
    body: Mapping[str, Any], allowed: frozenset[str], *, unlisted: frozenset[str] = frozenset()
) -> None:
    """Refuse a body with a field neither `allowed` nor `unlisted` (accepted, but not
    named among the known ones in the refusal)."""
    unknown = sorted(set(body) - allowed - unlisted)
    if unknown:
        raise ApiError(
            400,
            INVALID_VALUE,
            f"unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(allowed))}",
            field=unknown[0],
        )


def path_agent_record(body: dict[str, Any], agent_id: str) -> bytes:
    """The body as the input record to publish, its `agent_id` the path's: a body
    naming another agent is refused rather than published under either."""
    if "agent_id" in body and body["agent_id"] != agent_id:
        raise ApiError(
            400, INVALID_VALUE, "'agent_id' is the path's agent; leave it out", field="agent_id"
        )
    body["agent_id"] = agent_id
    return orjson.dumps(body)
