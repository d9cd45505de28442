"""A small typed async client over the HTTP API's routes, for the MCP server.

Only the routes the MCP tools need: publish an event, recall, search, a memory by id,
its causal neighbours, facts, the playbook, publish a memory to the agent's clades or
withdraw it, a clade's shared entries, retract and forget. Each call sends the key as
`Authorization: Bearer` and turns a refusal (4xx/5xx with the API's `{"error",
"detail"}` body) into an `ApiError` that names the status, the code and the API's own
message.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote

import httpx
import orjson

from grimoire.topics.options import RecallBudgets, RecallFilters, RecallMode

__all__ = ["EventKind", "GrimoireApi", "HttpApiError", "RecallCall"]

logger = logging.getLogger(__name__)

#: What `POST /v1/agents/{agent}/events` takes in its body's `kind`.
EventKind = Literal["episode", "transcript"]


class HttpApiError(Exception):
    """The API refused or failed a call (or could not be reached: `status` 0)."""

    def __init__(self, status: int, code: str, detail: str, *, method: str, path: str) -> None:
        self.status = status
        self.code = code
        self.detail = detail
        self.method = method
        self.path = path
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.method} {self.path}"
        if self.status == 0:
            return f"the Grimoire API could not be reached ({where}): {self.detail}"
        return f"the Grimoire API answered {self.status} {self.code} to {where}: {self.detail}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallCall:
    """The body of a recall or search call (what `RecallRequestV1` carries besides the
    routing fields the API fills in)."""

    query: str
    k: int | None = None
    filters: RecallFilters | None = None
    budgets: RecallBudgets | None = None
    mode: RecallMode | None = None
    explain: bool | None = None
    expand_episodes: bool | None = None

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"query": self.query}
        if self.k is not None:
            body["k"] = self.k
        filters = self.filters.to_wire() if self.filters is not None else {}
        if filters:
            body["filters"] = filters
        budgets = self.budgets.to_wire() if self.budgets is not None else {}
        if budgets:
            body["budgets"] = budgets
        for name in ("mode", "explain", "expand_episodes"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        return body


def _segment(value: str, name: str) -> str:
    """One path segment, percent-encoded whole (agent ids may hold `/`).

    Dot segments are refused here: `..` survives percent-encoding (dots are unreserved)
    and a URL library or proxy that normalises paths would send the call elsewhere.
    """
    if not value or any(ch.isspace() or ord(ch) < 0x20 for ch in value):
        raise ValueError(f"{name} must be non-empty and without whitespace, got {value!r}")
    if any(part in (".", "..") for part in value.split("/")):
        raise ValueError(f"{name} may not hold '.' or '..' path segments, got {value!r}")
    return quote(value, safe="")


def _error_of(response: httpx.Response) -> tuple[str, str]:
    """The API's `{"error": code, "detail": ...}`, or the status phrase and raw text."""
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        detail = body.get("detail")
        if detail is None:
            detail = body["error"]
        elif not isinstance(detail, str):
            detail = orjson.dumps(detail).decode()
        return body["error"], detail
    text = response.text.strip()
    return response.reason_phrase.lower().replace(" ", "_") or "error", text[:500] or "(no body)"


