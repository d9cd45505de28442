"""The MemoryStore contract: InMemoryMemoryStore and RedisMemoryStore behave the same.

Every test runs against both implementations with WriteBatches built by hand
(8-dimensional unit vectors, so cosines are known exactly). Redis is the real
one, started by the project's services manager (tests/integration/conftest.py);
each test gets its own key prefix and index and removes them afterwards.

What the stores keep beyond the Protocol (record hashes, nexus scores, hyperedges,
stats, metrics) is read through a small harness: `.graph`/`.state` and raw hashes
for Redis, the inspection methods of InMemoryMemoryStore for the other.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, replace
from typing import Any

import numpy as np
import orjson
import pytest
from redis.asyncio import Redis

from grimoire.infra.settings import Settings
from grimoire.streams.journal.usage import UsageChanges, UsageView, answered_twice
from grimoire.streams.learn.outcomes import Outcome, OutcomeKind
from grimoire.streams.model.eidolon import state_key
from grimoire.streams.model.field_state import Affect, FieldState
from grimoire.streams.model.ids import memory_id
from grimoire.streams.model.records import HyperedgeRef, Kind, MemoryRecord, Role
from grimoire.streams.recall.options import ProvenanceFilters
from grimoire.streams.recall.ports import Anchor
from grimoire.streams.write.admission import NearMemory
from grimoire.streams.write.changes import (
    AggregateFold,
    Decision,
    Reinforcement,
    StateVector,
    StatsDelta,
    WriteBatch,
)
from grimoire.streams.write.plan import StoredNeighbour, aggregate_id, neighbour_similarity
from grimoire.streams.write.view import IngestView
from grimoire.tables.codec.memory_hash import StoredMemory, hash_fields
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.memory.wipe import wipe_memory_state
from grimoire.tables.ports.memory import MemoryStore
from grimoire.tables.redis_client import create_redis
from grimoire.tables.testing.memory_store import InMemoryMemoryStore
from tests.support.builders import memory_candidate, memory_record
from tests.support.usage import apply_usage_entry
from tests.support.vectors import Vector, unit

pytestmark = pytest.mark.integration

DIMS = 8  # the dims of tests.support.vectors.unit
T0 = 1_790_000_000_000
A, B, C = "agent-a", "agent-b", "agent-c"
VECTOR_FIELDS = ("canonical", "eidolon")
Hash = dict[str, str | bytes]

E1, E2, E3 = unit(1.0), unit(0.0, 1.0), unit(0.0, 0.0, 1.0)
DIAGONAL = unit(1.0, 1.0)  # cosine 1/sqrt(2) with E1 and with E2
SQRT_HALF = 1 / math.sqrt(2)


def rec(
    agent: str,
    event: str,
    text: str,
    vector: Vector,
    *,
    ts: int = T0,
    keys: tuple[str, ...] = (),
    edge: HyperedgeRef | None = None,
    quarantined: bool = False,
    kind: Kind = Kind.EPISODE,
    confidence: float = 0.6,
    eidolon: Vector | None = None,
    no_eidolon: bool = False,
) -> MemoryRecord:
    candidate = memory_candidate(
        agent,
        event,
        text,
        ts=ts,
        kind=kind,
        session_id="s-1",
        tick=7,
        tags=("ops/disk",),
        importance=0.3,
        keys=keys,
        affect=Affect(pleasure=0.5, drives=(("SEEKING", 0.75),)),
        hyperedge=edge,
    )
    return memory_record(
        candidate,
        vector,
        eidolon=b"" if no_eidolon else eidolon,
        confidence=confidence,
        quality=0.4,
        quarantined=quarantined,
        admission='{"action":"admit"}',
    )


def stored(record: MemoryRecord) -> StoredMemory:
    cand = record.candidate
    return StoredMemory(
        id=cand.id,
        agent_id=cand.agent_id,
        kind=cand.kind.value,
        layer=cand.layer.value,
        text=cand.text,
        ts_ms=cand.ts_ms,
        source_event_id=cand.provenance.source_event_id,
        normalized_hash=cand.normalized_hash,
    )


def as_read_back(fields: dict[str, Any]) -> Hash:
    """Hash fields as HGETALL returns them: numbers in repr form, vectors as bytes."""
    out: Hash = {}
    for name, value in fields.items():
        if name in VECTOR_FIELDS:
            out[name] = bytes(value)
        elif isinstance(value, bytes):
            out[name] = value.decode()
        elif isinstance(value, str):
            out[name] = value
        else:
            out[name] = repr(value)
    return out


def fold(
    agent: str, target: MemoryRecord, member: MemoryRecord, *, group: str | None = None
) -> AggregateFold:
    """What the planner emits when `member` repeats `target`."""
    aggregate = group or aggregate_id(agent, target.id)
    seed = replace(
        member,
        candidate=replace(member.candidate, id=aggregate, kind=Kind.AGGREGATE, hyperedge=None),
        aggregate_of=target.id,
    )
    return AggregateFold(agent, aggregate, target.id, member.id, member.candidate.ts_ms, seed)


# --- the two implementations behind one harness -------------------------------------------


class Harness:
    name: str
    store: MemoryStore

    async def record(self, memory_id: str) -> Hash | None:
        raise NotImplementedError

    async def nexus(self, agent: str, key: str) -> dict[str, int]:
        raise NotImplementedError

    async def hyperedge(self, agent: str, edge: str) -> dict[str, str]:
        raise NotImplementedError

    async def decisions(self, agent: str) -> dict[str, str]:
        raise NotImplementedError

    async def stats(self, agent: str) -> dict[str, float]:
        raise NotImplementedError

    async def metrics(self) -> dict[str, float]:
        raise NotImplementedError

    async def usage(self, memory_id: str) -> dict[str, str]:
        raise NotImplementedError


class MemoryHarness(Harness):
    name = "memory"

    def __init__(self) -> None:
        self.memory = InMemoryMemoryStore()
        self.store = self.memory

    async def record(self, memory_id: str) -> Hash | None:
        found = self.memory.record(memory_id)
        if found is None:
            return None
        return {k: v if k in VECTOR_FIELDS else _text(v) for k, v in found.items()}

    async def nexus(self, agent: str, key: str) -> dict[str, int]:
        return await self.memory.nexus(agent, key)

    async def hyperedge(self, agent: str, edge: str) -> dict[str, str]:
        return await self.memory.hyperedge(agent, edge)

    async def decisions(self, agent: str) -> dict[str, str]:
        return await self.memory.decisions(agent)

    async def stats(self, agent: str) -> dict[str, float]:
        return await self.memory.stats(agent)

    async def metrics(self) -> dict[str, float]:
        return await self.memory.metrics()

    async def usage(self, memory_id: str) -> dict[str, str]:
        return {k: _text(v) for k, v in self.memory.usage(memory_id).items()}


class RedisHarness(Harness):
    name = "redis"

    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self.redis_store = RedisMemoryStore(redis, prefix=prefix, dims=DIMS)
        self.store = self.redis_store

    async def _owned(self, build: Any, memory_id: str) -> str:
        """The memory's key under whichever of the test agents holds it (keys carry
        the agent since the store's format 2; the contract reads by memory id)."""
        candidates = [build(agent, memory_id) for agent in (A, B, C)]
        for key in candidates:
            if await self.redis.exists(key):
                return key
        return candidates[0]

    async def record(self, memory_id: str) -> Hash | None:
        raw = await self.redis.hgetall(await self._owned(self.redis_store.key, memory_id))
        if not raw:
            return None
        out: Hash = {}
        for key, value in raw.items():
            name = _text(key)
            out[name] = value if name in VECTOR_FIELDS else _text(value)
        return out

    async def nexus(self, agent: str, key: str) -> dict[str, int]:
        members = await self.redis.zrange(
            self.redis_store.graph.keys.nexus(agent, key), 0, -1, withscores=True
        )
        return {_text(member): int(score) for member, score in members}

    async def hyperedge(self, agent: str, edge: str) -> dict[str, str]:
        return await self.redis_store.graph.hyperedge(agent, edge)

    async def usage(self, memory_id: str) -> dict[str, str]:
        raw = await self.redis.hgetall(await self._owned(Keyspace(self.prefix).usage, memory_id))
        return {_text(k): _text(v) for k, v in raw.items()}

    async def decisions(self, agent: str) -> dict[str, str]:
        raw = await self.redis.hgetall(self.redis_store.state.decided_key(agent))
        return {_text(k): _text(v) for k, v in raw.items()}

    async def stats(self, agent: str) -> dict[str, float]:
        return await self.redis_store.state.stats(agent)

    async def metrics(self) -> dict[str, float]:
        raw = await self.redis.hgetall(Keyspace(self.prefix).metrics)
        return {_text(k): float(_text(v)) for k, v in raw.items()}

    async def close(self) -> None:
        try:
            # Every master's index on a cluster, then every key of the prefix.
            await wipe_memory_state(self.redis, self.prefix)
        finally:
            await self.redis_store.routing.aclose()
            await self.redis.aclose()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def open_redis(settings: Settings) -> RedisHarness:
    harness = RedisHarness(create_redis(settings.redis.url, 8), f"ct{uuid.uuid4().hex[:10]}")
    await harness.store.ensure_schema()
    return harness


