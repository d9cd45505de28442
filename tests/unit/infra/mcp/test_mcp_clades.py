"""The MCP clade tools: `publish_memory` and `unpublish_memory` are one call each of
POST …/publish and …/unpublish for the server's (or the given) agent, with the
key; `clade_entries` is GET /v1/clades/{clade}/entries; refusals come back as tool
errors carrying the API's message."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.mcp_api import KEY, FakeApi, answering, call, error, listed_tools, refused

AGENT = "/v1/agents/golem-1"
ENTRIES: dict[str, Any] = {
    "clade": "ops",
    "entries": [
        {"agent_id": "golem-2", "memory_id": "m-7", "kind": "warning",
         "text": "the archive node drops RPC calls", "confidence": 0.8, "layer": None},
    ],
    "truncated": False,
}  # fmt: skip


def accepting(route: str) -> FakeApi:
    api = FakeApi()
    api.answer(
        "POST",
        route,
        lambda request: httpx.Response(202, json={"command": route.rsplit("/", 1)[-1]}),
    )
    return api


async def test_they_are_listed_with_their_hints() -> None:
    tools = await listed_tools(FakeApi())
    publish, unpublish, entries = (
        tools["publish_memory"], tools["unpublish_memory"], tools["clade_entries"],
    )  # fmt: skip
    assert publish.annotations is not None and publish.annotations.read_only_hint is False
    assert publish.annotations.destructive_hint is False
    assert unpublish.annotations is not None and unpublish.annotations.destructive_hint is True
    assert entries.annotations is not None and entries.annotations.read_only_hint is True
    assert publish.input_schema["required"] == ["memory_id"]
    assert {"memory_id", "clade", "agent"} <= set(publish.input_schema["properties"])
    assert entries.input_schema["required"] == ["clade"]


@pytest.mark.parametrize(("tool", "route"), [("publish_memory", "publish"),
                                             ("unpublish_memory", "unpublish")])  # fmt: skip
async def test_publishing_is_one_call_with_the_key(tool: str, route: str) -> None:
    api = accepting(f"{AGENT}/{route}")
    answer = await call(api, tool, {"memory_id": "m-1", "clade": "ops"})
    assert answer == {"agent": "golem-1", "accepted": True, "status": 202, "command": route}
    (sent,) = api.calls
    assert sent.route == ("POST", f"{AGENT}/{route}")
    assert sent.authorization == f"Bearer {KEY}"
    assert sent.body == {"memory_id": "m-1", "clade": "ops"}


async def test_without_a_clade_the_body_names_none_and_another_agent_is_encoded() -> None:
    path = "/v1/agents/fleet%2Fgolem-9/publish"
    api = accepting(path)
    answer = await call(api, "publish_memory", {"memory_id": "m-1", "agent": "fleet/golem-9"})
    assert answer["agent"] == "fleet/golem-9"
    assert api.calls[0].body == {"memory_id": "m-1"}


async def test_a_refusal_is_a_tool_error_with_the_api_s_message() -> None:
    api = FakeApi()
    api.answer(
        "POST", f"{AGENT}/publish", error(404, "not_found", "agent 'golem-1' has no memory 'm-9'")
    )
    message = await refused(api, "publish_memory", {"memory_id": "m-9"})
    assert "404 not_found" in message and "has no memory 'm-9'" in message


async def test_clade_entries_reads_the_route() -> None:
    api = answering("/v1/clades/ops/entries", ENTRIES)
    answer = await call(api, "clade_entries", {"clade": "ops"})
    # Nulls are dropped from the answer, as from every tool's.
    assert answer["entries"] == [{k: v for k, v in ENTRIES["entries"][0].items() if v is not None}]
    (sent,) = api.calls
    assert sent.route == ("GET", "/v1/clades/ops/entries")
    limited = answering("/v1/clades/ops/entries?limit=5", ENTRIES)
    await call(limited, "clade_entries", {"clade": "ops", "limit": 5})
    assert limited.calls[0].route == ("GET", "/v1/clades/ops/entries?limit=5")


async def test_clade_entries_refused_is_a_tool_error() -> None:
    api = FakeApi()
    api.answer(
        "GET",
        "/v1/clades/ops/entries",
        error(403, "forbidden", "API key reaches no member of clade 'ops'"),
    )
    message = await refused(api, "clade_entries", {"clade": "ops"})
    assert "403 forbidden" in message and "no member of clade 'ops'" in message
    # A name that would leave its path segment is refused before any call.
    nowhere = FakeApi()
    assert "'..'" in await refused(nowhere, "clade_entries", {"clade": "../x"})
    assert nowhere.calls == []
