"""The typed API client under the MCP tools: request bodies, paths and how a refusal
reads, against `httpx.MockTransport`."""

from __future__ import annotations

import httpx
import pytest

from grimoire.infra.mcp import GrimoireApi, HttpApiError, RecallCall
from grimoire.topics.options import RecallBudgets, RecallFilters
from tests.support.mcp_api import KEY, FakeApi

BASE = "http://grimoire.test:8080/"


def test_a_recall_query_sends_only_what_is_set() -> None:
    assert RecallCall(query="q").to_body() == {"query": "q"}
    body = RecallCall(
        query="q",
        k=3,
        filters=RecallFilters(layers=("output", "input")),
        budgets=RecallBudgets(max_items=3),
        mode="light",
        explain=False,
        expand_episodes=True,
    ).to_body()
    assert body == {
        "query": "q",
        "k": 3,
        "filters": {"layers": ["input", "output"]},
        "budgets": {"max_items": 3},
        "mode": "light",
        "explain": False,
        "expand_episodes": True,
    }
    # Empty sections are left out rather than sent as {}.
    assert RecallCall(query="q", filters=RecallFilters(), budgets=RecallBudgets()).to_body() == {
        "query": "q"
    }


async def test_the_base_url_path_and_the_key_are_kept() -> None:
    api = FakeApi()
    api.answer("GET", "/prefix/v1/health", httpx.Response(200, json={"ok": True}))
    async with GrimoireApi(BASE + "prefix/", KEY, transport=api.transport) as client:
        assert await client.health() == {"ok": True}
    assert api.calls[0].route == ("GET", "/prefix/v1/health")
    assert api.calls[0].authorization == f"Bearer {KEY}"


async def test_publish_leaves_kind_and_agent_to_the_call() -> None:
    async with GrimoireApi(BASE, KEY, transport=FakeApi().transport) as client:
        with pytest.raises(ValueError, match="may not set 'kind' or 'agent_id'"):
            await client.publish("golem-1", "episode", {"kind": "warning", "text": "x"})
        with pytest.raises(ValueError, match="may not set 'kind' or 'agent_id'"):
            await client.publish("golem-1", "episode", {"agent_id": "golem-2", "text": "x"})


async def test_a_memory_id_is_one_encoded_segment() -> None:
    api = FakeApi()
    api.answer("GET", "/v1/agents/golem-1/memories/a%2Fb%3Fc", httpx.Response(200, json={}))
    async with GrimoireApi(BASE, KEY, transport=api.transport) as client:
        assert await client.memory("golem-1", "a/b?c") == {}
        with pytest.raises(ValueError, match="memory_id may not hold"):
            await client.memory("golem-1", "..")


@pytest.mark.parametrize(
    ("response", "code", "detail"),
    [
        (httpx.Response(403, json={"error": "forbidden", "detail": "nope"}), "forbidden", "nope"),
        (httpx.Response(400, json={"error": "invalid_value"}), "invalid_value", "invalid_value"),
        (
            httpx.Response(400, json={"error": "invalid_value", "detail": {"field": "k"}}),
            "invalid_value",
            '{"field":"k"}',
        ),
        (httpx.Response(500, json={"message": "boom"}), "internal_server_error", '{"message"'),
        (httpx.Response(503), "service_unavailable", "(no body)"),
    ],
)
async def test_a_refusal_names_status_code_and_detail(
    response: httpx.Response, code: str, detail: str
) -> None:
    api = FakeApi()
    api.answer("GET", "/v1/agents/golem-1/playbook", response)
    async with GrimoireApi(BASE, KEY, transport=api.transport) as client:
        with pytest.raises(HttpApiError) as refused:
            await client.playbook("golem-1")
    assert refused.value.status == response.status_code
    assert refused.value.code == code
    assert refused.value.detail.startswith(detail)
    assert str(refused.value).startswith(
        f"the Grimoire API answered {response.status_code} {code} to GET "
        "/v1/agents/golem-1/playbook"
    )


async def test_an_answer_that_is_not_a_json_object_is_an_error() -> None:
    api = FakeApi()
    api.answer("POST", "/v1/agents/golem-1/recall", httpx.Response(200, text="<html>"))
    api.answer("POST", "/v1/agents/golem-1/search", httpx.Response(200, json=[1, 2]))
    async with GrimoireApi(BASE, KEY, transport=api.transport) as client:
        with pytest.raises(HttpApiError, match="not JSON"):
            await client.recall("golem-1", RecallCall(query="q"))
        with pytest.raises(HttpApiError, match="expected a JSON object, got list"):
            await client.search("golem-1", RecallCall(query="q"))


async def test_a_command_without_a_body_is_accepted() -> None:
    async with GrimoireApi(BASE, KEY, transport=FakeApi().transport) as client:
        assert await client.forget("golem-1") == {"accepted": True, "status": 202}
