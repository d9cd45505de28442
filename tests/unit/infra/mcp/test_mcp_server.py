"""The MCP server through the SDK's own client, connected in process (both the direct
dispatch of current protocol versions and the JSON-RPC stream of the initialize
handshake), against a fake HTTP API that records every call."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from grimoire.infra.mcp import DESTRUCTIVE_TOOLS, READ_WRITE_TOOLS
from tests.support.mcp_api import (
    KEY,
    MEMORY_ANSWER,
    NOW_MS,
    PLAYBOOK,
    Call,
    FakeApi,
    call,
    connected,
    error,
    listed_tools,
    refused,
    refused_before_calling,
    text_of,
)

MODES = ("auto", "legacy")


# --- listing -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_lists_the_memory_tools_and_hides_the_destructive_ones(mode: str) -> None:
    tools = await listed_tools(FakeApi(), mode=mode)
    assert sorted(tools) == sorted(READ_WRITE_TOOLS)
    assert not set(DESTRUCTIVE_TOOLS) & set(tools)
    assert tools["search"].annotations is not None
    assert tools["search"].annotations.read_only_hint is True
    assert tools["recall"].input_schema["required"] == ["query"]
    assert "agent" in tools["recall"].input_schema["properties"]


@pytest.mark.parametrize("mode", MODES)
async def test_allow_destructive_lists_forget_and_retract_marked_destructive(mode: str) -> None:
    tools = await listed_tools(FakeApi(), mode=mode, allow_destructive=True)
    assert sorted(tools) == sorted(READ_WRITE_TOOLS + DESTRUCTIVE_TOOLS)
    for name in DESTRUCTIVE_TOOLS:
        annotations = tools[name].annotations
        assert annotations is not None
        assert annotations.destructive_hint is True


async def test_a_destructive_tool_is_unknown_without_allow_destructive() -> None:
    assert "forget" in await refused_before_calling("forget", {"confirm_agent": "golem-1"})


# --- request shapes ------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_remember_publishes_an_episode_with_the_key(mode: str) -> None:
    api = FakeApi()
    answer = await call(
        api,
        "remember",
        {"text": "RPC timed out twice", "tags": ["infra/rpc"], "importance": 0.8, "tick": 7},
        mode=mode,
    )
    assert api.calls == [
        Call(
            "POST",
            "/v1/agents/golem-1/events",
            f"Bearer {KEY}",
            {
                "kind": "episode",
                "text": "RPC timed out twice",
                "ts": NOW_MS,
                "tick": 7,
                "tags": ["infra/rpc"],
                "importance": 0.8,
            },
        )
    ]
    assert answer == {
        "agent": "golem-1",
        "kind": "episode",
        "accepted": True,
        "status": 202,
        "event_id": "e-9",
    }


async def test_remember_publishes_a_transcript_turn() -> None:
    api = FakeApi()
    await call(
        api,
        "remember",
        {
            "text": "which node timed out?",
            "event": "transcript",
            "role": "user",
            "turn_id": "t-3",
            "session_id": "s-1",
            "ts": 1_790_000_000_000,
            "event_id": "ev-1",
        },
    )
    (sent,) = api.calls
    assert sent.path == "/v1/agents/golem-1/events"
    assert sent.body == {
        "kind": "transcript",
        "line": {"role": "user", "content": "which node timed out?"},
        "ts": 1_790_000_000_000,
        "event_id": "ev-1",
        "session_id": "s-1",
        "turn_id": "t-3",
    }


async def test_remember_a_transcript_turn_speaks_as_the_assistant_by_default() -> None:
    api = FakeApi()
    await call(api, "remember", {"text": "the archive node", "event": "transcript"})
    assert api.calls[0].body["line"] == {"role": "assistant", "content": "the archive node"}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"event": "transcript", "importance": 0.5}, "importance: episodes only"),
        ({"event": "transcript", "paths": ["/etc"], "error": "x"}, "error, paths: episodes only"),
        ({"role": "user"}, "transcript turns only"),
        ({"turn_id": "t-1"}, "transcript turns only"),
    ],
)
async def test_remember_refuses_fields_of_the_other_event_kind(
    arguments: dict[str, Any], message: str
) -> None:
    assert message in await refused_before_calling("remember", {"text": "x", **arguments})


@pytest.mark.parametrize("mode", MODES)
async def test_recall_sends_typed_filters_and_budgets_and_answers_compact_json(
    mode: str,
) -> None:
    api = FakeApi()
    answer = await call(
        api,
        "recall",
        {
            "query": "rpc problems",
            "k": 5,
            "session_id": "s-9",
            "kinds": ["warning", "episode"],
            "since": 0,
            "token_budget": 800,
            "full_text_items": 2,
            "explain": True,
            "mode": "semantic",
        },
        mode=mode,
    )
    (sent,) = api.calls
    assert (sent.method, sent.path, sent.authorization) == (
        "POST",
        "/v1/agents/golem-1/recall",
        f"Bearer {KEY}",
    )
    assert sent.body == {
        "query": "rpc problems",
        "k": 5,
        "filters": {"since": 0, "session_id": "s-9", "kinds": ["episode", "warning"]},
        "budgets": {"token_budget": 800, "full_text_items": 2},
        "mode": "semantic",
        "explain": True,
    }
    # The API's answer, nulls left out.
    assert answer["items"][0]["gist"] == "RPC timed out"
    assert "text" not in answer["items"][0]
    assert "error" not in answer
    assert answer["watermark"] == 1790000000000


async def test_recall_with_only_a_query_sends_only_the_query() -> None:
    api = FakeApi()
    await call(api, "recall", {"query": "anything"})
    assert api.calls[0].body == {"query": "anything"}


async def test_search_uses_the_inspection_route() -> None:
    api = FakeApi()
    await call(api, "search", {"query": "rpc", "layers": ["observation"], "explain": True})
    (sent,) = api.calls
    assert (sent.method, sent.path) == ("POST", "/v1/agents/golem-1/search")
    assert sent.body == {"query": "rpc", "filters": {"layers": ["observation"]}, "explain": True}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"kinds": ["episod"]}, "unknown kinds: episod"),
        ({"since": 10, "until": 5}, "since (10) is after until (5)"),
        ({"session_id": "has space"}, "session_id must be non-empty and without whitespace"),
        ({"k": 0}, "k"),
        ({"mode": "deep"}, "mode"),
    ],
)
async def test_recall_refuses_bad_options_before_calling_the_api(
    arguments: dict[str, Any], message: str
) -> None:
    assert message in await refused_before_calling("recall", {"query": "rpc", **arguments})


async def test_fetch_memory_gets_the_full_text() -> None:
    api = FakeApi()
    answer = await call(api, "fetch_memory", {"memory_id": "m-1"})
    assert api.calls[0].route == ("GET", "/v1/agents/golem-1/memories/m-1")
    assert answer == MEMORY_ANSWER


async def test_read_playbook_returns_the_markdown_as_it_is() -> None:
    api = FakeApi()
    async with connected(api) as client:
        result = await client.call_tool("read_playbook", {})
    assert not result.is_error
    assert text_of(result) == PLAYBOOK
    assert api.calls[0].route == ("GET", "/v1/agents/golem-1/playbook")


async def test_retract_sends_the_source_event() -> None:
    api = FakeApi()
    answer = await call(api, "retract", {"source_event_id": "e-7"}, allow_destructive=True)
    assert api.calls == [
        Call("POST", "/v1/agents/golem-1/retract", f"Bearer {KEY}", {"source_event_id": "e-7"})
    ]
    assert answer == {
        "agent": "golem-1",
        "retract": "e-7",
        "accepted": True,
        "status": 202,
        "command": "retract",
    }


async def test_forget_needs_the_agent_confirmed() -> None:
    api = FakeApi()
    message = await refused(api, "forget", {"confirm_agent": "golem-2"}, allow_destructive=True)
    assert "must equal the agent to forget ('golem-1')" in message
    assert api.calls == []
    answer = await call(api, "forget", {"confirm_agent": "golem-1"}, allow_destructive=True)
    assert [c.route for c in api.calls] == [("POST", "/v1/agents/golem-1/forget")]
    assert answer == {"agent": "golem-1", "forget": True, "accepted": True, "status": 202}


# --- agents --------------------------------------------------------------------------


async def test_a_tool_names_another_agent_and_ids_are_percent_encoded() -> None:
    api = FakeApi()
    api.answer("POST", "/v1/agents/fleet%2Fgolem-2/recall", httpx.Response(200, json={}))
    await call(api, "recall", {"query": "rpc", "agent": "fleet/golem-2"})
    assert api.calls[0].path == "/v1/agents/fleet%2Fgolem-2/recall"


async def test_without_a_default_agent_each_call_must_name_one() -> None:
    api = FakeApi()
    message = await refused(api, "recall", {"query": "rpc"}, agent_id=None)
    assert "no agent given" in message
    assert api.calls == []
    await call(api, "recall", {"query": "rpc", "agent": "golem-1"}, agent_id=None)
    assert len(api.calls) == 1


@pytest.mark.parametrize("agent", ["..", "fleet/../admin", "a b"])
async def test_an_agent_id_that_would_change_the_path_is_refused(agent: str) -> None:
    message = await refused_before_calling("fetch_memory", {"memory_id": "m-1", "agent": agent})
    assert "agent" in message


async def test_without_a_key_no_authorization_header_is_sent() -> None:
    api = FakeApi()
    await call(api, "fetch_memory", {"memory_id": "m-1"}, api_key=None)
    assert api.calls[0].authorization is None


# --- API errors ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("status", "code", "detail"),
    [
        (401, "unauthenticated", "missing or unknown API key"),
        (403, "forbidden", "key k1 may not act for agent golem-1"),
        (400, "invalid_value", "'agent' may hold only ASCII letters, digits and . _ - @ + = /"),
        (404, "not_found", "no memory m-1 for agent golem-1"),
    ],
)
async def test_api_refusals_become_tool_errors_with_the_api_message(
    mode: str, status: int, code: str, detail: str
) -> None:
    api = FakeApi()
    api.answer("GET", "/v1/agents/golem-1/memories/m-1", error(status, code, detail))
    message = await refused(api, "fetch_memory", {"memory_id": "m-1"}, mode=mode)
    assert f"answered {status} {code} to GET /v1/agents/golem-1/memories/m-1: {detail}" in message


@pytest.mark.parametrize(
    ("tool", "arguments", "method", "path"),
    [
        ("remember", {"text": "x"}, "POST", "/v1/agents/golem-1/events"),
        ("recall", {"query": "x"}, "POST", "/v1/agents/golem-1/recall"),
        ("search", {"query": "x"}, "POST", "/v1/agents/golem-1/search"),
        ("read_playbook", {}, "GET", "/v1/agents/golem-1/playbook"),
        ("retract", {"source_event_id": "e"}, "POST", "/v1/agents/golem-1/retract"),
        ("forget", {"confirm_agent": "golem-1"}, "POST", "/v1/agents/golem-1/forget"),
    ],
)
async def test_every_tool_surfaces_a_forbidden_key(
    tool: str, arguments: dict[str, Any], method: str, path: str
) -> None:
    api = FakeApi()
    api.answer(method, path, error(403, "forbidden", "out of scope"))
    message = await refused(api, tool, arguments, allow_destructive=True)
    assert f"answered 403 forbidden to {method} {path}: out of scope" in message


async def test_a_non_json_failure_keeps_the_status_and_text() -> None:
    api = FakeApi()
    api.answer("POST", "/v1/agents/golem-1/recall", httpx.Response(502, text="bad gateway"))
    message = await refused(api, "recall", {"query": "x"})
    assert "answered 502 bad_gateway to POST /v1/agents/golem-1/recall: bad gateway" in message


async def test_an_unreachable_api_is_said_plainly() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    api = FakeApi()
    api.answer("POST", "/v1/agents/golem-1/recall", refuse)
    message = await refused(api, "recall", {"query": "x"})
    assert "could not be reached (POST /v1/agents/golem-1/recall)" in message
    assert "connection refused" in message


async def test_a_playbook_not_written_yet_is_a_404_tool_error() -> None:
    api = FakeApi()
    api.answer("GET", "/v1/agents/golem-1/playbook", error(404, "not_found", "no PLAYBOOK.md yet"))
    assert "404 not_found" in await refused(api, "read_playbook", {})
