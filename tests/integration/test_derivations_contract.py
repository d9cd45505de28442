"""The DerivationStore contract: InMemoryDerivationStore and RedisDerivationStore
behave the same, and so do the writers that record edges beside them (the memory
store's commit, compaction's summaries, the curator's cycles).

Every test runs against both implementations, each beside its own memory,
compaction and curator stores. What the stores keep beyond the protocols (the
record hashes, the nexus index, hyperedges, the curator's bookkeeping) is read
through a small harness: raw Redis keys built by `Keyspace`, or the inspection
methods of the in-memory stores. Redis is the real one (tests/integration/
conftest.py); each test gets its own key prefix and index and removes them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pytest
from redis.asyncio import Redis

from grimoire.agents.handlers.retraction import RetractionHandler
from grimoire.streams.learn.curator.distill import Situation
from grimoire.streams.learn.curator.values import CuratedEntry, EntryStatus
from grimoire.streams.maintenance.compaction import DAY_MS
from grimoire.streams.model.ids import memory_id
from grimoire.streams.model.records import HyperedgeRef, Kind, MemoryRecord
from grimoire.streams.model.records import Role as HyperRole
from grimoire.streams.trust.retraction import (
    DerivationRole,
    Edge,
    RebuiltSummary,
    RetractionOp,
    RetractionPlan,
    Step,
    SummaryShape,
)
from grimoire.streams.write.changes import AggregateFold, WriteBatch
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.compaction_store import RedisCompactionStore
from grimoire.tables.maintenance.curator_store import RedisCuratorStore
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.ports.maintenance import CompactionStore, CuratorStore
from grimoire.tables.ports.memory import MemoryStore
from grimoire.tables.ports.trust import DerivationStore
from grimoire.tables.testing.compaction_store import InMemoryCompactionStore
from grimoire.tables.testing.curator_store import InMemoryCuratorStore
from grimoire.tables.testing.derivations import InMemoryDerivationStore
from grimoire.tables.testing.memory_store import InMemoryMemoryStore
from grimoire.tables.trust.derivations import RedisDerivationStore
from tests.support.builders import memory_candidate, memory_record
from tests.support.contract import BACKENDS, memory_or_deployment
from tests.support.curator import curated_entry, new_entries_cycle
from tests.support.maintenance import compacted_summary
from tests.support.stored import owned_key
from tests.support.vectors import axis_unit

pytestmark = pytest.mark.integration

DIMS = 8
T0 = 1_790_000_000_000 - 1_790_000_000_000 % DAY_MS
NOW = T0 + 30 * DAY_MS
A, B = "agent-a", "agent-b"
SITUATION = Situation("swap", ("entity:eth", "entity:usdc"), "calm", "")
Hash = dict[str, str]


def unit(axis: int) -> npt.NDArray[np.float32]:
    return axis_unit(axis, DIMS)


async def embed(texts: Sequence[str]) -> npt.NDArray[np.float32]:
    return np.stack([unit(len(text)) for text in texts]).astype(np.float32)


class Embedder:
    dims = DIMS
    vector_space = "unit-8:float32"

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return await embed(texts)

    async def embed_query(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return await embed(texts)


def record(agent: str, event: str, text: str, ts: int, **fields: Any) -> MemoryRecord:
    return memory_record(memory_candidate(agent, event, text, ts=ts, **fields), unit(len(text)))


def fold(target: MemoryRecord, group: str, event: str, ts: int) -> AggregateFold:
    seed_candidate = replace(
        record(A, event, target.candidate.text, ts).candidate,
        id=group,
        kind=Kind.AGGREGATE,
        keys=target.candidate.keys,
    )
    seed = MemoryRecord(seed_candidate, canonical=target.canonical, aggregate_of=target.id)
    return AggregateFold(A, group, target.id, seed_candidate.id, ts, seed)


entry = partial(curated_entry, situation=SITUATION, now=NOW)


def _text(value: Any) -> str:
    return text_of(value)


# --- the two implementations behind one harness -------------------------------------------


class Harness:
    memory: MemoryStore
    compaction: CompactionStore
    curator: CuratorStore
    derivations: DerivationStore

    async def doc(self, memory_id: str) -> Hash:
        raise NotImplementedError

    async def nexus(self, agent: str, key: str) -> dict[str, int]:
        raise NotImplementedError

    async def hyperedge(self, agent: str, edge: str) -> dict[str, str]:
        raise NotImplementedError

    async def books(self, agent: str) -> dict[str, Any]:
        raise NotImplementedError

    def handler(self) -> RetractionHandler:
        return RetractionHandler(self.derivations, Embedder(), self.curator)

    async def write(self, *records: MemoryRecord, folds: Sequence[AggregateFold] = ()) -> None:
        await self.memory.commit(WriteBatch(records=tuple(records), folds=tuple(folds)))

    async def curate(self, *entries: CuratedEntry) -> None:
        vectors = {e.memory_id: unit(3).tobytes() for e in entries}
        assert await self.curator.apply(new_entries_cycle(A, NOW, entries, vectors))

    async def compact(self, agent: str = A) -> str:
        return await compacted_summary(self.compaction, embed, agent, NOW)


class MemoryHarness(Harness):
    def __init__(self) -> None:
        self.memory_store = InMemoryMemoryStore(dims=DIMS)
        self.memory = self.memory_store
        self.compaction = InMemoryCompactionStore(self.memory_store, dims=DIMS)
        self.curator_store = InMemoryCuratorStore(self.memory_store)
        self.curator = self.curator_store
        self.derivations = InMemoryDerivationStore(self.memory_store, self.curator_store, dims=DIMS)

    async def doc(self, memory_id: str) -> Hash:
        found = self.memory_store.record(memory_id) or {}
        return {k: _text(v) for k, v in found.items() if k not in ("canonical", "eidolon")}

    async def nexus(self, agent: str, key: str) -> dict[str, int]:
        return await self.memory_store.nexus(agent, key)

    async def hyperedge(self, agent: str, edge: str) -> dict[str, str]:
        return await self.memory_store.hyperedge(agent, edge)

    async def books(self, agent: str) -> dict[str, Any]:
        return {k: orjson.loads(v) for k, v in self.curator_store.bookkeeping(agent).items()}


class RedisHarness(Harness):
    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self.keys = Keyspace(prefix)
        self.memory_store = RedisMemoryStore(redis, prefix, DIMS)
        self.memory = self.memory_store
        self.compaction = RedisCompactionStore(redis, prefix, dims=DIMS)
        self.curator = RedisCuratorStore(redis, prefix)
        self.derivations = RedisDerivationStore(redis, prefix, dims=DIMS)

    async def doc(self, memory_id: str) -> Hash:
        raw = await self.redis.hgetall(
            await owned_key(self.redis, self.keys.memory, (A, B), memory_id)
        )
        return {
            _text(k): _text(v) for k, v in raw.items() if _text(k) not in ("canonical", "eidolon")
        }

    async def nexus(self, agent: str, key: str) -> dict[str, int]:
        members = await self.redis.zrange(self.keys.nexus(agent, key), 0, -1, withscores=True)
        return {_text(member): int(score) for member, score in members}

    async def hyperedge(self, agent: str, edge: str) -> dict[str, str]:
        raw = await self.redis.hgetall(self.keys.hyperedge(agent, edge))
        return {_text(k): _text(v) for k, v in raw.items()}

    async def books(self, agent: str) -> dict[str, Any]:
        raw = await self.redis.hgetall(self.keys.curator_entries(agent))
        return {_text(k): orjson.loads(v) for k, v in raw.items()}


@pytest.fixture(params=BACKENDS)
async def h(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    subject = memory_or_deployment(request, MemoryHarness, RedisHarness, tag="dc", dims=DIMS)
    async with subject as harness:
        yield harness


# --- the edges each writer records ---------------------------------------------------------


async def test_the_write_path_records_records_folds_and_origins(h: Harness) -> None:
    target = record(A, "ev-1", "rpc timed out", NOW, keys=("tool:rpc",))
    other = record(B, "ev-1", "rpc timed out", NOW)
    group = memory_id(A, "aggregate:" + target.id, 0, NOW)
    await h.write(target, other, folds=[fold(target, group, "ev-2", NOW + 1)])
    await h.write(folds=[fold(target, group, "ev-3", NOW + 2)])
    assert await h.derivations.derived_from(A, ["ev-1", "ev-2"]) == sorted(
        [Edge(group, "ev-2", DerivationRole.FOLD), Edge(target.id, "ev-1", DerivationRole.RECORD)]
    )
    assert await h.derivations.sources_of(A, [group]) == sorted(
        [
            Edge(group, "ev-2", DerivationRole.FOLD),
            Edge(group, "ev-3", DerivationRole.FOLD),
            Edge(group, target.id, DerivationRole.ORIGIN),  # written twice, counted once
        ]
    )
    assert await h.derivations.derived_from(B, ["ev-1"]) == [
        Edge(other.id, "ev-1", DerivationRole.RECORD)
    ]
    assert await h.derivations.derived_from(B, ["ev-2"]) == []


async def test_share_roles_add_up_and_the_others_are_set(h: Harness) -> None:
    edges = [Edge("m", "ev", DerivationRole.FOLD), Edge("m", "ev", DerivationRole.REINFORCE, 2)]
    edges += [Edge("m", "ev", DerivationRole.RECORD), Edge("s", "m", DerivationRole.COMPACTED)]
    await h.derivations.add(A, edges)
    await h.derivations.add(A, edges)
    assert await h.derivations.sources_of(A, ["m", "s"]) == [
        Edge("m", "ev", DerivationRole.FOLD, 2),
        Edge("m", "ev", DerivationRole.RECORD, 1),
        Edge("m", "ev", DerivationRole.REINFORCE, 4),
        Edge("s", "m", DerivationRole.COMPACTED, 1),
    ]
    assert await h.derivations.derived_from(A, ["m"]) == [Edge("s", "m", DerivationRole.COMPACTED)]
    assert await h.derivations.sources_of(B, ["m"]) == []


async def test_compaction_and_the_curator_record_their_sources(h: Harness) -> None:
    sources = [
        record(A, f"c-{n}", f"worker {n} ran out of memory", T0 + n, keys=("err:oom",))
        for n in (1, 2, 3)
    ]
    await h.write(*sources)
    summary = await h.compact()
    assert await h.derivations.sources_of(A, [summary]) == sorted(
        Edge(summary, s.id, DerivationRole.COMPACTED) for s in sources
    )
    assert await h.derivations.derived_from(A, [sources[0].id]) == [
        Edge(summary, sources[0].id, DerivationRole.COMPACTED)
    ]
    await h.curate(entry("insight-1", Kind.INSIGHT, EntryStatus.ACTIVE, ("e1", "e2")))
    assert await h.derivations.sources_of(A, ["insight-1"]) == [
        Edge("insight-1", "e1", DerivationRole.EVIDENCE),
        Edge("insight-1", "e2", DerivationRole.EVIDENCE),
    ]


# --- reads ----------------------------------------------------------------------------------


async def test_nodes_are_the_agents_own_memories_as_the_planner_reads_them(h: Harness) -> None:
    target = record(A, "ev-1", "rpc timed out", T0, keys=("tool:rpc",))
    group = memory_id(A, "aggregate:" + target.id, 0, T0)
    others = [record(A, f"c-{n}", f"worker {n} oom", T0 + n, keys=("err:oom",)) for n in (1, 2, 3)]
    folded = fold(target, group, "ev-2", T0 + 5)
    await h.write(target, *others, record(B, "ev-9", "not mine", T0), folds=[folded])
    summary = await h.compact()
    await h.curate(entry("insight-1", Kind.INSIGHT, EntryStatus.ACTIVE, (target.id,)))
    theirs = memory_id(B, "ev-9", 0, T0)
    nodes = await h.derivations.nodes(A, [target.id, group, summary, "insight-1", theirs, "x"])
    assert sorted(nodes) == sorted([target.id, group, summary, "insight-1"])
    assert (nodes[group].kind, nodes[group].count) == ("aggregate", 2)
    content = nodes[target.id].content
    assert content is not None and (content.text, content.keys) == ("rpc timed out", ("tool:rpc",))
    assert nodes[summary].summary == SummaryShape("err:oom", T0, 1)
    insight = nodes["insight-1"].entry
    assert insight is not None
    assert (insight.status, insight.confidence, insight.source_ids) == (
        EntryStatus.ACTIVE,
        0.8,
        (target.id,),
    )
    assert not any(node.retracted for node in nodes.values())


# --- the writes -----------------------------------------------------------------------------


async def test_a_retraction_writes_every_step(h: Harness) -> None:
    """Through the handler: a memory with a hyperedge retracted, an aggregate share
    taken, a summary rebuilt, an insight demoted, the index's edges dropped."""
    turn = HyperedgeRef("turn-1", HyperRole.TRIGGER)
    gone = record(A, "ev-1", "rpc timed out", T0, keys=("err:oom", "tool:rpc"), hyperedge=turn)
    kept = [record(A, f"c-{n}", f"worker {n} oom", T0 + n, keys=("err:oom",)) for n in (2, 3)]
    answer = HyperedgeRef("turn-1", HyperRole.OUTCOME)
    reply = record(A, "ev-4", "the reply", T0 + 9, hyperedge=answer)
    group = memory_id(A, "aggregate:" + reply.id, 0, NOW)
    await h.write(gone, *kept, reply, folds=[fold(reply, group, "ev-1", NOW)])
    summary = await h.compact()
    await h.curate(entry("insight-1", Kind.INSIGHT, EntryStatus.ACTIVE, (gone.id, kept[0].id)))
    report = await h.handler().retract(A, "ev-1", at_ms=NOW)
    # The memory first, then what derives from it; ties by id (time-ordered ids).
    # ev-1's fold created the aggregate (its seed): the aggregate is rebuilt on
    # its origin's text.
    assert [(s.op, s.memory_id) for s in report.steps] == [
        (RetractionOp.RETRACT, gone.id),
        (RetractionOp.REBUILD, summary),
        (RetractionOp.REDUCE, group),
        (RetractionOp.REBUILD, group),
        (RetractionOp.DEMOTE, "insight-1"),
    ]

    doc = await h.doc(gone.id)
    assert (doc["retracted"], doc["deleted"], doc["retracted_at"]) == ("1", "1", str(NOW))
    assert "replaced_by_summary_id" not in doc
    assert gone.id not in await h.nexus(A, "tool:rpc")
    assert gone.id not in await h.nexus(A, "err:oom")
    assert await h.hyperedge(A, "turn-1") == {reply.id: "outcome"}
    assert (await h.doc(group))["count"] == "1"
    rebuilt = await h.doc(summary)
    assert rebuilt["text"].startswith("Summary of 2 memories on err:oom")
    assert rebuilt["source_ids"] == "|".join(sorted(k.id for k in kept))
    assert rebuilt["nexus_keys"] == "err:oom"
    assert (await h.nexus(A, "err:oom"))[summary] == T0 + 3
    insight = await h.doc("insight-1")
    assert float(insight["confidence"]) == pytest.approx(0.4)
    assert (await h.books(A))["insight-1"]["status"] == "demoted"
    assert await h.derivations.derived_from(A, ["ev-1", gone.id]) == []


