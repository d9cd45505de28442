"""The entity lane: memories under the entities a query names."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from grimoire.streams.model.nexus_keys import commonness_penalty
from grimoire.streams.recall.entity_lane import (
    EntityLanePolicy,
    entity_hits,
    query_entity_keys,
)
from grimoire.streams.recall.ports import LaneHit


class Graph:
    """Keys and their members, newest first (only what the lane reads)."""

    def __init__(self, members: dict[str, list[str]]) -> None:
        self.members = members
        self.calls: list[tuple[tuple[str, ...], int]] = []

    async def neighbourhood(
        self, keys: Sequence[str], limit: int
    ) -> tuple[dict[str, int], dict[str, list[str]]]:
        self.calls.append((tuple(keys), limit))
        degrees = {key: len(self.members.get(key, [])) for key in keys}
        return degrees, {key: self.members.get(key, [])[:limit] for key in keys}


def test_a_query_names_entities_as_the_write_path_keys_them() -> None:
    keys = query_entity_keys("What did we see in New York after the 40 points game?")
    assert keys == ("entity:40_points", "entity:new_york")
    assert query_entity_keys("what happened yesterday?") == ()


async def test_rarer_entities_rank_first_and_a_memory_counts_once() -> None:
    graph = Graph(
        {
            "entity:chicago": ["m2", "m1"],
            "entity:relay": ["m3", "m2", "m4", "m5"],
        }
    )
    hits = await entity_hits(graph, ["entity:relay", "entity:chicago", "entity:relay"])
    rare, common = commonness_penalty(2), commonness_penalty(4)
    assert hits == [
        LaneHit("m2", rare),
        LaneHit("m1", rare),
        LaneHit("m3", common),
        LaneHit("m4", common),
        LaneHit("m5", common),
    ]
    assert graph.calls == [(("entity:chicago", "entity:relay"), 10)]  # one round trip


async def test_a_near_universal_entity_seeds_nothing() -> None:
    speaker = [f"m{i}" for i in range(60)]
    graph = Graph({"entity:maria": speaker, "entity:spain": ["m7"]})
    hits = await entity_hits(graph, ["entity:maria", "entity:spain"], EntityLanePolicy())
    assert [hit.memory_id for hit in hits] == ["m7"]
    assert await entity_hits(graph, ["entity:maria"]) == []


async def test_the_lane_keeps_to_its_budgets() -> None:
    graph = Graph({"entity:a": ["m1", "m2", "m3"], "entity:b": ["m4", "m5", "m6"]})
    policy = EntityLanePolicy(k=3, per_key=2, max_degree=50)
    hits = await entity_hits(graph, ["entity:a", "entity:b"], policy)
    assert [hit.memory_id for hit in hits] == ["m1", "m4", "m2"]
    assert await entity_hits(graph, [], policy) == []
    assert await entity_hits(graph, ["entity:a"], EntityLanePolicy(k=0)) == []


def test_the_policy_is_checked() -> None:
    with pytest.raises(ValueError, match="max_degree"):
        EntityLanePolicy(max_degree=0)
    with pytest.raises(ValueError, match="k and per_key"):
        EntityLanePolicy(k=-1)
