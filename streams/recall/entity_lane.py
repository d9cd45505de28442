"""The entity lane: the memories that carry the entities a query names.

A query that names a thing ("what broke on the Chicago relay?", "the 40 points
game") is about the memories that carry it as a nexus key (`entity:`): the lane
reads, per named entity, the newest memories under its key, and the daimoi walk
then expands two hops from them through their other keys. A near-universal key (a
speaker in every line of a transcript, the agent's own name) says nothing about
which memories answer, so a key held by more than `max_degree` memories seeds
nothing, and a rarer key's memories rank before a commoner one's
(`commonness_penalty`). Deterministic: keys, degrees and recency only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from grimoire.streams.model.nexus_keys import KeySource, commonness_penalty, extract_keys
from grimoire.streams.ports.recall import GraphView
from grimoire.streams.recall.ports import LaneHit

__all__ = ["DEFAULT_ENTITY_LANE", "EntityLanePolicy", "entity_hits", "query_entity_keys"]

ENTITY_PREFIX = "entity:"


@dataclass(frozen=True, slots=True)
class EntityLanePolicy:
    """`k` memories at most from the lane, `per_key` at most under one key, and
    no seeding from a key held by more than `max_degree` memories."""

    k: int = 20
    per_key: int = 10
    max_degree: int = 50

    def __post_init__(self) -> None:
        if self.k < 0 or self.per_key < 0 or self.max_degree < 1:
            raise ValueError("k and per_key must be >= 0 and max_degree >= 1")


DEFAULT_ENTITY_LANE = EntityLanePolicy()


def query_entity_keys(query: str) -> tuple[str, ...]:
    """The entity keys a query names, as the write path would key them."""
    return tuple(k for k in extract_keys(KeySource(text=query)) if k.startswith(ENTITY_PREFIX))


async def entity_hits(
    graph: GraphView, keys: Sequence[str], policy: EntityLanePolicy = DEFAULT_ENTITY_LANE
) -> list[LaneHit]:
    """The lane's memories, best first: each scored by its rarest named key's
    commonness penalty; ties by recency under that key, then id."""
    if not keys or policy.k == 0 or policy.per_key == 0:
        return []
    degrees, newest = await graph.neighbourhood(sorted(set(keys)), policy.per_key)
    best: dict[str, tuple[float, int]] = {}
    for key in sorted(newest):
        degree = degrees.get(key, 0)
        if degree == 0 or degree > policy.max_degree:
            continue
        weight = commonness_penalty(degree)
        for position, memory_id in enumerate(newest[key]):
            held = best.get(memory_id)
            if held is None or (weight, -position) > (held[0], -held[1]):
                best[memory_id] = (weight, position)
    ranked = sorted(best.items(), key=lambda item: (-item[1][0], item[1][1], item[0]))
    return [LaneHit(memory_id, weight) for memory_id, (weight, _) in ranked[: policy.k]]
