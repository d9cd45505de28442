"""Search routing: on a cluster, an agent's searches go to the master owning its
slot, against that master's index, whose name hashes to a slot the master owns."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from grimoire.infra.local.services import CLUSTER_SLOTS, LocalServices, ServicePorts
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.routing import SearchRouting, agent_slot


@dataclass(frozen=True)
class Node:
    name: str


class FakeNodes:
    def __init__(self, ranges: dict[str, tuple[int, int]]) -> None:
        self.slots_cache = {
            slot: [Node(name)] for name, (lo, hi) in ranges.items() for slot in range(lo, hi + 1)
        }

    def get_node_from_slot(self, slot: int) -> Node:
        return self.slots_cache[slot][0]


class FakeCluster(RedisCluster):  # type: ignore[misc]
    """Only what routing reads: the slot map."""

    def __init__(self, ranges: dict[str, tuple[int, int]]) -> None:
        self.nodes_manager = FakeNodes(ranges)
        self._primaries = [Node(name) for name in ranges]
        self._initialize = False  # the slot map is read

    def get_primaries(self) -> list[Any]:
        return self._primaries


RANGES = {"n1:1": (0, 5460), "n2:2": (5461, 10922), "n3:3": (10923, 16383)}


async def test_an_agent_is_searched_on_its_slots_master_in_that_masters_index() -> None:
    routing = SearchRouting(FakeCluster(RANGES), "gm")
    for agent in ("golem-1", "fleet-a/golem-2", "x", "agent-a"):
        target = await routing.target(agent)
        node = target.options["target_nodes"]
        lo, hi = RANGES[node.name]
        assert lo <= agent_slot(agent) <= hi
        # RediSearch answers MOVED for an index named outside the master's slots.
        assert lo <= key_slot(target.index.encode()) <= hi
        assert target.index.startswith("gm-memory{s")


async def test_every_master_has_one_index_of_its_own() -> None:
    routing = SearchRouting(FakeCluster(RANGES), "gm")
    targets = await routing.every_master()
    assert [t.options["target_nodes"].name for t in targets] == sorted(RANGES)
    assert len({t.index for t in targets}) == 3
    for target in targets:
        lo, hi = RANGES[target.options["target_nodes"].name]
        assert lo <= key_slot(target.index.encode()) <= hi


async def test_one_redis_has_the_one_index_and_no_options() -> None:
    class Plain:
        pass

    routing = SearchRouting(Plain(), "gm")
    target = await routing.target("golem-1")
    assert (target.index, dict(target.options)) == (Keyspace("gm").index_name, {})
    assert [t.index for t in await routing.every_master()] == ["gm-memory"]


def test_local_cluster_splits_every_slot_over_its_masters(tmp_path: Any) -> None:
    services = LocalServices(tmp_path, ServicePorts(19001, 17001), redis_cluster_masters=3)
    ranges = services._slot_ranges()
    assert ranges[0][0] == 0 and ranges[-1][1] == CLUSTER_SLOTS - 1
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ranges))
    assert services.redis_url == "redis+cluster://127.0.0.1:17001/0"
    assert "redis-3" in {svc.name for svc in services._redis_nodes}
    assert LocalServices(tmp_path, ServicePorts(19001, 17001)).redis_url.startswith("redis://")
