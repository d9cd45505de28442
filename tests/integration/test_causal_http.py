"""GET /v1/agents/{agent}/causal/{memory_id} against the real Redis, tenant keys on.

The causal graph is seeded as the apply loop writes it (`RedisLearningStore.
outcome_part`, applied alone); the route walks it k hops in each direction. No
worker is needed: the route only reads. Each test gets its own key prefix and
removes it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from grimoire.infra.settings import Settings
from grimoire.streams.learn.causal import CausalEdge
from grimoire.streams.trust.tenancy import TenantScope
from grimoire.tables.learn.store import RedisLearningStore
from grimoire.tables.trust.api_keys import RedisApiKeyStore
from tests.support.causal import EDGES, write_edges
from tests.support.contract import delete_prefixed
from tests.support.gateway import RecordingGateway
from tests.support.http_deps import bearer, in_process, keyed_deps

pytestmark = pytest.mark.integration

AGENT = "fleet-c/golem-1"
RIVAL = "rival-1"


@dataclass
class Api:
    http: httpx.AsyncClient
    key: dict[str, str]  # reaches fleet-c/
    rival_key: dict[str, str]

    async def causal(self, memory_id: str, *, agent: str = AGENT, **query: Any) -> httpx.Response:
        return await self.http.get(
            f"/v1/agents/{agent}/causal/{memory_id}", params=query, headers=self.key
        )

    async def reached(self, memory_id: str, **query: Any) -> list[tuple[str, int]]:
        answer = await self.causal(memory_id, **query)
        assert answer.status_code == 200, answer.text
        return [(n["memory_id"], n["hops"]) for n in answer.json()["nodes"]]


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[Api]:
    redis = Redis.from_url(settings.redis.url)
    prefix = f"ch{uuid.uuid4().hex[:8]}"
    try:
        learning = RedisLearningStore(redis, prefix)
        await write_edges(learning, AGENT, EDGES)
        # The rival's graph holds the same memory ids: never reached from AGENT.
        rival = (CausalEdge("s", "secret", 1.0, 9, 1), CausalEdge("a", "secret", 1.0, 9, 1))
        await write_edges(learning, RIVAL, rival)
        keys = RedisApiKeyStore(redis, prefix)
        _, token = await keys.create(TenantScope(agent_prefix="fleet-c/"), "fleet", now_ms=1)
        _, rival_token = await keys.create(
            TenantScope(agent_ids=frozenset({RIVAL})), "rival", now_ms=1
        )
        deps = keyed_deps(redis, prefix, RecordingGateway(), keys, settings)
        async with in_process(deps) as http:
            yield Api(http, bearer(token), bearer(rival_token))
    finally:
        await delete_prefixed(redis, prefix)


async def test_one_hop_of_effects_by_default(api: Api) -> None:
    answer = await api.causal("s")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "memory_id": "s",
        "hops": 1,
        "direction": "effects",
        "truncated": False,
        "nodes": [
            {"memory_id": "a", "hops": 1,
             "via": {"cause": "s", "effect": "a", "weight": 0.5, "evidence": 2, "last_block": 4}},
            {"memory_id": "d", "hops": 1,
             "via": {"cause": "s", "effect": "d", "weight": -1.0, "evidence": 3, "last_block": 7}},
        ],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("memory_id", "query", "expected"),
    [
        ("s", {"hops": 2}, [("a", 1), ("d", 1), ("b", 2)]),
        ("s", {"hops": 4, "direction": "effects"}, [("a", 1), ("d", 1), ("b", 2), ("c", 3)]),
        ("s", {"hops": 4, "direction": "causes"}, [("x", 1)]),
        ("c", {"hops": 3, "direction": "causes"}, [("b", 1), ("a", 2), ("s", 3), ("y", 3)]),
        ("s", {"hops": 2, "direction": "both"},
         [("a", 1), ("d", 1), ("x", 1), ("b", 2), ("y", 2)]),
        ("c", {"hops": 4}, []),  # c causes nothing
        ("nobody", {"hops": 4, "direction": "both"}, []),  # no edges: no neighbours
    ],
)  # fmt: skip
async def test_k_hops_in_each_direction(
    api: Api, memory_id: str, query: dict[str, Any], expected: list[tuple[str, int]]
) -> None:
    assert await api.reached(memory_id, **query) == expected


async def test_the_limit_cuts_and_says_so(api: Api) -> None:
    answer = await api.causal("s", hops=4, direction="both", limit=2)
    body = answer.json()
    assert [n["memory_id"] for n in body["nodes"]] == ["a", "d"]
    assert body["truncated"] is True
    assert (await api.causal("s", hops=4, limit=4)).json()["truncated"] is True
    assert (await api.causal("s", hops=4, limit=5)).json()["truncated"] is False


async def test_another_agents_graph_is_never_reached(api: Api) -> None:
    nodes = await api.reached("s", hops=4, direction="both")
    assert "secret" not in {memory_id for memory_id, _ in nodes}
    # the rival sees its own graph through its own key
    answer = await api.http.get(f"/v1/agents/{RIVAL}/causal/s", headers=api.rival_key)
    assert [n["memory_id"] for n in answer.json()["nodes"]] == ["secret"]


async def test_keys_are_checked_first(api: Api) -> None:
    none = await api.http.get(f"/v1/agents/{AGENT}/causal/s")
    assert none.status_code == 401
    wrong = await api.http.get(f"/v1/agents/{AGENT}/causal/s", headers=api.rival_key)
    assert wrong.status_code == 403
    assert (await api.causal("s", agent=RIVAL)).status_code == 403


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"hops": 0}, "hops"),
        ({"hops": 5}, "hops"),
        ({"hops": "two"}, "hops"),
        ({"direction": "sideways"}, "direction"),
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
    ],
)
async def test_bad_parameters_are_400_naming_the_field(
    api: Api, query: dict[str, Any], field: str
) -> None:
    answer = await api.causal("s", **query)
    assert answer.status_code == 400, answer.text
    assert answer.json()["field"] == field
