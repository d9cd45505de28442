"""The daimoi walk crosses facts' entity links: a node holding `entity:alice` also
holds `entity:acme` while a fact links alice to acme, so the walk reaches
memories about acme from a memory about alice, names the fact, stays
deterministic and takes at most `MAX_LINKED_KEYS_PER_NODE` linked keys a node."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from grimoire.streams.facts.queries import entity_links
from grimoire.streams.facts.timeline import assert_fact
from grimoire.streams.facts.values import Fact
from grimoire.streams.ports.recall import KeyLinks
from grimoire.streams.recall.walk.daimoi import (
    MAX_LINKED_KEYS_PER_NODE,
    NodeInfo,
    Related,
    Seed,
    walk,
)
from tests.support.facts import agent_fact

NOW = 10_000_000


class Graph:
    """A dict-backed GraphView; with `facts`, also a KeyLinks over their links."""

    def __init__(self, nodes: Iterable[NodeInfo]) -> None:
        self._nodes = {n.memory_id: n for n in nodes}

    def _carrying(self, key: str) -> list[NodeInfo]:
        return [n for n in self._nodes.values() if key in n.keys]

    async def nodes(self, memory_ids: Sequence[str]) -> dict[str, NodeInfo]:
        return {i: self._nodes[i] for i in memory_ids if i in self._nodes}

    async def degrees(self, keys: Sequence[str]) -> dict[str, int]:
        return {k: len(self._carrying(k)) for k in keys}

    async def newest(self, keys: Sequence[str], limit: int) -> dict[str, list[str]]:
        return {
            k: [
                n.memory_id
                for n in sorted(self._carrying(k), key=lambda n: (-n.ts_ms, n.memory_id))
            ][:limit]
            for k in keys
        }

    async def neighbourhood(
        self, keys: Sequence[str], limit: int
    ) -> tuple[dict[str, int], dict[str, list[str]]]:
        return await self.degrees(keys), await self.newest(keys, limit)


class LinkedGraph(Graph):
    def __init__(self, nodes: Iterable[NodeInfo], facts: Iterable[Fact]) -> None:
        super().__init__(nodes)
        self._links = entity_links(facts)
        self.link_calls: list[list[str]] = []

    async def linked_keys(self, keys: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        self.link_calls.append(list(keys))
        return {k: self._links[k] for k in keys if k in self._links}

    @property
    def may_link(self) -> bool:
        return bool(self._links)


def node(memory_id: str, *keys: str) -> NodeInfo:
    return NodeInfo(memory_id, kind="episode", keys=keys, ts_ms=NOW, utility=1.0)


def fact(event: str, subject: str, obj: str, predicate: str = "works_at") -> Fact:
    return agent_fact("a", event, subject, obj, valid_from=1, known_ms=1, predicate=predicate)


NODES = [
    node("seed", "entity:alice", "tag:topic/people"),
    node("acme-memo", "entity:acme"),
    node("unrelated", "entity:zed"),
]


async def ids(graph: Graph) -> list[Related]:
    return await walk([Seed("seed", 1.0)], graph, now_ms=NOW)


async def test_without_a_fact_the_walk_does_not_reach_the_linked_entity() -> None:
    assert not isinstance(Graph(NODES), KeyLinks)
    assert [r.memory_id for r in await ids(Graph(NODES))] == []
    assert [r.memory_id for r in await ids(LinkedGraph(NODES, []))] == []


async def test_a_graph_that_holds_no_links_is_asked_once_per_walk() -> None:
    # Most agents record no facts: once the graph says so, the walk stops asking.
    linked_nowhere = LinkedGraph([*NODES, node("alice-2", "entity:alice", "entity:zed")], [])
    await walk([Seed("seed", 1.0)], linked_nowhere, now_ms=NOW)
    assert len(linked_nowhere.link_calls) == 1


async def test_an_active_fact_links_the_seed_to_the_objects_memories() -> None:
    works = fact("f1", "alice", "acme")
    found = await ids(LinkedGraph(NODES, [works]))
    assert [(r.memory_id, r.via_keys, r.via_facts, r.hops) for r in found] == [
        ("acme-memo", ("entity:acme",), (works.fact_id,), 1)
    ]


async def test_a_superseded_fact_links_nothing() -> None:
    old, new = fact("f1", "alice", "acme"), fact("f2", "alice", "zed")
    changes = assert_fact([old], new)
    versions = {f.fact_id: f for f in [old, *changes.upserts]}
    found = await ids(LinkedGraph(NODES, versions.values()))
    assert [(r.memory_id, r.via_facts) for r in found] == [("unrelated", (new.fact_id,))]


async def test_links_run_both_ways_and_the_walk_is_deterministic() -> None:
    works = fact("f1", "alice", "acme")
    nodes = [node("seed", "entity:acme"), node("alice-memo", "entity:alice")]
    first = await walk([Seed("seed", 1.0)], LinkedGraph(nodes, [works]), now_ms=NOW)
    again = await walk([Seed("seed", 1.0)], LinkedGraph(nodes, [works]), now_ms=NOW)
    assert [r.memory_id for r in first] == ["alice-memo"]
    assert first == again


async def test_a_hub_entity_adds_at_most_the_cap_of_keys_to_a_node() -> None:
    targets = [f"org{i:02d}" for i in range(MAX_LINKED_KEYS_PER_NODE + 3)]
    facts = [fact(f"f{i}", "alice", t, predicate=f"p{i}") for i, t in enumerate(targets)]
    nodes = [node("seed", "entity:alice"), *(node(f"m-{t}", f"entity:{t}") for t in targets)]
    graph = LinkedGraph(nodes, facts)
    found = await walk([Seed("seed", 1.0)], graph, now_ms=NOW)
    reached = sorted(r.memory_id for r in found if r.hops == 1)
    # The first linked keys in (linked key) order: deterministic, bounded.
    assert reached == [f"m-{t}" for t in targets[:MAX_LINKED_KEYS_PER_NODE]]
    # Each entity key is looked up once per walk.
    looked = [k for call in graph.link_calls for k in call]
    assert len(looked) == len(set(looked))
