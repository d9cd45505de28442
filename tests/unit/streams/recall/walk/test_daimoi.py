"""grimoire.streams.recall.walk.daimoi: key ranking, neighbour scoring and the budgeted walk.

The graph is an in-memory GraphView over a dict that counts its (batched) calls.
Expected scores are rebuilt by hand from the documented formulas.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

import pytest

from grimoire.streams.model.nexus_keys import commonness_penalty
from grimoire.streams.recall.walk.daimoi import (
    DEFAULT_FIELD_BONUS,
    MAX_REPLACEMENT_DEPTH,
    READ_AHEAD_KEYS_FACTOR,
    Circuit,
    NodeInfo,
    Related,
    Seed,
    WalkBudget,
    key_strength,
    kind_preference,
    rank_keys,
    recency,
    score_neighbour,
    walk,
)

NOW = 10_000_000
HL = 1_000_000  # half-life used in the walk tests


class FakeGraph:
    """Dict-backed GraphView; `newest` lists ids by (ts desc, id), deleted ones too."""

    def __init__(self, nodes: Iterable[NodeInfo]) -> None:
        self._nodes = {n.memory_id: n for n in nodes}
        self.calls: dict[str, int] = {"nodes": 0, "degrees": 0, "newest": 0, "neighbourhood": 0}
        self.fetched_keys: list[str] = []
        self.requested_ids: list[int] = []

    def _carrying(self, key: str) -> list[NodeInfo]:
        return [n for n in self._nodes.values() if key in n.keys]

    async def nodes(self, memory_ids: Sequence[str]) -> dict[str, NodeInfo]:
        self.calls["nodes"] += 1
        self.requested_ids.append(len(memory_ids))
        return {i: self._nodes[i] for i in memory_ids if i in self._nodes}

    async def degrees(self, keys: Sequence[str]) -> dict[str, int]:
        self.calls["degrees"] += 1
        return {k: len(self._carrying(k)) for k in keys if self._carrying(k)}

    async def newest(self, keys: Sequence[str], limit: int) -> dict[str, list[str]]:
        self.calls["newest"] += 1
        return self._newest(keys, limit)

    async def neighbourhood(
        self, keys: Sequence[str], limit: int
    ) -> tuple[dict[str, int], dict[str, list[str]]]:
        self.calls["neighbourhood"] += 1
        degrees = {k: len(self._carrying(k)) for k in keys if self._carrying(k)}
        return degrees, self._newest(keys, limit)

    def _newest(self, keys: Sequence[str], limit: int) -> dict[str, list[str]]:
        self.fetched_keys.extend(keys)
        out: dict[str, list[str]] = {}
        for key in keys:
            ordered = sorted(self._carrying(key), key=lambda n: (-n.ts_ms, n.memory_id))
            out[key] = [n.memory_id for n in ordered[:limit]]
        return out

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())


def node(memory_id: str, *keys: str, **kw: object) -> NodeInfo:
    fields: dict[str, object] = {"kind": "episode", "ts_ms": NOW, "utility": 1.0}
    fields.update(kw)
    return NodeInfo(memory_id, keys=keys, **fields)  # type: ignore[arg-type]


def ks(type_w: float, degree: int, bonus: float = 1.0) -> float:
    return key_strength(type_w * bonus * commonness_penalty(degree))


async def run(graph: FakeGraph, seeds: Sequence[Seed], **kw: object) -> list[Related]:
    kw.setdefault("recency_half_life_ms", HL)
    return await walk(seeds, graph, now_ms=NOW, **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- rank_keys


def test_rank_keys_type_weight_field_bonus_and_order() -> None:
    n = node("m", "chan:ops", "tool:bash", "path:/a/b.py", "err:timeout")
    ranked = rank_keys(n, {}, field_digest=["tool:bash"])
    assert ranked == [
        ("err:timeout", 3.0),
        ("tool:bash", pytest.approx(2.0 * 1.4)),
        ("path:/a/b.py", 2.5),
        ("chan:ops", 1.3),
    ]
    assert DEFAULT_FIELD_BONUS == 1.4


def test_rank_keys_degree_penalty_demotes_common_keys() -> None:
    n = node("m", "err:timeout", "path:/a/b.py")
    ranked = rank_keys(n, {"err:timeout": 50_000, "path:/a/b.py": 1})
    expected_err = 3.0 / math.sqrt(1 + math.log(1 + 50_000))
    expected_path = 2.5 / math.sqrt(1 + math.log(2))
    assert [k for k, _ in ranked] == ["path:/a/b.py", "err:timeout"]
    assert ranked[0][1] == pytest.approx(expected_path)
    assert ranked[1][1] == pytest.approx(expected_err)


def test_rank_keys_circuit_multiplier_tie_break_limit_and_bad_keys() -> None:
    n = node("m", "path:/b", "path:/a", "err:oom", "not-a-key", "tag:ops/deploy")
    circuit = Circuit("calm", (("err", 0.5), ("tag:ops", 1.25)))
    ranked = rank_keys(n, {}, circuit=circuit, field_bonus=1.6, field_digest=["path:/b"])
    assert ranked == [
        ("path:/b", pytest.approx(4.0)),
        ("path:/a", 2.5),
        ("tag:ops/deploy", 2.5),  # 2.0 * 1.25, tie with path:/a broken by key
        ("err:oom", 1.5),
    ]
    assert rank_keys(n, {}, limit=1) == [("err:oom", 3.0)]
    assert rank_keys(n, {}, limit=0) == []
    tie = rank_keys(node("m", "path:/z", "path:/y"), {})
    assert [k for k, _ in tie] == ["path:/y", "path:/z"]
    with pytest.raises(ValueError):
        rank_keys(n, {}, limit=-1)


# --------------------------------------------------------------------------- scoring


def test_scoring_pieces() -> None:
    assert key_strength(3.0) == pytest.approx(0.75)
    assert key_strength(0.0) == 0.0
    assert recency(0, 100) == 1.0
    assert recency(100, 100) == pytest.approx(0.5)
    assert recency(300, 100) == pytest.approx(0.125)
    assert recency(-50, 100) == 1.0  # from the future: age 0
    with pytest.raises(ValueError):
        recency(1, 0)
    assert kind_preference("summary") == 1.3
    assert kind_preference("aggregate", "bot") == 1.15
    assert kind_preference("episode", "human") == 1.0
    assert kind_preference("episode", "") == 1.0
    assert kind_preference("insight", "bot") == 0.85


def test_score_neighbour_multiplies_every_factor() -> None:
    n = node("x", "err:oom", kind="summary", ts_ms=NOW - 2 * HL, utility=0.8, spam=0.25)
    score = score_neighbour(n, seed_strength=0.5, key_strength=0.6, now_ms=NOW, half_life_ms=HL)
    assert score == pytest.approx(0.5 * 0.6 * 0.25 * 0.8 * 1.3 * 0.75)
    clamped = replace(n, utility=3.0, spam=-1.0, ts_ms=NOW, kind="episode", actor="bot")
    score = score_neighbour(clamped, seed_strength=1.0, key_strength=1.0, now_ms=NOW)
    assert score == pytest.approx(0.85)


def test_budget_rejects_negative_counts() -> None:
    with pytest.raises(ValueError):
        WalkBudget(max_hops=-1)
    assert WalkBudget() == WalkBudget(8, 2, 6, 25, 400)


# --------------------------------------------------------------------------- the walk


def small_graph() -> FakeGraph:
    """S -err:timeout- A -path:/x- C ; S -tool:bash- B(summary, older, utility .5)."""
    return FakeGraph(
        [
            node("S", "err:timeout", "tool:bash"),
            node("A", "err:timeout", "path:/x"),
            node("B", "tool:bash", kind="summary", ts_ms=NOW - HL, utility=0.5),
            node("C", "path:/x", ts_ms=NOW - 10),
        ]
    )


A_SCORE = ks(3.0, 2)
B_SCORE = ks(2.0, 2) * 0.5 * 0.5 * 1.3


async def test_one_hop_scores_by_hand() -> None:
    got = await run(small_graph(), [Seed("S", 1.0)], budget=WalkBudget(num_walkers=1, max_hops=1))
    assert [(r.memory_id, r.via_keys, r.hops, r.walker) for r in got] == [
        ("A", ("err:timeout",), 1, 0),
        ("B", ("tool:bash",), 1, 0),
    ]
    assert got[0].score == pytest.approx(A_SCORE)
    assert got[1].score == pytest.approx(B_SCORE)


async def test_two_hops_continue_from_best_node() -> None:
    got = await run(small_graph(), [Seed("S", 2.0)], budget=WalkBudget(num_walkers=1))
    by_id = {r.memory_id: r for r in got}
    assert set(by_id) == {"A", "B", "C"}
    c_score = 2.0 * A_SCORE * ks(2.5, 2) * recency(10, HL)
    assert by_id["C"].score == pytest.approx(c_score)
    assert by_id["C"].hops == 2
    assert by_id["C"].via_keys == ("path:/x",)
    assert by_id["A"].score == pytest.approx(2.0 * A_SCORE)
    assert [r.memory_id for r in got] == sorted(by_id, key=lambda i: (-by_id[i].score, i))


async def test_field_digest_steers_scores() -> None:
    g = small_graph()
    got = await run(g, [Seed("S", 1.0)], field_digest=["tool:bash"], budget=WalkBudget(1, 1))
    b = next(r for r in got if r.memory_id == "B")
    assert b.score == pytest.approx(ks(2.0, 2, bonus=1.4) * 0.5 * 0.5 * 1.3)


async def test_circuit_chooses_the_walked_key() -> None:
    budget = WalkBudget(num_walkers=1, max_hops=1, max_keys_per_node=1)
    plain = await run(small_graph(), [Seed("S", 1.0)], budget=budget)
    assert [r.memory_id for r in plain] == ["A"]  # err outranks tool
    tooling = Circuit("procedural", (("tool", 2.0),))
    steered = await run(small_graph(), [Seed("S", 1.0)], budget=budget, circuits=[tooling])
    assert [r.memory_id for r in steered] == ["B"]
    assert steered[0].score == pytest.approx(key_strength(4.0 * commonness_penalty(2)) * 0.325)


async def test_compacted_memory_is_replaced_by_its_summary() -> None:
    g = FakeGraph(
        [
            node("S", "err:dns"),
            node("M", "err:dns", replaced_by="SUM"),
            node("SUM", "tag:topic/net", kind="summary", ts_ms=NOW - HL),
        ]
    )
    got = await run(g, [Seed("S", 1.0)], budget=WalkBudget(1, 1))
    assert [(r.memory_id, r.via_keys) for r in got] == [("SUM", ("err:dns",))]
    assert got[0].score == pytest.approx(ks(3.0, 2) * 0.5 * 1.3)


@pytest.mark.parametrize("summary", [None, "deleted"])
async def test_missing_or_deleted_summary_leaves_the_original(summary: str | None) -> None:
    nodes = [node("S", "err:dns"), node("M", "err:dns", replaced_by="SUM")]
    if summary == "deleted":
        nodes.append(node("SUM", "err:dns", kind="summary", deleted=True))
    got = await run(FakeGraph(nodes), [Seed("S", 1.0)], budget=WalkBudget(1, 1))
    assert [r.memory_id for r in got] == ["M"]


async def test_replacement_chain_and_cycle_terminate() -> None:
    g = FakeGraph(
        [
            node("S", "err:dns"),
            node("M", "err:dns", replaced_by="S1"),
            node("S1", kind="summary", replaced_by="S2"),
            node("S2", kind="summary", replaced_by="S1"),  # a cycle must not hang
        ]
    )
    got = await run(g, [Seed("S", 1.0)], budget=WalkBudget(1, 1))
    assert len(got) == 1 and got[0].memory_id in {"S1", "S2"}
    assert MAX_REPLACEMENT_DEPTH >= 1


async def test_deleted_memories_and_seeds_are_never_returned() -> None:
    g = FakeGraph(
        [
            node("S", "err:oom"),
            node("T", "err:oom"),
            node("D", "err:oom", deleted=True),
            node("SUMD", kind="summary", deleted=True),
            node("X", "err:oom", replaced_by="D"),  # replaced by a deleted memory
        ]
    )
    got = await run(g, [Seed("S", 1.0), Seed("T", 0.5)])
    assert {r.memory_id for r in got} == {"X"}
    dead_seed = await run(
        FakeGraph([node("S", "err:oom", deleted=True), node("Y", "err:oom")]), [Seed("S", 1.0)]
    )
    assert dead_seed == []


async def test_zero_budgets_give_nothing() -> None:
    seeds = [Seed("S", 1.0)]
    for budget in (
        WalkBudget(num_walkers=0),
        WalkBudget(max_hops=0),
        WalkBudget(max_keys_per_node=0),
        WalkBudget(max_neighbors_per_key=0),
        WalkBudget(max_total_candidates=0),
    ):
        assert await run(small_graph(), seeds, budget=budget) == []
    assert await run(small_graph(), []) == []


async def test_budgets_of_one() -> None:
    seeds = [Seed("S", 1.0)]
    one_candidate = await run(small_graph(), seeds, budget=WalkBudget(max_total_candidates=1))
    assert [r.memory_id for r in one_candidate] == ["A"]  # the best of the first expansion
    one_hop = await run(small_graph(), seeds, budget=WalkBudget(max_hops=1))
    assert {r.memory_id for r in one_hop} == {"A", "B"}
    one_key = await run(small_graph(), seeds, budget=WalkBudget(max_keys_per_node=1))
    assert {r.memory_id for r in one_key} == {"A", "C"}  # err:timeout, then path:/x
    g = FakeGraph(
        [node("S", "err:oom", ts_ms=NOW - 5)]
        + [node(f"N{i}", "err:oom", ts_ms=NOW - i) for i in range(3)]
    )
    newest_only = await run(g, seeds, budget=WalkBudget(max_hops=1, max_neighbors_per_key=1))
    assert [r.memory_id for r in newest_only] == ["N0"]
    one_walker = await run(small_graph(), [Seed("S", 1.0), Seed("C", 0.9)], budget=WalkBudget(1, 1))
    assert {r.memory_id for r in one_walker} == {"A", "B"}  # only seeds[0] walked


async def test_merge_keeps_best_score_and_union_of_keys() -> None:
    g = FakeGraph(
        [
            node("S1", "err:oom"),
            node("S2", "path:/p"),
            node("X", "err:oom", "path:/p"),
        ]
    )
    got = await run(g, [Seed("S2", 0.5), Seed("S1", 1.0)], budget=WalkBudget(2, 1))
    assert len(got) == 1
    x = got[0]
    assert x.via_keys == ("err:oom", "path:/p")
    assert x.score == pytest.approx(1.0 * ks(3.0, 2))
    assert x.walker == 0  # seeds sorted best first: walker 0 starts at S1


async def test_candidate_cap_is_global() -> None:
    g = FakeGraph([node("S", "err:oom")] + [node(f"N{i:02d}", "err:oom") for i in range(30)])
    got = await run(g, [Seed("S", 1.0)], budget=WalkBudget(max_total_candidates=7))
    assert len(got) == 7
    assert [r.memory_id for r in got] == [f"N{i:02d}" for i in range(7)]  # equal scores: by id


def big_graph(reverse: bool = False) -> FakeGraph:
    pool = ["err:oom", "err:dns", "path:/a.py", "path:/b.py", "tool:git", "tag:ops/deploy",
            "chan:ops", "tag:topic/x", "url:example.com/a", "entity:eth"]  # fmt: skip
    nodes = [
        node(
            f"m{i:03d}",
            *{pool[i % 10], pool[(i * 3 + 1) % 10], pool[(i * 7 + 2) % 10]},
            ts_ms=NOW - (i * 37 % 11) * 1000,
            utility=0.3 + (i % 5) / 10,
            kind="summary" if i % 13 == 0 else "episode",
            actor="bot" if i % 4 == 0 else "human",
            deleted=i % 17 == 5,
            replaced_by=f"m{(i + 40) % 120:03d}" if i % 19 == 3 else "",
            spam=0.5 if i % 23 == 0 else 0.0,
        )
        for i in range(120)
    ]
    return FakeGraph(reversed(nodes) if reverse else nodes)


BIG_SEEDS = [Seed("m001", 0.9), Seed("m002", 0.8), Seed("m010", 0.7), Seed("m001", 0.3)]


async def test_deterministic_and_independent_of_insertion_order() -> None:
    circuits = [Circuit("a", (("err", 1.5),)), Circuit("b", (("path", 1.5),))]
    budget = WalkBudget(max_neighbors_per_key=8, max_total_candidates=40)
    kw = {"budget": budget, "circuits": circuits, "field_digest": ["tool:git"]}
    first = await run(big_graph(), BIG_SEEDS, **kw)
    again = await run(big_graph(), BIG_SEEDS, **kw)
    flipped = await run(big_graph(reverse=True), list(reversed(BIG_SEEDS)), **kw)
    assert first and len(first) <= 40
    assert first == again == flipped
    assert [(r.score, r.memory_id) for r in first] == sorted(
        ((r.score, r.memory_id) for r in first), key=lambda t: (-t[0], t[1])
    )
    returned = {r.memory_id for r in first}
    assert not returned & {"m001", "m002", "m010"}
    g = big_graph()
    assert all(not g._nodes[i].deleted and not g._nodes[i].replaced_by for i in returned)


async def test_graph_calls_scale_with_expansions_not_neighbours() -> None:
    budget = WalkBudget()
    g = big_graph()
    await run(g, BIG_SEEDS, budget=budget)
    expansions = budget.num_walkers * budget.max_hops
    assert g.total_calls <= 1 + expansions * (3 + MAX_REPLACEMENT_DEPTH)
    # One expansion touching 25 neighbours costs one call of each kind.
    star = FakeGraph(
        [node("S", "err:oom", ts_ms=NOW + 1)] + [node(f"N{i:02d}", "err:oom") for i in range(25)]
    )
    got = await run(star, [Seed("S", 1.0)], budget=WalkBudget(num_walkers=1, max_hops=1))
    assert len(got) == 24  # newest 25 include S itself
    # seeds + neighbours; the seed's one key: degree and members in one call
    assert star.calls == {"nodes": 2, "degrees": 0, "newest": 0, "neighbourhood": 1}


async def test_walkers_sharing_a_seed_reuse_the_cache() -> None:
    g = FakeGraph([node("S", "err:oom")] + [node(f"N{i}", "err:oom") for i in range(5)])
    await run(g, [Seed("S", 1.0)], budget=WalkBudget(num_walkers=1, max_hops=1))
    single = dict(g.calls)
    g2 = FakeGraph([node("S", "err:oom")] + [node(f"N{i}", "err:oom") for i in range(5)])
    many = await run(g2, [Seed("S", 1.0)], budget=WalkBudget(num_walkers=8, max_hops=1))
    assert g2.calls == single
    assert len(many) == 5


async def test_a_node_with_more_keys_than_it_expands_fetches_only_its_best() -> None:
    """Up to `READ_AHEAD_KEYS_FACTOR` x `max_keys_per_node` keys a node's keys are
    all read ahead with their degrees, though only the best are walked; beyond it
    the degrees come first, and only the best keys are fetched."""
    keys = [f"entity:e{i}" for i in range(4)]
    many = FakeGraph(
        [node("S", *keys, ts_ms=NOW + 1)]
        # e0 is carried by the most memories, so it ranks last (commonness penalty).
        + [node(f"N{i}", keys[0]) for i in range(6)]
        + [node(f"M{i}", key) for i, key in enumerate(keys[1:])]
    )
    narrow = WalkBudget(num_walkers=1, max_hops=1, max_keys_per_node=1)
    assert len(keys) > READ_AHEAD_KEYS_FACTOR * narrow.max_keys_per_node
    got = await run(many, [Seed("S", 1.0)], budget=narrow)
    assert many.calls["neighbourhood"] == 0
    assert many.calls["degrees"] == 1
    assert sorted(many.fetched_keys) == keys[1:2]  # the rarest, ties by key
    assert {r.memory_id for r in got} == {"M0"}

    ahead = FakeGraph(many._nodes.values())
    budget = WalkBudget(num_walkers=1, max_hops=1, max_keys_per_node=3)
    got = await run(ahead, [Seed("S", 1.0)], budget=budget)
    assert ahead.calls["neighbourhood"] == 1
    assert ahead.calls["degrees"] == 0
    assert sorted(ahead.fetched_keys) == keys  # read ahead, e0 included ...
    assert {r.memory_id for r in got} == {"M0", "M1", "M2"}  # ... but not walked

    few = FakeGraph(many._nodes.values())
    wide = WalkBudget(num_walkers=1, max_hops=1, max_keys_per_node=4)
    got_all = await run(few, [Seed("S", 1.0)], budget=wide)
    assert few.calls["neighbourhood"] == 1
    assert few.calls["degrees"] == 0
    assert sorted(few.fetched_keys) == keys
    assert {r.memory_id for r in got_all} == {"M0", "M1", "M2", *(f"N{i}" for i in range(6))}