class GrimoireApi:
    """An `httpx.AsyncClient` bound to one API base URL and one key.

    `transport` is for tests (an `httpx.MockTransport`); in production the default
    pooled transport keeps one connection open to the API across tool calls.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers,
            timeout=timeout_s,
            transport=transport,
        )

    async def __aenter__(self) -> GrimoireApi:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(
        self, method: str, path: str, *, json: Mapping[str, Any] | None = None, **params: Any
    ) -> httpx.Response:
        try:
            response = await self._http.request(
                method,
                path,
                content=None if json is None else orjson.dumps(json),
                headers=None if json is None else {"Content-Type": "application/json"},
                params={k: v for k, v in params.items() if v is not None} or None,
            )
        except httpx.HTTPError as failure:
            # Connection refused, timeouts, a broken stream: the tool says so plainly.
            raise HttpApiError(
                0, "unreachable", f"{type(failure).__name__}: {failure}", method=method, path=path
            ) from failure
        if response.status_code >= 400:
            code, detail = _error_of(response)
            logger.info("API %s %s -> %d %s", method, path, response.status_code, code)
            raise HttpApiError(response.status_code, code, detail, method=method, path=path)
        return response

    @staticmethod
    def _json(response: httpx.Response) -> Any:
        if not response.content:
            return None
        try:
            return orjson.loads(response.content)
        except orjson.JSONDecodeError as bad:
            raise HttpApiError(
                response.status_code,
                "bad_response",
                f"the API's answer is not JSON: {response.text[:200]!r}",
                method=response.request.method,
                path=response.request.url.path,
            ) from bad

    async def _accepted(self, method: str, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """A command route (202): its JSON body when it has one, plus `accepted`."""
        response = await self._call(method, path, json=body)
        answer = self._json(response)
        return {"accepted": True, "status": response.status_code} | (
            answer if isinstance(answer, dict) else {}
        )

    @staticmethod
    def _agent_path(agent_id: str, *rest: str) -> str:
        return "/".join(("/v1/agents", _segment(agent_id, "agent"), *rest))

    async def health(self) -> dict[str, Any]:
        answer = self._json(await self._call("GET", "/v1/health"))
        return answer if isinstance(answer, dict) else {"ok": False}

    async def publish(
        self, agent_id: str, kind: EventKind, fields: Mapping[str, Any]
    ) -> dict[str, Any]:
        """`POST /v1/agents/{agent}/events` with `{"kind": ..., **EpisodeV1|TranscriptV1
        fields}`; the agent id travels in the path only."""
        if "kind" in fields or "agent_id" in fields:
            raise ValueError("fields may not set 'kind' or 'agent_id': the call sets them")
        body = {"kind": kind, **fields}
        return await self._accepted("POST", self._agent_path(agent_id, "events"), body)

    async def recall(self, agent_id: str, query: RecallCall) -> dict[str, Any]:
        """`POST .../recall`: the RecallResultV1 JSON (usage counted by the worker)."""
        path = self._agent_path(agent_id, "recall")
        return self._object(await self._call("POST", path, json=query.to_body()))

    async def search(self, agent_id: str, query: RecallCall) -> dict[str, Any]:
        """`POST .../search`: the same answer, counting nothing (inspection)."""
        path = self._agent_path(agent_id, "search")
        return self._object(await self._call("POST", path, json=query.to_body()))

    async def memory(self, agent_id: str, memory_id: str) -> dict[str, Any]:
        """`GET .../memories/{memory_id}`: the memory with its full text."""
        path = self._agent_path(agent_id, "memories", _segment(memory_id, "memory_id"))
        return self._object(await self._call("GET", path))

    async def causal(
        self, agent_id: str, memory_id: str, hops: int = 1, direction: str = "effects"
    ) -> dict[str, Any]:
        """`GET .../causal/{memory_id}`: the memory's causal neighbours, k hops away."""
        path = self._agent_path(agent_id, "causal", _segment(memory_id, "memory_id"))
        return self._object(await self._call("GET", path, hops=hops, direction=direction))

    async def facts(
        self,
        agent_id: str,
        *,
        valid_at: int | None = None,
        known_at: int | None = None,
        subject: str | None = None,
        predicate: str | None = None,
    ) -> dict[str, Any]:
        """`GET .../facts`: the agent's facts valid at a block, or as known at a time."""
        path = self._agent_path(agent_id, "facts")
        return self._object(
            await self._call(
                "GET", path, valid_at=valid_at, known_at=known_at, subject=subject,
                predicate=predicate,
            )
        )  # fmt: skip

    async def fact_neighbours(
        self, agent_id: str, entity: str, hops: int = 1, valid_at: int | None = None
    ) -> dict[str, Any]:
        """`GET .../facts/neighbours`: entities within `hops` fact links of `entity`."""
        path = self._agent_path(agent_id, "facts", "neighbours")
        return self._object(
            await self._call("GET", path, entity=entity, hops=hops, valid_at=valid_at)
        )

    async def playbook(self, agent_id: str) -> str:
        """`GET .../playbook`: the agent's PLAYBOOK.md (text/markdown)."""
        response = await self._call("GET", self._agent_path(agent_id, "playbook"))
        return response.text

    async def retract(self, agent_id: str, source_event_id: str) -> dict[str, Any]:
        """`POST .../retract`: the event and everything derived from it (202)."""
        body = {"source_event_id": source_event_id}
        return await self._accepted("POST", self._agent_path(agent_id, "retract"), body)

    async def forget(self, agent_id: str) -> dict[str, Any]:
        """`POST .../forget`: the whole agent, by crypto-shredding its journal keys (202)."""
        return await self._accepted("POST", self._agent_path(agent_id, "forget"), {})

    async def publish_memory(
        self, agent_id: str, memory_id: str, clade: str | None = None
    ) -> dict[str, Any]:
        """`POST .../publish`: share the memory with the agent's clades (`clade` only,
        when given) through its journal (202)."""
        return await self._publishing("publish", agent_id, memory_id, clade)

    async def unpublish_memory(
        self, agent_id: str, memory_id: str, clade: str | None = None
    ) -> dict[str, Any]:
        """`POST .../unpublish`: withdraw the siblings' copies of a published memory (202)."""
        return await self._publishing("unpublish", agent_id, memory_id, clade)

    async def _publishing(
        self, route: str, agent_id: str, memory_id: str, clade: str | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"memory_id": memory_id}
        if clade is not None:
            body["clade"] = clade
        return await self._accepted("POST", self._agent_path(agent_id, route), body)

    async def clade_entries(self, clade: str, limit: int | None = None) -> dict[str, Any]:
        """`GET /v1/clades/{clade}/entries`: what the clade's members published to it
        (for a key that reaches one of its members)."""
        path = "/".join(("/v1/clades", _segment(clade, "clade"), "entries"))
        return self._object(await self._call("GET", path, limit=limit))

    def _object(self, response: httpx.Response) -> dict[str, Any]:
        answer = self._json(response)
        if not isinstance(answer, dict):
            raise HttpApiError(
                response.status_code,
                "bad_response",
                f"expected a JSON object, got {type(answer).__name__}",
                method=response.request.method,
                path=response.request.url.path,
            )
        return answer
