"""`grimoire causal` and the walk behind it and GET …/causal/{id}
(`infra/http/causal.causal_neighbours`): the store is read hop by hop, exactly
the nodes k_hop expands, and the answer is k_hop's over the stored edges.

The CLI runs as a person would (`cli.main`), its Redis replaced by the in-memory
learning store (the Redis store's reads are in the contract suite and the route's
test, tests/integration/test_causal_http.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from grimoire.infra import cli
from grimoire.infra.cli import causal, common
from grimoire.infra.http import causal as route
from grimoire.streams.learn.causal import CausalEdge, Direction, k_hop
from grimoire.tables.learn import store as learn_store
from grimoire.tables.testing.learning_store import InMemoryLearningStore
from tests.support.causal import EDGES, write_edges
from tests.support.cli import patch_opener, run_json

AGENT = "fleet-a/golem-1"


class CountingStore(InMemoryLearningStore):
    """Records which nodes each `edges_of` read asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[list[str]] = []

    async def edges_of(self, agent_id: str, nodes: Sequence[str]) -> dict[str, list[CausalEdge]]:
        self.reads.append(list(nodes))
        return await super().edges_of(agent_id, nodes)


async def seeded() -> CountingStore:
    store = CountingStore()
    await write_edges(store, AGENT, EDGES)
    return store


def plain_k_hop(start: str, hops: int, direction: Direction, limit: int) -> list[Any]:
    """k_hop over the edges held in memory, for comparison."""

    def edges_of(nodes: Sequence[str]) -> dict[str, list[CausalEdge]]:
        return {n: sorted((e for e in EDGES if n in (e.cause, e.effect)),
                          key=lambda e: (e.cause, e.effect)) for n in nodes}  # fmt: skip

    return k_hop(start, hops, edges_of, direction=direction, limit=limit)


@pytest.mark.parametrize("direction", list(Direction))
@pytest.mark.parametrize("hops", [1, 2, 3, 4])
@pytest.mark.parametrize("start", ["s", "a", "c", "x", "nobody"])
@pytest.mark.parametrize("limit", [1, 2, 200])
async def test_the_walk_over_the_store_is_k_hop(
    direction: Direction, hops: int, start: str, limit: int
) -> None:
    store = await seeded()
    found = await route.causal_neighbours(
        store, AGENT, start, hops=hops, direction=direction, limit=limit
    )
    assert found == plain_k_hop(start, hops, direction, limit)
    assert len(store.reads) <= hops


async def test_each_hop_is_one_read_of_the_frontier() -> None:
    store = await seeded()
    await route.causal_neighbours(store, AGENT, "s", hops=4, direction=Direction.EFFECTS)
    assert store.reads == [["s"], ["a", "d"], ["b"], ["c"]]
    store.reads.clear()
    # the limit reached after hop 1: nothing more is read
    await route.causal_neighbours(store, AGENT, "s", hops=4, direction=Direction.BOTH, limit=3)
    assert store.reads == [["s"]]


async def test_another_agents_edges_are_not_walked() -> None:
    store = await seeded()
    found = await route.causal_neighbours(store, "other", "s", hops=4, direction=Direction.BOTH)
    assert found == []


def test_the_cli_limits_are_the_routes() -> None:
    assert causal._MAX_CAUSAL_HOPS == route.MAX_HOPS
    assert causal._MAX_CAUSAL_LIMIT == route.MAX_LIMIT
    assert tuple(d.value for d in Direction) == causal._CAUSAL_DIRECTIONS


# ---- grimoire causal -----------------------------------------------------------------


@pytest.fixture
async def stored(monkeypatch: pytest.MonkeyPatch) -> CountingStore:
    store = await seeded()

    patch_opener(monkeypatch, common, "memory_redis", object())
    monkeypatch.setattr(learn_store, "RedisLearningStore", lambda redis, prefix: store)
    return store


def test_causal_prints_one_hop_of_effects_by_default(
    stored: CountingStore, capsys: pytest.CaptureFixture[str]
) -> None:
    code, (answer,), _ = run_json(capsys, "causal", "--agent", AGENT, "s")
    assert code == 0
    assert answer == {
        "memory_id": "s",
        "hops": 1,
        "direction": "effects",
        "truncated": False,
        "nodes": [
            {"memory_id": "a", "hops": 1, "via": EDGES[0].to_wire()},
            {"memory_id": "d", "hops": 1, "via": EDGES[4].to_wire()},
        ],
    }


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--hops", "3", "--direction", "causes", "c"], [("b", 1), ("a", 2), ("s", 3), ("y", 3)]),
        (["--hops", "2", "--direction", "both", "s"],
         [("a", 1), ("d", 1), ("x", 1), ("b", 2), ("y", 2)]),
        (["--hops", "4", "--limit", "2", "s"], [("a", 1), ("d", 1)]),
        (["--hops", "4", "nobody"], []),
    ],
)  # fmt: skip
def test_causal_hops_direction_and_limit(
    stored: CountingStore,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    expected: list[tuple[str, int]],
) -> None:
    code, (answer,), _ = run_json(capsys, "causal", "--agent", AGENT, *argv)
    assert code == 0
    assert [(n["memory_id"], n["hops"]) for n in answer["nodes"]] == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--hops", "0", "s"], "--hops must be within [1, 4], got 0"),
        (["--hops", "5", "s"], "--hops must be within [1, 4], got 5"),
        (["--limit", "0", "s"], "--limit must be within [1, 500], got 0"),
        ([" "], "MEMORY_ID must not be empty"),
    ],
)
def test_causal_refuses_bad_arguments_with_exit_2(
    stored: CountingStore, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run_json(capsys, "causal", "--agent", AGENT, *argv)
    assert (code, out) == (2, [])
    assert message in err
    assert stored.reads == []


def test_causal_refuses_a_bad_agent_and_an_unknown_direction(
    stored: CountingStore, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_json(capsys, "causal", "--agent", "has space", "s")
    assert code == 2 and "not an agent id" in err
    with pytest.raises(SystemExit) as exited:
        cli.main(["causal", "--agent", AGENT, "--direction", "sideways", "s"])
    assert exited.value.code == 2
    assert stored.reads == []
