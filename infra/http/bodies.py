"""Request bodies read up to a bound: past it the request is refused (413) as the
body streams in, whether or not it declared its length. A chunked body (no
Content-Length) is only known to be too large once read, so it is counted while
it is read, never buffered whole first."""

from __future__ import annotations

import logging

from starlette.requests import Request

from grimoire.infra.http.errors import ApiError

__all__ = ["read_body"]

logger = logging.getLogger(__name__)


def _oversize(limit: int) -> ApiError:
    return ApiError(413, "oversize", f"the body is over {limit} bytes")


async def read_body(request: Request, limit: int) -> bytes:
    """The body, of at most `limit` bytes; a larger one raises 413 with no more of
    it read than the chunk that crossed the bound."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise _oversize(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            logger.debug("refused a body past %d bytes on %s", limit, request.url.path)
            raise _oversize(limit)
        chunks.append(chunk)
    return b"".join(chunks)
