"""The LearningStore contract, run against the Redis store and the reference
in-memory one alike: what runs recalled (the first recall's values win), the
learned weights, ended runs, the causal edges read by pair, by node and all, and an
outcome's part committed as the apply loop commits it (Redis: queued on a MULTI
pipeline, then executed; in memory: applied alone), adjacency kept as a union and
the run's recalls dropped. Agents stay apart."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
from redis.asyncio import Redis

from grimoire.infra.settings import Settings
from grimoire.streams.learn.causal import CausalEdge
from grimoire.streams.learn.hedge import LearnedWeights, initial_weights
from grimoire.streams.learn.runs import EndedRun
from grimoire.streams.recall.rerank import DEFAULT_RERANK_WEIGHTS
from grimoire.tables.learn.store import LearningWrite, RedisLearningStore
from grimoire.tables.ports.learn import LearningStore
from grimoire.tables.ports.transaction import TransactionPart
from grimoire.tables.redis_client import create_redis
from grimoire.tables.testing.learning_store import InMemoryLearningStore
from grimoire.tables.transaction import AgentTransactions

pytestmark = pytest.mark.integration

A, B = "agent-a", "agent-b/fleet"


@dataclass
class Subject:
    store: LearningStore
    commit: Callable[[TransactionPart], Awaitable[None]]

    async def write(self, write: LearningWrite) -> None:
        await self.commit(await self.store.outcome_part(write))


@pytest.fixture(params=["memory", "redis"])
async def learning(request: pytest.FixtureRequest) -> AsyncIterator[Subject]:
    if request.param == "memory":

        async def alone(part: TransactionPart) -> None:
            await part.apply_alone()

        yield Subject(InMemoryLearningStore(), alone)
        return
    settings: Settings = request.getfixturevalue("settings")
    redis = create_redis(settings.redis.url, 4)
    prefix = f"lc{uuid.uuid4().hex[:8]}"

    async def in_multi(part: TransactionPart) -> None:
        # As the memory store commits it: queued beside the credits, one MULTI/EXEC.
        tx = await AgentTransactions.open(redis)
        part.queue(tx)
        await tx.execute()

    try:
        yield Subject(RedisLearningStore(redis, prefix), in_multi)
    finally:
        await _drop(redis, prefix)
        await redis.aclose()


async def _drop(redis: Redis, prefix: str) -> None:
    keys = [key async for key in redis.scan_iter(match=f"{prefix}:*", count=500)]
    if keys:
        await redis.delete(*keys)


def edge(
    cause: str, effect: str, weight: float = 0.8, evidence: int = 1, block: int = 3
) -> CausalEdge:
    return CausalEdge(cause, effect, weight, evidence, block)


# --- what runs recalled --------------------------------------------------------------


async def test_a_runs_recalls_gather_and_the_first_values_win(learning: Subject) -> None:
    store = learning.store
    assert await store.run_recalls(A, "r1") == {}
    await store.record_recalls(A, "r1", {"m1": {"relevance": 0.9, "rank": 0}})
    await store.record_recalls(
        A, "r1", {"m1": {"relevance": 0.1, "rank": 4}, "m2": {"quality": 0.25, "rank": 1}}
    )
    assert await store.run_recalls(A, "r1") == {
        "m1": {"relevance": 0.9, "rank": 0.0},  # the first recall's values
        "m2": {"quality": 0.25, "rank": 1.0},
    }
    # other runs and agents apart; no run or nothing recalled: nothing kept
    await store.record_recalls(A, "r2", {"m9": {"relevance": 0.5}})
    await store.record_recalls(B, "r1", {"m1": {"relevance": 0.2}})
    await store.record_recalls(A, "", {"m3": {"relevance": 0.5}})
    await store.record_recalls(A, "r3", {})
    assert await store.run_recalls(A, "r2") == {"m9": {"relevance": 0.5}}
    assert await store.run_recalls(B, "r1") == {"m1": {"relevance": 0.2}}
    assert await store.run_recalls(A, "") == {}
    assert await store.run_recalls(A, "r3") == {}
    assert (await store.run_recalls(A, "r1"))["m1"]["relevance"] == 0.9


async def test_recalls_read_back_are_copies(learning: Subject) -> None:
    await learning.store.record_recalls(A, "r1", {"m1": {"relevance": 0.9}})
    read = await learning.store.run_recalls(A, "r1")
    read["m1"]["relevance"] = 0.0
    assert (await learning.store.run_recalls(A, "r1"))["m1"]["relevance"] == 0.9


# --- an outcome's part ---------------------------------------------------------------


async def test_an_outcome_writes_its_edges_weights_and_end_and_drops_its_recalls(
    learning: Subject,
) -> None:
    store = learning.store
    assert await store.learned_weights(A) is None
    assert await store.ended_runs(A, ["r1"]) == {}
    assert await store.all_edges(A) == []
    await store.record_recalls(A, "r1", {"m1": {"relevance": 0.9}})
    await store.record_recalls(A, "r2", {"m2": {"relevance": 0.4}})
    weights = initial_weights(DEFAULT_RERANK_WEIGHTS)
    weights = LearnedWeights(weights.weights, 3)
    ended = EndedRun("r1", "out-1", 0.9, 1_790_000_000_000, 12)
    edges = (edge("a1", "o1", 0.8), edge("a1", "o2", -0.123456789, 2, 5), edge("a2", "o1"))
    await learning.write(LearningWrite(A, "r1", edges, weights, ended))

    assert await store.learned_weights(A) == weights
    assert await store.ended_runs(A, ["r1", "r2", "r1"]) == {"r1": ended}
    assert await store.run_recalls(A, "r1") == {}  # learned from: dropped
    assert await store.run_recalls(A, "r2") == {"m2": {"relevance": 0.4}}
    assert await store.all_edges(A) == sorted(edges, key=lambda e: (e.cause, e.effect))
    # agent B has none of it
    assert await store.learned_weights(B) is None
    assert await store.ended_runs(B, ["r1"]) == {}
    assert await store.all_edges(B) == []


async def test_edges_by_pair_and_by_node(learning: Subject) -> None:
    store = learning.store
    edges = (edge("a1", "o1"), edge("a1", "o2", 0.5), edge("a2", "o1", -1.0), edge("o1", "x"))
    await learning.write(LearningWrite(A, edges=edges))
    assert await store.edges(A, [("a1", "o1"), ("a2", "o1"), ("o1", "a1"), ("zz", "o1")]) == {
        ("a1", "o1"): edges[0],
        ("a2", "o1"): edges[2],
    }
    assert await store.edges(A, []) == {}
    # each node's edges, in and out, by (cause, effect); a node without any: []
    assert await store.edges_of(A, ["o1", "a1", "nobody"]) == {
        "o1": [edges[0], edges[2], edges[3]],
        "a1": [edges[0], edges[1]],
        "nobody": [],
    }
    assert await store.edges_of(A, []) == {}
    # a cause's out-edges only, by effect
    assert await store.out_edges(A, ["a1", "o1", "nobody"]) == {
        "a1": [edges[0], edges[1]],
        "o1": [edges[3]],
        "nobody": [],
    }
    assert await store.out_edges(A, []) == {}
    assert await store.edges_of(B, ["a1"]) == {"a1": []}


async def test_a_later_outcome_updates_edges_and_unites_adjacency(learning: Subject) -> None:
    store = learning.store
    await learning.write(LearningWrite(A, edges=(edge("a1", "o1", 0.8), edge("a2", "o1"))))
    # the same pair again (reinforced: absolute new values) and new effects and causes
    await learning.write(
        LearningWrite(A, edges=(edge("a1", "o1", 0.2, 2, 9), edge("a1", "o3"), edge("a3", "o1")))
    )
    await learning.write(LearningWrite(A, edges=(edge("a1", "o2", -1.0),)))
    out = await store.edges_of(A, ["a1"])
    assert [(e.effect, e.weight, e.evidence, e.last_block) for e in out["a1"]] == [
        ("o1", 0.2, 2, 9),
        ("o2", -1.0, 1, 3),
        ("o3", 0.8, 1, 3),
    ]
    into = await store.edges_of(A, ["o1"])
    assert [e.cause for e in into["o1"]] == ["a1", "a2", "a3"]
    assert len(await store.all_edges(A)) == 5


async def test_weights_and_ends_are_replaced_and_a_write_without_them_keeps_them(
    learning: Subject,
) -> None:
    store = learning.store
    first = initial_weights(DEFAULT_RERANK_WEIGHTS)
    second = LearnedWeights(tuple((n, round(w / 2, 9) if n != "relevance" else round(w, 9))
                                  for n, w in first.weights), 2)  # fmt: skip
    await learning.write(LearningWrite(A, weights=first, ended=EndedRun("r1", "o-1", 0.1, 5, 1)))
    await learning.write(LearningWrite(A, weights=second))
    await learning.write(LearningWrite(A, ended=EndedRun("r2", "o-2", 0.7, 6, 2)))
    await learning.write(LearningWrite(A))  # nothing at all
    assert await store.learned_weights(A) == second
    assert await store.ended_runs(A, ["r1", "r2", "r3"]) == {
        "r1": EndedRun("r1", "o-1", 0.1, 5, 1),
        "r2": EndedRun("r2", "o-2", 0.7, 6, 2),
    }
    assert await store.ended_runs(A, []) == {}


async def test_closing_a_run_without_learning_drops_only_its_recalls(learning: Subject) -> None:
    # Learning off: the outcome's part only drops the run's recalls.
    store = learning.store
    await store.record_recalls(A, "r1", {"m1": {"relevance": 0.9}})
    await store.record_recalls(B, "r1", {"m1": {"relevance": 0.9}})
    await learning.write(LearningWrite(A, "r1"))
    assert await store.run_recalls(A, "r1") == {}
    assert await store.run_recalls(B, "r1") == {"m1": {"relevance": 0.9}}
    assert await store.learned_weights(A) is None
    assert await store.ended_runs(A, ["r1"]) == {}
    assert await store.all_edges(A) == []