async def test_a_retraction_without_its_summary_vector_writes_nothing(h: Harness) -> None:
    target = record(A, "ev-1", "rpc timed out", T0, keys=("tool:rpc",))
    await h.write(target)
    before = await h.doc(target.id)
    summary = RebuiltSummary("text", T0, (), (), (), ())
    plan = RetractionPlan(
        "ev-1",
        (
            Step(RetractionOp.RETRACT, target.id, "episode"),
            Step(RetractionOp.REBUILD, "s", "summary", summary=summary),
        ),
        (Edge(target.id, "ev-1", DerivationRole.RECORD),),
    )
    with pytest.raises(ValueError, match="lacks vectors"):
        await h.derivations.apply(A, plan, {}, at_ms=NOW)
    assert await h.doc(target.id) == before
    assert await h.derivations.derived_from(A, ["ev-1"]) == [
        Edge(target.id, "ev-1", DerivationRole.RECORD)
    ]


async def test_a_retraction_never_writes_another_agents_memory(h: Harness) -> None:
    theirs = record(B, "ev-1", "rpc timed out", T0, keys=("tool:rpc",))
    await h.write(theirs)
    plan = RetractionPlan("ev-1", (Step(RetractionOp.RETRACT, theirs.id, "episode"),), ())
    await h.derivations.apply(A, plan, {}, at_ms=NOW)
    assert (await h.doc(theirs.id))["deleted"] == "0"
    assert theirs.id in await h.nexus(B, "tool:rpc")


async def test_a_pin_is_the_agents_own(h: Harness) -> None:
    mine = record(A, "ev-1", "rpc timed out", T0)
    await h.write(mine)
    assert await h.derivations.set_pinned(A, mine.id, True)
    assert (await h.doc(mine.id))["pinned"] == "1"
    assert await h.derivations.set_pinned(A, mine.id, False)
    assert (await h.doc(mine.id))["pinned"] == "0"
    assert not await h.derivations.set_pinned(B, mine.id, True)
    assert not await h.derivations.set_pinned(A, "missing", True)
    assert (await h.doc(mine.id))["pinned"] == "0"