@pytest.fixture(params=["memory", "redis"])
async def h(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    if request.param == "memory":
        harness = MemoryHarness()
        await harness.store.ensure_schema()
        yield harness
        return
    redis_harness = await open_redis(request.getfixturevalue("settings"))
    try:
        yield redis_harness
    finally:
        await redis_harness.close()


async def commit(h: Harness, *batches: WriteBatch) -> None:
    for batch in batches:
        await h.store.commit(batch)


# --- records, nexus, hyperedges --------------------------------------------------------

TURN = "turn:t-1"
R1 = rec(
    A,
    "e1",
    "disk full on node seven",
    E1,
    keys=("tag:ops/disk", "err:timeout"),
    edge=HyperedgeRef(TURN, Role.TRIGGER),
)
R2 = rec(
    A,
    "e2",
    "cpu load high on scheduler",
    E2,
    ts=T0 + 10,
    keys=("tag:ops/disk",),
    edge=HyperedgeRef(TURN, Role.OUTCOME),
)
R3 = rec(
    B,
    "e3",
    "disk full on node seven",
    E1,
    ts=T0 + 20,
    keys=("tag:ops/disk",),
    edge=HyperedgeRef(TURN, Role.ACTION),
)
RECORDS = WriteBatch(records=(R1, R2, R3))


async def _graph_snapshot(h: Harness) -> dict[str, Any]:
    return {
        "a_disk": await h.nexus(A, "tag:ops/disk"),
        "a_timeout": await h.nexus(A, "err:timeout"),
        "b_disk": await h.nexus(B, "tag:ops/disk"),
        "a_edge": await h.hyperedge(A, TURN),
        "b_edge": await h.hyperedge(B, TURN),
        "counts": (await h.store.count(A), await h.store.count(B), await h.store.count(C)),
        "records": [await h.record(r.id) for r in (R1, R2, R3)],
    }


async def test_records_are_stored_as_their_full_hash(h: Harness) -> None:
    await commit(h, RECORDS)
    assert await h.record(R1.id) == as_read_back(hash_fields(R1, 0))
    no_lane = rec(A, "e9", "no eidolon here", E3, no_eidolon=True)
    await commit(h, WriteBatch(records=(no_lane,)))
    written = await h.record(no_lane.id)
    assert written is not None
    assert "eidolon" not in written
    assert written["affect"] == orjson.dumps(asdict(no_lane.candidate.affect)).decode()


async def test_records_nexus_and_hyperedges_are_per_agent(h: Harness) -> None:
    await commit(h, RECORDS)
    snap = await _graph_snapshot(h)
    assert snap["a_disk"] == {R1.id: T0, R2.id: T0 + 10}
    assert snap["a_timeout"] == {R1.id: T0}
    assert snap["b_disk"] == {R3.id: T0 + 20}
    assert snap["a_edge"] == {R1.id: "trigger", R2.id: "outcome"}
    assert snap["b_edge"] == {R3.id: "action"}
    assert snap["counts"] == (2, 1, 0)
    assert await h.store.get_many(A, [R1.id, R3.id, "missing", R2.id]) == [
        stored(R1),
        None,  # B's memory, asked for by A
        None,
        stored(R2),
    ]


async def test_committing_the_same_records_twice_adds_nothing(h: Harness) -> None:
    await commit(h, RECORDS)
    once = await _graph_snapshot(h)
    await commit(h, RECORDS)
    assert await _graph_snapshot(h) == once


async def test_a_record_write_overwrites_its_fields(h: Harness) -> None:
    await commit(h, RECORDS)
    rewritten = replace(R1, candidate=replace(R1.candidate, text="disk full again"))
    await commit(h, WriteBatch(records=(rewritten,)))
    written = await h.record(R1.id)
    assert written is not None and written["text"] == "disk full again"
    assert await h.store.count(A) == 2


# --- nearest, knn, full text -----------------------------------------------------------

QUERY = unit(1.0, 0.1)  # cosine 1/sqrt(1.01) with E1, 0.1/sqrt(1.01) with E2


async def test_nearest_is_the_closest_live_memory_of_the_agent(h: Harness) -> None:
    hidden = rec(A, "q", "the bridge is not safe", QUERY, quarantined=True)
    theirs = rec(B, "b", "same vector, other tenant", QUERY)
    insight = rec(B, "i", "an insight of agent b", E2, kind=Kind.INSIGHT, confidence=0.5)
    await commit(h, RECORDS, WriteBatch(records=(hidden, theirs, insight)))

    found = await h.store.nearest(
        [(A, QUERY.tobytes()), (B, E2.tobytes()), (C, QUERY.tobytes()), (A, E2.tobytes())]
    )
    assert len(found) == 4
    first, second, none, fourth = found
    assert none is None
    assert first is not None and second is not None and fourth is not None
    assert first.neighbour.memory_id == R1.id  # the quarantined exact match is skipped
    assert first.neighbour.similarity == pytest.approx(1 / math.sqrt(1.01), abs=1e-6)
    assert (first.neighbour.confidence, first.neighbour.text, first.kind) == (
        0.6,
        R1.candidate.text,
        "episode",
    )
    assert second.neighbour.similarity == pytest.approx(1.0, abs=1e-6)
    assert second == StoredNeighbour(
        NearMemory(insight.id, second.neighbour.similarity, 0.5, "an insight of agent b"),
        "insight",
    )
    assert fourth.neighbour.memory_id == R2.id
    assert await h.store.nearest([]) == []


async def test_a_stored_neighbours_similarity_is_the_in_batch_one_bit_for_bit(h: Harness) -> None:
    # Admission finds a neighbour in the store or earlier in the same batch,
    # depending on where the batch boundaries fell; both must read the same value.
    rng = np.random.default_rng(7)
    for index in range(5):
        stored, query = (unit(*rng.normal(size=DIMS)) for _ in range(2))
        written = rec(A, f"n{index}", f"neighbour {index}", stored)
        await commit(h, WriteBatch(records=(written,)))
        (found,) = await h.store.nearest([(A, query.tobytes())])
        assert found is not None
        nearest = await h.record(found.neighbour.memory_id)
        assert nearest is not None
        vector = np.frombuffer(nearest["canonical"], dtype=np.float32)
        assert found.neighbour.similarity == neighbour_similarity(query, vector)


async def test_knn_searches_either_lane_within_the_tenant(h: Harness) -> None:
    x = rec(A, "x", "canonical east eidolon north", E1, eidolon=E2)
    y = rec(A, "y", "canonical north eidolon east", E2, eidolon=E1)
    z = rec(A, "z", "diagonal both ways", DIAGONAL)
    hidden = rec(A, "h", "quarantined east", E1, quarantined=True)
    bare = rec(A, "n", "no eidolon lane", E3, no_eidolon=True)
    theirs = rec(B, "t", "agent b east", E1)
    await commit(h, WriteBatch(records=(x, y, z, hidden, bare, theirs)))

    canonical = await h.store.knn(A, E1.tolist(), 2)
    assert [(hit.memory.id, round(hit.score, 5)) for hit in canonical] == [
        (x.id, 1.0),
        (z.id, round(SQRT_HALF, 5)),
    ]
    assert canonical[0].memory == stored(x)
    eidolon = await h.store.knn(A, E1.tolist(), 10, lane="eidolon")
    assert [(hit.memory.id, round(hit.score, 5)) for hit in eidolon] == [
        (y.id, 1.0),
        (z.id, round(SQRT_HALF, 5)),
        (x.id, 0.0),
    ]  # neither the quarantined record nor the one without an eidolon
    everything = await h.store.knn(A, E3.tolist(), 10)
    assert {hit.memory.id for hit in everything} == {x.id, y.id, z.id, bare.id}
    assert [hit.memory.id for hit in await h.store.knn(B, E1.tolist(), 10)] == [theirs.id]
    assert await h.store.knn(C, E1.tolist(), 10) == []


async def test_full_text_matches_any_term_of_live_memories(h: Harness) -> None:
    both = rec(A, "f1", "disk full on node seven", E1)
    one = rec(A, "f2", "disk quota exceeded", E2, ts=T0 + 1)
    hidden = rec(A, "f3", "disk failure imminent", E3, quarantined=True)
    theirs = rec(B, "f4", "disk full on node seven", E1)
    await commit(h, WriteBatch(records=(both, one, hidden, theirs)))

    hits = await h.store.full_text(A, ["disk", "full"], 10)
    assert [hit.memory.id for hit in hits] == [both.id, one.id]  # two terms rank above one
    assert hits[0].memory == stored(both)
    assert hits[0].score > hits[1].score > 0
    # One term each: BM25 and the in-memory term count may order these two differently.
    assert len(await h.store.full_text(A, ["disk"], 1)) == 1
    assert await h.store.full_text(A, ["imminent"], 10) == []  # quarantined
    assert [hit.memory.id for hit in await h.store.full_text(B, ["disk"], 10)] == [theirs.id]
    assert await h.store.full_text(A, [], 10) == []
    assert await h.store.full_text(C, ["disk"], 10) == []


async def test_the_recall_source_scores_given_memories_and_finds_their_neighbours(
    h: Harness,
) -> None:
    session = "session:s-1"
    turns = [
        rec(A, f"s{n}", text, vector, ts=T0 + 1_000 * n, keys=(session,))
        for n, (text, vector) in enumerate(
            [
                ("disk full on node seven", E1),
                ("cleared the logs on node seven", E2),
                ("disk usage back to normal", E3),
                ("weather report", E1),
            ]
        )
    ]
    theirs = rec(B, "s9", "disk full on node seven", E1, ts=T0 + 1_500, keys=(session,))
    await commit(h, WriteBatch(records=(*turns, theirs)))
    source = h.store.recall_source(A)
    ids = [t.id for t in turns]

    scores = await source.lexical(["disk", "full"], [*ids, theirs.id, "unknown"])
    # only the given ids that hold a term, and only the source's agent's
    assert set(scores) == {ids[0], ids[2]}
    assert scores[ids[0]] > scores[ids[2]] > 0
    lane = {
        hit.memory_id: hit.score
        for hit in await source.full_text(["disk", "full"], 10, ProvenanceFilters())
    }
    assert scores == pytest.approx(lane)  # the lane's own scorer
    assert await source.lexical([], ids) == {}
    assert await source.lexical(["disk"], []) == {}

    near = await source.adjacent(
        [Anchor(t.id, session, t.candidate.ts_ms) for t in (turns[0], turns[1], turns[3])]
    )
    # the previous and next turns in event time; B's turn in between is not A's
    assert near == {ids[0]: (ids[1],), ids[1]: (ids[0], ids[2]), ids[3]: (ids[2],)}
    assert await source.adjacent([Anchor(ids[0], "session:other", T0)]) == {ids[0]: ()}
    assert await source.adjacent([]) == {}


async def test_the_walks_key_reads_agree_and_stay_in_the_tenant(h: Harness) -> None:
    shared = "tag:ops/disk"
    mine = [rec(A, f"k{n}", f"note {n}", E1, ts=T0 + 1_000 * n, keys=(shared,)) for n in range(4)]
    theirs = rec(B, "k9", "their note", E2, ts=T0 + 9_000, keys=(shared,))
    await commit(h, WriteBatch(records=(*mine, theirs)))
    source = h.store.recall_source(A)
    keys = [shared, "tag:none"]
    newest_first = [r.id for r in reversed(mine)]

    degrees, members = await source.neighbourhood(keys, 3)
    assert degrees == {shared: 4, "tag:none": 0} == await source.degrees(keys)
    assert members == {shared: newest_first[:3], "tag:none": []}
    assert members == await source.newest(keys, 3)
    # the members' nodes came with them: the walk's next read needs no lookup
    assert set(await source.nodes(newest_first[:3])) == set(newest_first[:3])

    degrees, members = await source.neighbourhood(keys, 0)
    assert degrees == {shared: 4, "tag:none": 0}
    assert members == {shared: [], "tag:none": []}
    assert await source.neighbourhood([], 5) == ({}, {})


async def test_the_walk_reads_each_node_as_its_record_says(h: Harness) -> None:
    hidden = rec(A, "q", "the bridge is not safe", E1, quarantined=True)
    group = aggregate_id(A, TARGET.id)
    folded = fold(A, TARGET, repeat("r1", T0 + 5))
    await commit(h, RECORDS, WriteBatch(records=(hidden, TARGET), folds=(folded,)))
    ids = [R1.id, R2.id, R3.id, hidden.id, TARGET.id, group, "unknown"]
    source = h.store.recall_source(A)
    nodes = await source.nodes(ids)
    records = await h.store.recall_source(A).records(ids)
    assert set(nodes) == {R1.id, R2.id, hidden.id, TARGET.id, group}  # R3 is B's
    assert nodes == {i: r.node() for i, r in records.items()}
    assert nodes[hidden.id].deleted and not nodes[R1.id].deleted
    assert set(nodes[R1.id].keys) == {"err:timeout", "tag:ops/disk"}
    if isinstance(h, RedisHarness):
        # A store written before the node table existed reads the memory hashes.
        await h.redis.delete(Keyspace(h.prefix).nodes(A))
        assert await h.store.recall_source(A).nodes(ids) == nodes


async def test_quarantined_memories_are_counted_and_fetchable_but_never_searched(
    h: Harness,
) -> None:
    hidden = rec(A, "q", "the bridge is not safe", E1, quarantined=True)
    await commit(h, WriteBatch(records=(hidden,)))
    assert await h.store.count(A) == 1
    assert await h.store.get_many(A, [hidden.id]) == [stored(hidden)]
    assert await h.store.nearest([(A, E1.tobytes())]) == [None]
    assert await h.store.knn(A, E1.tolist(), 5) == []
    assert await h.store.knn(A, E1.tolist(), 5, lane="eidolon") == []
    assert await h.store.full_text(A, ["bridge"], 5) == []


# --- aggregates and reinforcement --------------------------------------------------------

TARGET = rec(A, "orig", "heartbeat pool depth stable", E1, keys=("tag:ops/heartbeat",))
REPEAT = unit(1.0, 0.05)  # the repeats sit a hair away from the target


def repeat(event: str, ts: int, text: str = "heartbeat pool depth stable") -> MemoryRecord:
    return rec(A, event, text, REPEAT, ts=ts, keys=("tag:ops/heartbeat",))


async def test_folds_create_the_aggregate_once_then_count(h: Harness) -> None:
    group = aggregate_id(A, TARGET.id)
    first, second = repeat("r1", T0 + 100), repeat("r2", T0 + 50, "a different seed text")
    await commit(h, WriteBatch(records=(TARGET,), folds=(fold(A, TARGET, first),)))
    created = await h.record(group)
    assert created is not None
    expected = as_read_back(hash_fields(fold(A, TARGET, first).seed, 0))
    expected.update({"count": "2", "last_seen": str(T0 + 100)})  # 1 for the original + 1
    assert created == expected
    assert (await h.nexus(A, "tag:ops/heartbeat")) == {TARGET.id: T0, group: T0 + 100}

    # a later fold only counts; its older time does not move last_seen back
    await commit(h, WriteBatch(folds=(fold(A, TARGET, second),)))
    counted = await h.record(group)
    assert counted is not None
    assert (counted["count"], counted["last_seen"]) == ("3", str(T0 + 100))
    assert counted["text"] == "heartbeat pool depth stable"  # the first seed stays
    assert counted["aggregate_of"] == TARGET.id
    assert await h.store.count(A) == 2
    assert set(await h.nexus(A, "tag:ops/heartbeat")) == {TARGET.id, group}

    (near,) = await h.store.nearest([(A, REPEAT.tobytes())])
    assert near is not None
    assert (near.neighbour.memory_id, near.kind) == (group, "aggregate")
    assert near.neighbour.confidence == 0.6


def acted(record: MemoryRecord, actor: str) -> MemoryRecord:
    """`record` with `actor` as its provenance's actor."""
    cand = record.candidate
    provenance = replace(cand.provenance, actor_id=actor)
    return replace(record, candidate=replace(cand, provenance=provenance))


async def test_an_agents_actors_are_known_by_the_names_a_query_uses(h: Harness) -> None:
    """Each record's and each fold seed's actor, spelled as `actor_name` spells it,
    for its own agent only; a word of a name, or a name nobody acts as, is none."""
    first = acted(rec(A, "e1", "disk full on node seven", E1), "Dana O'Neil")
    second = acted(rec(A, "e2", "cpu pegged at ninety", E2), "deploy-bot")
    other = acted(rec(B, "e3", "disk full on node seven", E1), "Erik")
    quiet = rec(A, "e4", "network partition", E3)  # no actor
    seeder = acted(repeat("r1", T0 + 100), "Fold Seeder")
    await commit(
        h,
        WriteBatch(records=(first, second, other, quiet, TARGET)),
        WriteBatch(folds=(fold(A, TARGET, seeder),)),
    )
    asked = ("dana o neil", "deploy bot", "erik", "fold seeder", "dana", "nobody", "")
    assert await h.store.actors_named(A, asked) == {"dana o neil", "deploy bot", "fold seeder"}
    assert await h.store.actors_named(B, asked) == {"erik"}
    assert await h.store.actors_named(C, asked) == frozenset()
    assert await h.store.actors_named(A, ()) == frozenset()


async def test_two_folds_in_one_batch(h: Harness) -> None:
    group = aggregate_id(A, TARGET.id)
    folds = (fold(A, TARGET, repeat("r1", T0 + 5)), fold(A, TARGET, repeat("r2", T0 + 9)))
    await commit(h, WriteBatch(records=(TARGET,), folds=folds))
    created = await h.record(group)
    assert created is not None
    assert (created["count"], created["last_seen"], created["kind"]) == (
        "3",
        str(T0 + 9),
        "aggregate",
    )


async def test_a_fold_into_an_existing_aggregate_keeps_its_fields(h: Harness) -> None:
    group = aggregate_id(A, TARGET.id)
    await commit(h, WriteBatch(records=(TARGET,), folds=(fold(A, TARGET, repeat("r1", T0)),)))
    # the planner folds into an aggregate neighbour by its own id
    onto = fold(A, TARGET, repeat("r2", T0 + 7, "other words"), group=group)
    await commit(h, WriteBatch(folds=(onto,)))
    found = await h.record(group)
    assert found is not None
    assert (found["count"], found["last_seen"], found["text"]) == (
        "3",
        str(T0 + 7),
        "heartbeat pool depth stable",
    )


async def test_reinforcement_counts_and_keeps_the_latest_time(h: Harness) -> None:
    await commit(h, RECORDS)
    missing = memory_id(A, "gone", 0, T0)
    await commit(
        h,
        WriteBatch(
            reinforcements=(
                Reinforcement(A, R1.id, "m1", T0 + 500),
                Reinforcement(A, missing, "m2", T0 + 600),
            )
        ),
    )
    await commit(h, WriteBatch(reinforcements=(Reinforcement(A, R1.id, "m3", T0 + 200),)))
    found = await h.record(R1.id)
    assert found is not None
    assert (found["reinforced_count"], found["last_seen"]) == ("2", str(T0 + 500))
    assert await h.record(missing) is None  # a missing target is left alone, not created
    assert await h.store.count(A) == 2
    untouched = await h.record(R2.id)
    assert untouched is not None
    assert (untouched["reinforced_count"], "last_seen" in untouched) == ("0", False)


# --- decisions, field state, watermark, stats --------------------------------------------


async def test_recorded_decisions_are_seen_per_agent(h: Harness) -> None:
    await commit(
        h,
        WriteBatch(
            decisions=(Decision(A, "c1", "admit"), Decision(A, "c2", "reject")),
        ),
        WriteBatch(decisions=(Decision(B, "c3", "merge"),)),
    )
    found = await h.store.ingest_view([(A, "c1"), (A, "c3"), (B, "c1"), (A, "c4")])
    assert found.decided == {(A, "c1")}
    assert (await h.store.ingest_view([(B, "c3"), (A, "c2")])).decided == {(B, "c3"), (A, "c2")}
    assert (await h.store.ingest_view([])).decided == frozenset()
    assert await h.decisions(A) == {"c1": "admit", "c2": "reject"}
    assert await h.decisions(B) == {"c3": "merge"}


async def test_the_ingest_view_reads_held_outcomes_decisions_and_field_states(
    h: Harness,
) -> None:
    await commit(
        h,
        WriteBatch(decisions=(Decision(A, "c1", "admit"),), fields=(NEWER,)),
        WriteBatch(decisions=(Decision(B, "c3", "merge"),)),
    )
    await h.store.hold_outcome(Outcome("o1", B, T0 + 50, OutcomeKind.POSITIVE, ("c4",)), ["c4"])
    pairs = [(A, "c1"), (A, "c2"), (B, "c3"), (B, "c4"), (C, "c1"), (A, "c1")]
    view = await h.store.ingest_view(pairs)
    assert view.held == {(B, "c4")}
    assert view.decided == {(A, "c1"), (B, "c3")}
    assert view.fields == {A: NEWER, B: FieldState(B), C: FieldState(C)}
    assert view.fields == await h.store.load_fields([A, B, C])
    assert await h.store.ingest_view([]) == IngestView()


NEWER = FieldState(
    A,
    watermark_ms=T0 + 200,
    tick=12,
    block=None,
    regime="storm",
    affect=Affect(pleasure=-0.5, arousal=0.25, dominance=0.0, drives=(("FEAR", 0.75),)),
    focus=(("err:timeout", 1.5), ("tag:ops/disk", 0.25)),
)
OLDER = FieldState(A, watermark_ms=T0 + 100, regime="calm", focus=(("tag:x", 1.0),))


async def test_the_served_anti_rumination_window_only_moves_forward(h: Harness) -> None:
    assert await h.store.contrarian_served(A) is None
    await h.store.serve_contrarian(A, 3)
    await h.store.serve_contrarian(A, 2)  # a late recall
    assert await h.store.contrarian_served(A) == 3
    await h.store.serve_contrarian(A, 5)
    await h.store.serve_contrarian(B, 0)
    assert (await h.store.contrarian_served(A), await h.store.contrarian_served(B)) == (5, 0)
    assert await h.store.contrarian_served(C) is None


async def test_field_state_round_trip_and_the_watermark_is_a_maximum(h: Harness) -> None:
    other = FieldState(B, watermark_ms=T0 + 1)
    await commit(h, WriteBatch(fields=(NEWER, other)))
    assert await h.store.load_fields([A, B, C]) == {A: NEWER, B: other, C: FieldState(C)}
    assert await h.store.watermark(A) == T0 + 200

    await commit(h, WriteBatch(fields=(OLDER,)))
    assert await h.store.watermark(A) == T0 + 200  # never moves back
    # The state itself is last-write-wins: the handler only saves states advanced
    # from the loaded one, so it never writes an older one in practice.
    assert (await h.store.load_fields([A]))[A] == OLDER
    assert await h.store.watermark(B) == T0 + 1
    assert await h.store.watermark(C) is None
    assert await h.store.load_fields([]) == {}


async def test_a_state_vector_is_kept_per_agent_last_write_wins(h: Harness) -> None:
    first = StateVector(A, state_key(("regime calm", "disk")), E1.astype(np.float32).tobytes())
    other = StateVector(B, state_key(("cpu",)), E2.astype(np.float32).tobytes())
    await commit(h, WriteBatch(fields=(NEWER,), state_vectors=(first, other)))
    assert await h.store.state_vectors([A, B, C]) == {A: first, B: other}
    later = StateVector(A, state_key(("regime volatile", "disk")), E3.astype(np.float32).tobytes())
    await commit(h, WriteBatch(state_vectors=(later,)))
    assert await h.store.state_vectors([A]) == {A: later}
    assert await h.store.state_vectors([]) == {}


async def test_a_state_vector_replaces_a_hash_written_by_older_code(settings: Any) -> None:
    """The hash holds what the codec writes and nothing else: a field an older
    format wrote (`digest`) goes when the state vector is next written."""
    harness = await open_redis(settings)
    try:
        key = Keyspace(harness.prefix).state_vector(A)
        await harness.redis.hset(key, mapping={"digest": "regime calm; focus disk", "vector": b"x"})
        vector = StateVector(A, state_key(("regime calm", "disk")), E1.astype(np.float32).tobytes())
        await commit(harness, WriteBatch(state_vectors=(vector,)))
        assert sorted(_text(name) for name in await harness.redis.hkeys(key)) == ["key", "vector"]
        assert await harness.store.state_vectors([A]) == {A: vector}
    finally:
        await harness.close()


async def test_stats_and_metrics_accumulate(h: Harness) -> None:
    await commit(
        h,
        WriteBatch(
            stats=(
                StatsDelta(A, (("admit", 1), ("candidates", 2), ("quality_sum", 0.25))),
                StatsDelta(B, (("candidates", 1), ("reject", 1))),
            ),
            metrics=(("embed_hits", 2.0), ("embed_model_calls", 1.0)),
        ),
        WriteBatch(
            stats=(StatsDelta(A, (("candidates", 1), ("quality_sum", 0.5))),),
            metrics=(("embed_hits", 1.0),),
        ),
    )
    assert await h.stats(A) == pytest.approx({"admit": 1, "candidates": 3, "quality_sum": 0.75})
    assert await h.stats(B) == {"candidates": 1.0, "reject": 1.0}
    assert await h.stats(C) == {}
    assert await h.metrics() == {"embed_hits": 3.0, "embed_model_calls": 1.0}


async def test_the_store_reports_its_metrics(h: Harness) -> None:
    await commit(h, WriteBatch(metrics=(("embed_hits", 2.0),)))
    assert await h.store.metrics() == {"embed_hits": 2.0}


async def test_an_empty_batch_changes_nothing(h: Harness) -> None:
    await commit(h, WriteBatch())
    assert await h.store.count(A) == 0
    assert await h.store.watermark(A) is None
    assert await h.stats(A) == {}


# --- both at once ------------------------------------------------------------------------


def _scenario() -> list[WriteBatch]:
    return [
        WriteBatch(
            records=(R1, R2, R3, TARGET),
            decisions=(Decision(A, R1.id, "admit"),),
            fields=(NEWER,),
            stats=(StatsDelta(A, (("candidates", 1),)),),
        ),
        WriteBatch(
            folds=(fold(A, TARGET, repeat("r1", T0 + 3)), fold(A, TARGET, repeat("r2", T0 + 4))),
            reinforcements=(Reinforcement(A, R2.id, "m", T0 + 30),),
            fields=(OLDER,),
        ),
    ]


async def _dump(h: Harness, ids: Sequence[str]) -> dict[str, Any]:
    return {
        "records": {memory: await h.record(memory) for memory in ids},
        "nexus": await h.nexus(A, "tag:ops/heartbeat"),
        "edges": await h.hyperedge(A, TURN),
        "fields": await h.store.load_fields([A, B]),
        "watermarks": [await h.store.watermark(agent) for agent in (A, B, C)],
        "stats": await h.stats(A),
        "near": await h.store.nearest([(A, REPEAT.tobytes()), (B, E1.tobytes())]),
    }


async def test_both_stores_end_in_the_same_state(settings: Settings) -> None:
    memory, redis = MemoryHarness(), await open_redis(settings)
    try:
        for harness in (memory, redis):
            await commit(harness, *_scenario())
        ids = [R1.id, R2.id, R3.id, TARGET.id, aggregate_id(A, TARGET.id)]
        mine, theirs = await _dump(memory, ids), await _dump(redis, ids)
        near_mine, near_theirs = mine.pop("near"), theirs.pop("near")
        assert mine == theirs
        assert [(n.neighbour.memory_id, n.kind) for n in near_mine if n] == [
            (n.neighbour.memory_id, n.kind) for n in near_theirs if n
        ]
        for a, b in zip(near_mine, near_theirs, strict=True):
            assert a is not None and b is not None
            assert a.neighbour.similarity == pytest.approx(b.neighbour.similarity, abs=1e-6)
    finally:
        await redis.close()


async def test_a_usage_entry_is_applied_once_by_its_sequence_number(h: Harness) -> None:
    await commit(h, RECORDS)
    first = await apply_usage_entry(h.store, A, 7, [R1.id], T0 + 10, 4)
    again = await apply_usage_entry(h.store, A, 7, [R1.id], T0 + 10, 4)
    other = await apply_usage_entry(h.store, A, 8, [R1.id], T0 + 20, None)
    assert (first, again, other) == (True, False, True)
    usage = await h.usage(R1.id)
    assert usage["included_count_total"] == "2"
    assert usage["last_accessed"] == str(T0 + 20)
    assert await h.store.contrarian_served(A) == 4
    assert await h.store.usage_view(A, 7, None) == UsageView(seq_applied=True)
    assert await h.store.usage_view(A, 9, None) == UsageView(seq_applied=False)


async def test_a_recall_answered_twice_applies_its_usage_once(h: Harness) -> None:
    await commit(h, RECORDS)
    request = "g.recall-requests:2:27"
    first = await apply_usage_entry(h.store, A, 50, [R1.id], T0 + 10, None, request)
    twice = await apply_usage_entry(h.store, A, 51, [R1.id], T0 + 10, None, request)
    other = await apply_usage_entry(
        h.store, A, 52, [R1.id], T0 + 20, None, "g.recall-requests:2:28"
    )
    assert (first, twice, other) == (True, False, True)
    assert answered_twice(await h.store.usage_view(A, 51, request), 51)
    assert not answered_twice(await h.store.usage_view(A, 50, request), 50)
    assert (await h.usage(R1.id))["included_count_total"] == "2"
    assert await h.store.usage_view(A, 51, request) == UsageView(False, 50)
    assert await h.store.usage_view(A, 50, request) == UsageView(True, 50)


async def test_a_usage_commit_writes_its_marks_and_forgets_the_old_ones(h: Harness) -> None:
    await commit(h, RECORDS)
    assert await h.store.usage_view(A, 1, "t:0:1") == UsageView(False, None)
    await h.store.commit_usage(UsageChanges(A, 1, "t:0:1", (R1.id,), T0 + 10, None, -9_998))
    await h.store.commit_usage(UsageChanges(A, 2, None, (), T0 + 11, 3, -9_997))
    assert await h.store.usage_view(A, 1, "t:0:1") == UsageView(True, 1)
    assert await h.store.usage_view(A, 2, "t:0:2") == UsageView(True, None)
    assert await h.store.contrarian_served(A) == 3  # a window with no memory used
    assert (await h.usage(R1.id))["included_count_total"] == "1"
    # Marks scored below `forget_below` go, entries' and requests' alike.
    await h.store.commit_usage(UsageChanges(A, 5, "t:0:5", (), T0 + 12, None, 2))
    assert await h.store.usage_view(A, 1, "t:0:1") == UsageView(False, None)
    assert await h.store.usage_view(A, 2, None) == UsageView(True, None)
    assert await h.store.usage_view(A, 5, "t:0:5") == UsageView(True, 5)
    assert await h.store.usage_view(B, 5, "t:0:5") == UsageView(False, None)  # per agent


async def test_run_credits_add_the_agents_stats_counters_once(h: Harness) -> None:
    from grimoire.streams.learn.outcomes import Outcome, OutcomeKind
    from grimoire.streams.learn.runs import RECALLED, MemoryCredit

    await commit(h, RECORDS)
    ended = Outcome("o-1", A, T0 + 50, OutcomeKind.RUN_ENDED, (), run_id="r", quality=0.9)
    credits = [MemoryCredit(R1.id, (RECALLED,), 0.05, 1.0, 0, 0)]
    counters = [("run_recalled", 2), ("run_recalled_hits", 1)]
    assert await h.store.apply_credits(ended, credits, {}, counters=counters) == 1
    assert await h.store.apply_credits(ended, credits, {}, counters=counters) == -1
    later = replace(ended, outcome_id="o-2")
    assert await h.store.apply_credits(later, [], {}, counters=[("run_recalled", 3)]) == 0

    # The agent's stats as AgentStateStore reads them (the in-memory store holds its own).
    def stats(agent: str) -> Any:
        store = h.store
        return (
            store.stats(agent)
            if isinstance(store, InMemoryMemoryStore)
            else (
                store.state.stats(agent)  # type: ignore[attr-defined]
            )
        )

    found = await stats(A)
    assert (found["run_recalled"], found["run_recalled_hits"]) == (5.0, 1.0)
    assert "run_recalled" not in await stats(B)
