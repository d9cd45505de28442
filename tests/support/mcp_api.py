"""A fake Grimoire HTTP API on `httpx.MockTransport` and the MCP server connected to it
in process, for the MCP tests (tests/unit/infra/mcp/).

``FakeApi`` records every call and answers from a route table, so the MCP server is
tested with no network and no services; ``connected`` builds the server over it and
opens the SDK's own client on it, ``listed_tools`` lists its tools, and ``call`` /
``refused`` make one tool call and return its decoded answer / its error message,
``refused_before_calling`` a refusal the server gave without calling the API.
``answering`` is a fake that also answers one GET route with a given body."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from mcp import Client
from mcp_types import CallToolResult, TextContent, Tool

from grimoire.infra.mcp import McpOptions, build_server

__all__ = [
    "KEY",
    "MEMORY_ANSWER",
    "NOW_MS",
    "PLAYBOOK",
    "RECALL_ANSWER",
    "Call",
    "FakeApi",
    "answering",
    "call",
    "connected",
    "error",
    "listed_tools",
    "refused",
    "refused_before_calling",
    "text_of",
]

KEY = "gmk_k1.s3cret"

RECALL_ANSWER: dict[str, Any] = {
    "correlation_id": "c-1",
    "agent_id": "golem-1",
    "items": [
        {
            "id": "m-1",
            "agent_id": "golem-1",
            "kind": "episode",
            "layer": "observation",
            "gist": "RPC timed out",
            "ts": 1790000000000,
            "score": 0.91,
            "lanes": ["canonical", "bm25"],
            "source_event_id": "e-7",
            "text": None,
            "scores": None,
        }
    ],
    "watermark": 1790000000000,
    "mode": "semantic",
    "error": None,
    "schema": "grimoire.recall_result/1",
}

MEMORY_ANSWER: dict[str, Any] = {
    "id": "m-1",
    "agent_id": "golem-1",
    "kind": "episode",
    "text": "RPC timed out twice against the archive node",
    "ts": 1790000000000,
}

PLAYBOOK = "# PLAYBOOK\n\n- retry the archive node with backoff\n"

Answer = httpx.Response | Callable[[httpx.Request], httpx.Response]


@dataclass(frozen=True)
class Call:
    method: str
    path: str  # raw, still percent-encoded
    authorization: str | None
    body: Any

    @property
    def route(self) -> tuple[str, str]:
        return self.method, self.path


def error(status: int, code: str, detail: str) -> httpx.Response:
    return httpx.Response(status, json={"error": code, "detail": detail})


@dataclass
class FakeApi:
    """Routes are `(method, raw path)`; anything else is the API's 404."""

    calls: list[Call] = field(default_factory=list)
    routes: dict[tuple[str, str], Answer] = field(default_factory=dict)

    def __post_init__(self) -> None:
        agent = "/v1/agents/golem-1"
        self.routes.update(
            {
                ("POST", f"{agent}/events"): httpx.Response(202, json={"event_id": "e-9"}),
                ("POST", f"{agent}/recall"): httpx.Response(200, json=RECALL_ANSWER),
                ("POST", f"{agent}/search"): httpx.Response(200, json=RECALL_ANSWER),
                ("GET", f"{agent}/memories/m-1"): httpx.Response(200, json=MEMORY_ANSWER),
                ("GET", f"{agent}/playbook"): httpx.Response(
                    200, text=PLAYBOOK, headers={"Content-Type": "text/markdown"}
                ),
                ("POST", f"{agent}/retract"): httpx.Response(202, json={"command": "retract"}),
                ("POST", f"{agent}/forget"): httpx.Response(202),
            }
        )

    def answer(self, method: str, path: str, response: Answer) -> None:
        self.routes[(method, path)] = response

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.raw_path.decode()
        body = orjson.loads(request.content) if request.content else None
        self.calls.append(Call(request.method, path, request.headers.get("Authorization"), body))
        answer = self.routes.get((request.method, path))
        if answer is None:
            return error(404, "not_found", f"no route {request.method} {path}")
        return answer(request) if callable(answer) else answer

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)


def answering(route: str, body: Any) -> FakeApi:
    """A fake API that also answers ``GET route`` (path and query) with 200 and ``body``."""
    api = FakeApi()
    api.answer("GET", route, lambda request: httpx.Response(200, json=body))
    return api


NOW_MS = 1_790_000_123_456


@asynccontextmanager
async def connected(api: FakeApi, *, mode: str = "auto", **options: Any) -> AsyncIterator[Client]:
    settings = {"api_url": "http://grimoire.test:8080", "api_key": KEY, "agent_id": "golem-1"}
    server = build_server(
        McpOptions(**(settings | options)), http_transport=api.transport, clock=lambda: NOW_MS
    )
    async with Client(server, mode=mode) as client:
        yield client


def text_of(result: CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def call(api: FakeApi, tool: str, arguments: dict[str, Any], **options: Any) -> Any:
    """A successful tool call's answer, decoded from its compact JSON text."""
    async with connected(api, **options) as client:
        result = await client.call_tool(tool, arguments)
    assert not result.is_error, text_of(result)
    return orjson.loads(text_of(result))


async def refused(api: FakeApi, tool: str, arguments: dict[str, Any], **options: Any) -> str:
    """A failed tool call's message."""
    async with connected(api, **options) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error
    return text_of(result)


async def refused_before_calling(tool: str, arguments: dict[str, Any], **options: Any) -> str:
    """The message of a tool call the server refused on its own: the API never called."""
    api = FakeApi()
    message = await refused(api, tool, arguments, **options)
    assert api.calls == []
    return message


async def listed_tools(api: FakeApi, **options: Any) -> dict[str, Tool]:
    """The tools the server lists, by name."""
    async with connected(api, **options) as client:
        return {tool.name: tool for tool in (await client.list_tools()).tools}
