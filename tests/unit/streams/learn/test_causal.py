"""The causal graph's pure core (streams/learn/causal.py): an edge's running mean
and clamping, a run's action → outcome links, the shrunk causal uplift, and the
k-hop walk in each direction, with its depth, limit and tie-breaks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pytest

from grimoire.streams.learn.causal import (
    CausalEdge,
    Direction,
    Reached,
    causal_uplift,
    edges_by_cause,
    k_hop,
    reinforce,
    run_links,
)

# --- reinforce ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signals", "weight", "evidence"),
    [
        ([0.8], 0.8, 1),
        # (0.8 + 0.2) / 2 = 0.5
        ([0.8, 0.2], 0.5, 2),
        # (1 - 1 + 0.5) / 3 = 0.1666...
        ([1.0, -1.0, 0.5], 0.166666667, 3),
        # clamped: 3.0 counts as 1.0, -7 as -1.0: (1 - 1) / 2 = 0
        ([3.0, -7.0], 0.0, 2),
        # clamped on the first sighting too
        ([-2.5], -1.0, 1),
        # (0.1 + 0.2 + 0.3 + 0.4) / 4 = 0.25
        ([0.1, 0.2, 0.3, 0.4], 0.25, 4),
    ],
)
def test_reinforce_is_a_running_mean_of_clamped_signals(
    signals: list[float], weight: float, evidence: int
) -> None:
    edge: CausalEdge | None = None
    for block, signal in enumerate(signals, start=10):
        edge = reinforce(edge, "a", "o", signal, block)
    assert edge is not None
    assert (edge.cause, edge.effect) == ("a", "o")
    assert edge.weight == pytest.approx(weight, abs=1e-9)
    assert edge.evidence == evidence
    assert edge.last_block == 10 + len(signals) - 1


def test_reinforce_keeps_the_latest_block_seen() -> None:
    edge = reinforce(None, "a", "o", 1.0, 50)
    # An older block (a replayed sighting) does not move last_block back.
    assert reinforce(edge, "a", "o", 1.0, 40).last_block == 50
    assert reinforce(edge, "a", "o", 1.0, 60).last_block == 60


def test_reinforce_stays_within_minus_one_and_one() -> None:
    edge: CausalEdge | None = None
    for signal in (5.0, 5.0, -5.0, 5.0):
        edge = reinforce(edge, "a", "o", signal, 0)
        assert -1.0 <= edge.weight <= 1.0


# --- run_links ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("members", "links"),
    [
        # every action → every outcome, sorted; triggers and context link nothing
        (
            {"t": "trigger", "a2": "action", "a1": "action", "o": "outcome", "c": "context"},
            [("a1", "o", 0.4), ("a2", "o", 0.4)],
        ),
        (
            {"a": "action", "o2": "outcome", "o1": "outcome"},
            [("a", "o1", 0.4), ("a", "o2", 0.4)],
        ),
        ({"a": "action", "c": "context"}, []),  # no outcome memory: nothing
        ({"o": "outcome", "t": "trigger"}, []),  # no action: nothing
        ({}, []),
    ],
)
def test_run_links_are_each_action_to_each_outcome(
    members: dict[str, str], links: list[tuple[str, str, float]]
) -> None:
    assert run_links(members, 0.4) == links


# --- causal_uplift --------------------------------------------------------------------


def edge(cause: str, effect: str, weight: float = 1.0, evidence: int = 1) -> CausalEdge:
    return CausalEdge(cause, effect, weight, evidence, 0)


@pytest.mark.parametrize(
    ("edges", "uplift"),
    [
        ([], 0.0),
        # 0.8·1 / (1 + 1) = 0.4: one success is not a law
        ([edge("a", "o", 0.8, 1)], 0.4),
        # -1·1 / 2 = -0.5
        ([edge("a", "o", -1.0, 1)], -0.5),
        # 1·9 / (9 + 1) = 0.9: evidence moves it towards the mean
        ([edge("a", "o", 1.0, 9)], 0.9),
        # (1·3 + -0.5·1) / (4 + 1) = 2.5 / 5 = 0.5
        ([edge("a", "o1", 1.0, 3), edge("a", "o2", -0.5, 1)], 0.5),
        # (0.5·2 - 0.5·2) / 5 = 0
        ([edge("a", "o1", 0.5, 2), edge("a", "o2", -0.5, 2)], 0.0),
    ],
)
def test_causal_uplift_is_the_evidence_weighted_mean_shrunk_towards_zero(
    edges: list[CausalEdge], uplift: float
) -> None:
    assert causal_uplift(edges) == pytest.approx(uplift, abs=1e-9)


def test_uplift_grows_with_evidence_but_never_reaches_the_mean() -> None:
    uplifts = [causal_uplift([edge("a", "o", 1.0, n)]) for n in range(1, 50)]
    assert uplifts == sorted(uplifts)
    assert all(u < 1.0 for u in uplifts)


def test_edges_by_cause_groups_out_edges() -> None:
    e1, e2, e3 = edge("a", "x"), edge("a", "y"), edge("b", "x")
    assert edges_by_cause([e1, e3, e2]) == {"a": [e1, e2], "b": [e3]}


# --- k_hop ----------------------------------------------------------------------------


class Graph:
    """Edges held in a list; `edges_of` answers as the learning store does (each
    node's edges in and out, by (cause, effect)) and records every call."""

    def __init__(self, edges: Sequence[CausalEdge]) -> None:
        self.edges = list(edges)
        self.calls: list[list[str]] = []

    def edges_of(self, nodes: Sequence[str]) -> Mapping[str, Sequence[CausalEdge]]:
        self.calls.append(list(nodes))
        return {
            n: sorted(
                (e for e in self.edges if n in (e.cause, e.effect)),
                key=lambda e: (e.cause, e.effect),
            )
            for n in nodes
        }


# s → a → b → c, and x → s, y → a (causes), plus s → d (a second effect).
CHAIN = [
    edge("s", "a", 0.5, 2),
    edge("a", "b", 0.5, 1),
    edge("b", "c", 1.0, 1),
    edge("x", "s", 1.0, 1),
    edge("y", "a", 1.0, 1),
    edge("s", "d", -1.0, 1),
]


def reached(found: Sequence[Reached]) -> list[tuple[str, int]]:
    return [(r.memory_id, r.hops) for r in found]


@pytest.mark.parametrize(
    ("direction", "hops", "expected"),
    [
        (Direction.EFFECTS, 1, [("a", 1), ("d", 1)]),
        (Direction.EFFECTS, 2, [("a", 1), ("d", 1), ("b", 2)]),
        (Direction.EFFECTS, 3, [("a", 1), ("d", 1), ("b", 2), ("c", 3)]),
        (Direction.EFFECTS, 4, [("a", 1), ("d", 1), ("b", 2), ("c", 3)]),  # nothing further
        (Direction.CAUSES, 1, [("x", 1)]),
        (Direction.CAUSES, 3, [("x", 1)]),  # x has no cause
        # both ways: s's neighbours a, d, x; then a's b and y
        (Direction.BOTH, 1, [("a", 1), ("d", 1), ("x", 1)]),
        (Direction.BOTH, 2, [("a", 1), ("d", 1), ("x", 1), ("b", 2), ("y", 2)]),
        (Direction.BOTH, 3, [("a", 1), ("d", 1), ("x", 1), ("b", 2), ("y", 2), ("c", 3)]),
    ],
)
def test_k_hop_follows_the_direction_to_the_depth(
    direction: Direction, hops: int, expected: list[tuple[str, int]]
) -> None:
    assert reached(k_hop("s", hops, Graph(CHAIN).edges_of, direction=direction)) == expected


def test_k_hop_from_a_middle_node_causes_walk_back_along_the_chain() -> None:
    found = k_hop("c", 3, Graph(CHAIN).edges_of, direction=Direction.CAUSES)
    # c ← b ← a ← {s, y}: s and y both at 3 hops, by id
    assert reached(found) == [("b", 1), ("a", 2), ("s", 3), ("y", 3)]
    assert [(r.via.cause, r.via.effect) for r in found] == [
        ("b", "c"),
        ("a", "b"),
        ("s", "a"),
        ("y", "a"),
    ]


def test_k_hop_never_revisits_the_start_or_a_node_seen_earlier() -> None:
    # a cycle s → a → s and a → s again through b
    cycle = [edge("s", "a"), edge("a", "s"), edge("a", "b"), edge("b", "s")]
    found = k_hop("s", 4, Graph(cycle).edges_of, direction=Direction.BOTH)
    assert reached(found) == [("a", 1), ("b", 1)]


def test_k_hop_reads_one_frontier_per_hop_and_stops_when_it_is_empty() -> None:
    graph = Graph(CHAIN)
    k_hop("s", 4, graph.edges_of, direction=Direction.EFFECTS)
    # s, then {a, d} sorted, then b, then c; c's frontier is empty: no 5th read
    assert graph.calls == [["s"], ["a", "d"], ["b"], ["c"]]


def test_k_hop_zero_hops_reaches_nothing() -> None:
    graph = Graph(CHAIN)
    assert k_hop("s", 0, graph.edges_of) == []
    assert graph.calls == []


@pytest.mark.parametrize(("limit", "expected"), [(1, ["a"]), (2, ["a", "d"]), (3, ["a", "d", "b"])])
def test_k_hop_limit_cuts_in_hop_then_id_order(limit: int, expected: list[str]) -> None:
    found = k_hop("s", 4, Graph(CHAIN).edges_of, direction=Direction.EFFECTS, limit=limit)
    assert [r.memory_id for r in found] == expected


def test_k_hop_stops_reading_once_the_limit_is_reached() -> None:
    graph = Graph(CHAIN)
    k_hop("s", 4, graph.edges_of, direction=Direction.EFFECTS, limit=2)
    assert graph.calls == [["s"]]  # two found at hop 1: nothing more is read


def test_a_node_is_reached_by_its_strongest_edge_then_by_ids() -> None:
    # t is reached at hop 2 from a and from b; |w|·evidence: a→t 0.5·4 = 2, b→t 1·1 = 1
    strong = [edge("s", "a"), edge("s", "b"), edge("a", "t", 0.5, 4), edge("b", "t", 1.0, 1)]
    (t,) = [r for r in k_hop("s", 2, Graph(strong).edges_of) if r.memory_id == "t"]
    assert (t.via.cause, t.hops) == ("a", 2)
    # a negative edge counts by its size: b→t -1·3 = 3 beats a→t 2
    negative = [*strong[:3], edge("b", "t", -1.0, 3)]
    (t,) = [r for r in k_hop("s", 2, Graph(negative).edges_of) if r.memory_id == "t"]
    assert t.via.cause == "b"
    # equal strength: the smaller (cause, effect) wins, whatever order the edges come in
    tie = [edge("s", "b"), edge("s", "a"), edge("b", "t", 1.0, 2), edge("a", "t", 2.0, 1)]
    for edges in (tie, list(reversed(tie))):
        (t,) = [r for r in k_hop("s", 2, Graph(edges).edges_of) if r.memory_id == "t"]
        assert t.via.cause == "a"


def test_k_hop_is_deterministic_whatever_order_the_store_returns() -> None:
    def shuffled(graph: Graph) -> Callable[[Sequence[str]], Mapping[str, Sequence[CausalEdge]]]:
        def edges_of(nodes: Sequence[str]) -> Mapping[str, Sequence[CausalEdge]]:
            return {
                n: list(reversed(es)) for n, es in graph.edges_of(list(reversed(nodes))).items()
            }

        return edges_of

    plain = k_hop("s", 3, Graph(CHAIN).edges_of, direction=Direction.BOTH)
    other = k_hop("s", 3, shuffled(Graph(CHAIN)), direction=Direction.BOTH)
    assert plain == other
