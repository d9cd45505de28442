"""Bodies past the bound are refused (413) as they stream in: a chunked body
(no Content-Length) is counted while it is read, and the route stops pulling it
at the chunk that crosses the bound rather than buffering it whole."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from grimoire.infra.http import exchange
from grimoire.infra.http.routing import MAX_BODY_BYTES

CHUNK = 64 << 10


class ChunkedBody:
    """A body of `total` bytes in CHUNK pieces, sent without a length (httpx sends
    an async iterator chunked); counts the pieces the server pulled."""

    def __init__(self, total: int, head: bytes = b"") -> None:
        self.total = total
        self.head = head
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        sent = 0
        while sent < self.total:
            piece = (self.head if sent == 0 else b"") or b" " * min(CHUNK, self.total - sent)
            piece = piece[: self.total - sent]
            self.pulled += 1
            sent += len(piece)
            yield piece


async def _post(api: Any, path: str, body: ChunkedBody, auth: dict[str, str]) -> httpx.Response:
    request = api.http.build_request("POST", path, content=body.__aiter__(), headers=auth)
    # What the server sees: no length, chunked transfer encoding.
    assert "content-length" not in request.headers
    assert request.headers["transfer-encoding"] == "chunked"
    response: httpx.Response = await api.http.send(request)
    return response


async def test_a_chunked_body_past_the_bound_is_refused_unread(
    api: Any, auth: dict[str, str]
) -> None:
    body = ChunkedBody(16 * MAX_BODY_BYTES)
    answer = await _post(api, "/v1/agents/golem-1/recall", body, auth)
    assert answer.status_code == 413, answer.text
    assert answer.json()["error"] == "oversize"
    # Up to the chunk that crossed the bound, and not one more.
    assert body.pulled == MAX_BODY_BYTES // CHUNK + 1
    assert api.gateway.recalls == []


async def test_a_chunked_body_of_exactly_the_bound_is_read(api: Any, auth: dict[str, str]) -> None:
    body = ChunkedBody(MAX_BODY_BYTES, head=b'{"query": "rpc timeouts"}')
    answer = await _post(api, "/v1/agents/golem-1/recall", body, auth)
    assert answer.status_code == 200, answer.text
    assert body.pulled == MAX_BODY_BYTES // CHUNK + 1  # the head, then whitespace
    (sent,) = api.gateway.recalls
    assert sent["query"] == "rpc timeouts"


async def test_an_import_past_its_bound_is_refused_unread(
    api: Any, auth: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The import's own bound (256 MiB) scaled down: the same reading, a test's size.
    monkeypatch.setattr(exchange, "MAX_IMPORT_BYTES", 2 * MAX_BODY_BYTES)
    body = ChunkedBody(16 * MAX_BODY_BYTES)
    answer = await _post(api, "/v1/agents/golem-1/import", body, auth)
    assert answer.status_code == 413, answer.text
    assert answer.json()["error"] == "oversize"
    assert body.pulled == 2 * MAX_BODY_BYTES // CHUNK + 1
    assert api.gateway.commands == []
