"""The MCP `causal_neighbours` tool: read-only, one call of GET …/causal/{memory_id}
with hops and direction, its answer as compact JSON, refusals as tool errors."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.mcp_api import FakeApi, answering, call, error, listed_tools, refused

ANSWER: dict[str, Any] = {
    "memory_id": "m-1",
    "hops": 2,
    "direction": "both",
    "truncated": False,
    "nodes": [
        {"memory_id": "m-2", "hops": 1,
         "via": {"cause": "m-1", "effect": "m-2", "weight": 0.8, "evidence": 1, "last_block": 3}},
    ],
}  # fmt: skip
PATH = "/v1/agents/golem-1/causal/m-1"
DEFAULT = f"{PATH}?hops=1&direction=effects"  # the fake routes on the raw path and query


async def test_it_is_listed_read_only_with_its_arguments() -> None:
    tool = (await listed_tools(FakeApi()))["causal_neighbours"]
    assert tool.annotations is not None and tool.annotations.read_only_hint is True
    assert tool.input_schema["required"] == ["memory_id"]
    properties = tool.input_schema["properties"]
    assert {"memory_id", "hops", "direction", "agent"} <= set(properties)
    assert properties["direction"]["enum"] == ["effects", "causes", "both"]


async def test_it_calls_the_route_with_hops_and_direction() -> None:
    api = answering(f"{PATH}?hops=2&direction=both", ANSWER)
    answer = await call(api, "causal_neighbours", {"memory_id": "m-1", "hops": 2,
                                                   "direction": "both"})  # fmt: skip
    assert answer == ANSWER
    (sent,) = api.calls
    assert sent.route == ("GET", f"{PATH}?hops=2&direction=both")
    assert sent.authorization == "Bearer gmk_k1.s3cret"


async def test_defaults_are_one_hop_of_effects() -> None:
    api = answering(DEFAULT, ANSWER)
    assert await call(api, "causal_neighbours", {"memory_id": "m-1"}) == ANSWER
    assert api.calls[0].route == ("GET", DEFAULT)


async def test_another_agent_and_an_encoded_id() -> None:
    path = "/v1/agents/fleet%2Fgolem-9/causal/m%2F1?hops=1&direction=effects"
    api = answering(path, ANSWER)
    await call(api, "causal_neighbours", {"memory_id": "m/1", "agent": "fleet/golem-9"})
    assert api.calls[0].path == path


@pytest.mark.parametrize(
    "arguments",
    [{"memory_id": "m-1", "hops": 0}, {"memory_id": "m-1", "hops": 5},
     {"memory_id": "m-1", "direction": "sideways"}, {"memory_id": ""}],
)  # fmt: skip
async def test_bad_arguments_are_refused_before_any_call(arguments: dict[str, Any]) -> None:
    api = FakeApi()
    await refused(api, "causal_neighbours", arguments)
    assert api.calls == []


async def test_a_refusal_is_a_tool_error_with_the_apis_message() -> None:
    api = FakeApi()
    api.answer("GET", DEFAULT, error(403, "forbidden", "key k1 may not act for agent golem-1"))
    message = await refused(api, "causal_neighbours", {"memory_id": "m-1"})
    assert f"answered 403 forbidden to GET {PATH}: key k1 may not act for agent golem-1" in message
