"""The MCP `facts` tool: read-only; valid-at / known-at reads call GET …/facts,
`neighbours_of` calls GET …/facts/neighbours; its answer as compact JSON, bad
arguments refused before any call, the API's refusals as tool errors."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.mcp_api import FakeApi, answering, call, error, listed_tools, refused

FACTS: dict[str, Any] = {
    "agent_id": "golem-1",
    "query": "valid_at",
    "valid_at": 150,
    "known_at": None,
    "facts": [
        {"fact_id": "fact-1", "subject": "alice", "predicate": "works_at", "object": "acme",
         "object_is_entity": True, "valid_from": 100, "valid_until": 200,
         "known_from": 1790000000000, "superseded_at": 1790000001000, "source_event_id": "f-1"},
    ],
}  # fmt: skip
NEIGHBOURS: dict[str, Any] = {
    "agent_id": "golem-1",
    "entity": "alice",
    "hops": 2,
    "valid_at": None,
    "neighbours": [{"entity": "globex", "hops": 1, "via": ["fact-3"]}],
}
FACTS_PATH = "/v1/agents/golem-1/facts"


def compact(body: dict[str, Any]) -> dict[str, Any]:
    """What the tool returns: the answer with its top-level nulls left out."""
    return {k: v for k, v in body.items() if v is not None}


NEIGHBOURS_PATH = "/v1/agents/golem-1/facts/neighbours"


async def test_it_is_listed_read_only_with_its_arguments() -> None:
    tool = (await listed_tools(FakeApi()))["facts"]
    assert tool.annotations is not None and tool.annotations.read_only_hint is True
    assert "required" not in tool.input_schema or tool.input_schema["required"] == []
    properties = tool.input_schema["properties"]
    assert {"valid_at", "known_at", "subject", "predicate", "neighbours_of", "hops", "agent"} <= (
        set(properties)
    )


async def test_valid_at_calls_the_facts_route() -> None:
    api = answering(f"{FACTS_PATH}?valid_at=150", FACTS)
    assert await call(api, "facts", {"valid_at": 150}) == compact(FACTS)
    (sent,) = api.calls
    assert sent.route == ("GET", f"{FACTS_PATH}?valid_at=150")
    assert sent.authorization == "Bearer gmk_k1.s3cret"


async def test_known_at_with_a_block_and_a_relation() -> None:
    route = f"{FACTS_PATH}?valid_at=250&known_at=1790000000500&subject=alice&predicate=works_at"
    api = answering(route, FACTS)
    arguments = {"valid_at": 250, "known_at": 1_790_000_000_500, "subject": "alice",
                 "predicate": "works_at"}  # fmt: skip
    assert await call(api, "facts", arguments) == compact(FACTS)
    assert api.calls[0].route == ("GET", route)


async def test_neighbours_of_calls_the_neighbours_route() -> None:
    route = f"{NEIGHBOURS_PATH}?entity=alice&hops=2"
    api = answering(route, NEIGHBOURS)
    assert await call(api, "facts", {"neighbours_of": "alice", "hops": 2}) == compact(NEIGHBOURS)
    assert api.calls[0].route == ("GET", route)


async def test_another_agent_is_encoded_in_the_path() -> None:
    route = "/v1/agents/fleet%2Fgolem-9/facts/neighbours?entity=alice&hops=1&valid_at=7"
    api = answering(route, NEIGHBOURS)
    arguments = {"neighbours_of": "alice", "valid_at": 7, "agent": "fleet/golem-9"}
    await call(api, "facts", arguments)
    assert api.calls[0].path == route


@pytest.mark.parametrize(
    "arguments",
    [{}, {"subject": "alice"}, {"valid_at": -1}, {"known_at": -5},
     {"neighbours_of": "alice", "hops": 0}, {"neighbours_of": "alice", "hops": 5}],
)  # fmt: skip
async def test_bad_arguments_are_refused_before_any_call(arguments: dict[str, Any]) -> None:
    api = FakeApi()
    await refused(api, "facts", arguments)
    assert api.calls == []


async def test_a_refusal_is_a_tool_error_with_the_apis_message() -> None:
    api = FakeApi()
    api.answer(
        "GET", f"{FACTS_PATH}?valid_at=1", error(403, "forbidden", "key k1 may not act for golem-1")
    )
    message = await refused(api, "facts", {"valid_at": 1})
    assert f"answered 403 forbidden to GET {FACTS_PATH}: key k1 may not act for golem-1" in message
