"""Error answers: every refusal is JSON `{"error": code, "detail": ..., "field"?}`.

Codes reuse the worker's dead-letter reasons where the same rule refused the same
input (`invalid_value`, `missing_field`, `wrong_type`, ...), so a caller reads one
vocabulary over HTTP and Kafka."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from grimoire.tables.exceptions import is_outage

__all__ = [
    "ApiError",
    "http_exception_handler",
    "json_response",
    "unexpected_error_handler",
]

logger = logging.getLogger(__name__)

JSON_MEDIA_TYPE = "application/json"


class ApiError(Exception):
    """Raised by a route to answer with `status` and a JSON error body."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        *,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.field = field
        self.headers = headers

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.code, "detail": self.detail}
        if self.field is not None:
            body["field"] = self.field
        return body


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    # orjson: dataclasses, numpy-free floats and non-ASCII text without a detour.
    return Response(
        orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS),
        status_code=status,
        media_type=JSON_MEDIA_TYPE,
        headers=headers,
    )


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


async def http_exception_handler(_request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, wrong method) in the API's shape."""
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    headers = dict(exc.headers) if exc.headers else None
    return json_response({"error": code, "detail": exc.detail}, exc.status_code, headers)


async def unexpected_error_handler(request: Request, exc: Exception) -> Response:
    if is_outage(exc):
        logger.warning("%s %s: store unavailable: %s", request.method, request.url.path, exc)
        return json_response(
            {"error": "unavailable", "detail": "the store is unavailable; retry shortly"}, 503
        )
    logger.exception("%s %s failed", request.method, request.url.path)
    return json_response({"error": "internal_error", "detail": type(exc).__name__}, 500)
