"""The CompactionStore contract: InMemoryCompactionStore and RedisCompactionStore
behave the same, step by step.

Every test runs against both implementations, each beside its memory store
(memories are written by the memory store's own commit). What a store keeps
beyond the protocol (record hashes, usage, tombstones, the plan hash, its expiry,
the outbox) is read through a small harness: the raw Redis keys built by
`Keyspace` (so the keys and values stay what they were), or the inspection
methods of the in-memory stores. The phase machine over both stores is
exercised end to end in `test_compaction_crash.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from redis.asyncio import Redis

from grimoire.streams.maintenance.compaction import (
    DAY_MS,
    ClusterPlan,
    CompactionCandidate,
    CompactionPlan,
    CompactionPolicy,
)
from grimoire.streams.model.records import Kind, MemoryRecord
from grimoire.streams.write.changes import WriteBatch
from grimoire.tables.codec.compaction_plan import encode_plan
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.memory_hash import summary_fields
from grimoire.tables.exceptions import StorageError
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.compaction_store import (
    PLAN_TTL_S,
    Phase,
    RedisCompactionStore,
    StoredPlan,
)
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.ports.maintenance import CompactionStore
from grimoire.tables.ports.memory import MemoryStore
from grimoire.tables.testing.compaction_store import InMemoryCompactionStore
from grimoire.tables.testing.memory_store import InMemoryMemoryStore
from tests.support.contract import BACKENDS, memory_or_deployment
from tests.support.maintenance import ops_episode
from tests.support.stored import owned_key
from tests.support.vectors import axis_unit

pytestmark = pytest.mark.integration

DIMS = 8
T0 = 1_790_000_000_000 - (1_790_000_000_000 % DAY_MS)
NOW = T0 + 30 * DAY_MS
HOUR_MS = 3_600_000
POLICY = CompactionPolicy(min_age_ms=7 * DAY_MS)
A, B = "agent-a", "agent-b"
VECTOR_FIELDS = ("canonical", "eidolon")
Hash = dict[str, str | bytes]


def unit(axis: int) -> npt.NDArray[np.float32]:
    return axis_unit(axis, DIMS)


def rec(
    agent: str,
    n: int,
    ts: int,
    keys: tuple[str, ...] = ("err:oom",),
    *,
    kind: Kind = Kind.EPISODE,
    quarantined: bool = False,
) -> MemoryRecord:
    text = f"worker {n} ran out of memory"
    return ops_episode(agent, n, text, ts, keys, unit(n), kind=kind, quarantined=quarantined)


def cluster_plan(
    summary_id: str, sources: tuple[str, ...], *, ts: int = T0, text: str = "summary"
) -> ClusterPlan:
    return ClusterPlan(
        summary_id=summary_id,
        centre_key="err:oom",
        bucket_start_ms=T0,
        ts_ms=ts,
        source_ids=sources,
        summary_of=(),
        summary_level=1,
        token_estimate=12,
        text=f"{text}: workers ran out of memory",
        tags=("topic/gc", "src/system"),
        keys=("err:oom",),
    )


def plan_of(*clusters: ClusterPlan, plan_id: str = "plan-1") -> CompactionPlan:
    return CompactionPlan(plan_id=plan_id, now_ms=NOW, clusters=clusters)


# --- the two implementations behind one harness -------------------------------------------


class Harness:
    memory: MemoryStore
    store: CompactionStore

    async def record(self, memory_id: str) -> Hash | None:
        """The memory's hash as HGETALL returns it: text, vectors as bytes."""
        raise NotImplementedError

    async def set_field(self, memory_id: str, name: str, value: str) -> None:
        raise NotImplementedError

    async def touch(self, memory_id: str, as_of_ms: int) -> None:
        """What recall's usage accounting leaves after one inclusion."""
        raise NotImplementedError

    async def nexus(self, agent: str, key: str) -> dict[str, int]:
        raise NotImplementedError

    async def tombstone(self, memory_id: str) -> dict[str, str]:
        raise NotImplementedError

    async def plan_fields(self, agent: str, plan_id: str) -> dict[str, str] | None:
        raise NotImplementedError

    async def plan_expires(self, agent: str, plan_id: str) -> bool:
        raise NotImplementedError

    async def outbox_ids(self, agent: str, plan_id: str) -> list[str]:
        raise NotImplementedError


def _text_hash(raw: dict[Any, Any]) -> Hash:
    out: Hash = {}
    for key, value in raw.items():
        name = text_of(key)
        out[name] = value if name in VECTOR_FIELDS else text_of(value)
    return out


class MemoryHarness(Harness):
    def __init__(self) -> None:
        self.in_memory = InMemoryMemoryStore(dims=DIMS)
        self.compaction = InMemoryCompactionStore(self.in_memory, dims=DIMS)
        self.memory = self.in_memory
        self.store = self.compaction

    async def record(self, memory_id: str) -> Hash | None:
        found = self.in_memory.record(memory_id)
        return _text_hash(found) if found is not None else None

    async def set_field(self, memory_id: str, name: str, value: str) -> None:
        # An HSET: the memory store hands out its stored hashes.
        doc = next(d for d in self.in_memory.hashes() if text_of(d["memory_id"]) == memory_id)
        doc[name] = value

    async def touch(self, memory_id: str, as_of_ms: int) -> None:
        self.in_memory.touch(memory_id, as_of_ms)

    async def nexus(self, agent: str, key: str) -> dict[str, int]:
        return await self.in_memory.nexus(agent, key)

    async def tombstone(self, memory_id: str) -> dict[str, str]:
        return {k: text_of(v) for k, v in self.compaction.tombstone(memory_id).items()}

    async def plan_fields(self, agent: str, plan_id: str) -> dict[str, str] | None:
        found = self.compaction.plan_fields(agent, plan_id)
        return {k: text_of(v) for k, v in found.items()} if found is not None else None

    async def plan_expires(self, agent: str, plan_id: str) -> bool:
        return self.compaction.plan_ttl_s(agent, plan_id) == PLAN_TTL_S

    async def outbox_ids(self, agent: str, plan_id: str) -> list[str]:
        return self.compaction.outbox_ids(agent, plan_id)


class RedisHarness(Harness):
    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self.keys = Keyspace(prefix)
        self.redis_memory = RedisMemoryStore(redis, prefix=prefix, dims=DIMS)
        self.memory = self.redis_memory
        self.store = RedisCompactionStore(redis, prefix, dims=DIMS)

    async def record(self, memory_id: str) -> Hash | None:
        raw = await self.redis.hgetall(await self._key(self.keys.memory, memory_id))
        return _text_hash(raw) if raw else None

    async def _key(self, build: Any, memory_id: str) -> str:
        return await owned_key(self.redis, build, (A, B), memory_id)

    async def set_field(self, memory_id: str, name: str, value: str) -> None:
        await self.redis.hset(await self._key(self.keys.memory, memory_id), name, value)

    async def touch(self, memory_id: str, as_of_ms: int) -> None:
        owner = await self._key(self.keys.memory, memory_id)
        agent = owner[owner.index("{") + 1 : owner.index("}")]
        await self.redis.hset(
            self.keys.usage(agent, memory_id),
            mapping={
                "included_count_total": "1",
                "included_count_decay": "1.0",
                "last_accessed": str(as_of_ms),
            },
        )

    async def nexus(self, agent: str, key: str) -> dict[str, int]:
        members = await self.redis.zrange(self.keys.nexus(agent, key), 0, -1, withscores=True)
        return {text_of(member): int(score) for member, score in members}

    async def tombstone(self, memory_id: str) -> dict[str, str]:
        raw = await self.redis.hgetall(await self._key(self.keys.tombstone, memory_id))
        return {text_of(k): text_of(v) for k, v in raw.items()}

    async def plan_fields(self, agent: str, plan_id: str) -> dict[str, str] | None:
        raw = await self.redis.hgetall(self.keys.compaction_plan(agent, plan_id))
        return {text_of(k): text_of(v) for k, v in raw.items()} if raw else None

    async def plan_expires(self, agent: str, plan_id: str) -> bool:
        ttl = await self.redis.ttl(self.keys.compaction_plan(agent, plan_id))
        return 0 < int(ttl) <= PLAN_TTL_S

    async def outbox_ids(self, agent: str, plan_id: str) -> list[str]:
        raw = await self.redis.lrange(self.keys.compaction_outbox(agent, plan_id), 0, -1)
        return [text_of(m) for m in raw]


@pytest.fixture(params=BACKENDS)
async def h(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    subject = memory_or_deployment(request, MemoryHarness, RedisHarness, tag="cc", dims=DIMS)
    async with subject as harness:
        yield harness


async def commit(h: Harness, *records: MemoryRecord) -> None:
    await h.memory.commit(WriteBatch(records=records))


async def indexed_eventually(h: Harness, ids: list[str], expected: int) -> int:
    """The index catches up shortly after a write (Redis); the reference at once."""
    for _ in range(250):
        found = await h.store.indexed(A, ids)
        if found >= expected:
            return found
        await asyncio.sleep(0.02)
    return found


# --- the candidate scan -------------------------------------------------------------


async def test_the_cursor_is_absent_until_set(h: Harness) -> None:
    assert await h.store.cursor(A) is None
    await h.store.set_cursor(A, T0 + DAY_MS)
    assert await h.store.cursor(A) == T0 + DAY_MS
    assert await h.store.cursor(B) is None
    if isinstance(h, RedisHarness):  # the same key and value as ever
        assert await h.redis.get(h.keys.compaction_cursor(A)) == str(T0 + DAY_MS).encode()


async def test_candidates_are_one_window_of_the_agents_old_live_memories_oldest_first(
    h: Harness,
) -> None:
    first, second = rec(A, 1, T0 + HOUR_MS), rec(A, 2, T0 + 2 * HOUR_MS, ("err:oom", "p:x"))
    deleted, archived = rec(A, 3, T0 + 3 * HOUR_MS), rec(A, 4, T0 + 4 * HOUR_MS)
    quarantined = rec(A, 5, T0 + 5 * HOUR_MS, quarantined=True)
    aggregate = rec(A, 6, T0 + 6 * HOUR_MS, kind=Kind.AGGREGATE)
    summary = rec(A, 7, T0 + 7 * HOUR_MS, kind=Kind.SUMMARY)
    next_window = rec(A, 8, T0 + DAY_MS)
    young = rec(A, 9, NOW - DAY_MS)
    others = rec(B, 10, T0 + HOUR_MS)
    await commit(
        h, second, first, deleted, archived, quarantined, aggregate, summary, next_window, young,
        others,
    )  # fmt: skip
    await h.set_field(deleted.id, "deleted", "1")
    await h.set_field(archived.id, "archived", "1")
    await h.set_field(summary.id, "summary_level", "1")
    await h.set_field(first.id, "pinned", "1")  # still a candidate: the planner excludes it
    await h.touch(second.id, T0 + 20 * DAY_MS)

    found = await h.store.candidates(A, NOW, POLICY, 100, T0)
    assert found == [
        CompactionCandidate(
            memory_id=first.id,
            kind="episode",
            text=first.candidate.text,
            ts_ms=first.candidate.ts_ms,
            keys=("err:oom",),
            tags=("ops/memory",),
            quality=0.4,
            pinned=True,
        ),
        CompactionCandidate(
            memory_id=second.id,
            kind="episode",
            text=second.candidate.text,
            ts_ms=second.candidate.ts_ms,
            keys=("err:oom", "p:x"),
            tags=("ops/memory",),
            quality=0.4,
            included_count_decay=1.0,
            last_accessed_ms=T0 + 20 * DAY_MS,
        ),
    ]
    assert [c.memory_id for c in await h.store.candidates(A, NOW, POLICY, 1, T0)] == [first.id]
    # The next window starts where this one ends (exclusive), and the horizon binds.
    later = await h.store.candidates(A, NOW, POLICY, 100, T0 + DAY_MS)
    assert [c.memory_id for c in later] == [next_window.id]
    assert await h.store.candidates(A, NOW, POLICY, 100, NOW - DAY_MS) == []
    # A level-1 policy reads the summaries of the window, and only them.
    level = replace(POLICY, summary_level=1)
    summaries = await h.store.candidates(A, NOW, level, 100, T0)
    assert [(c.memory_id, c.summary_level) for c in summaries] == [(summary.id, 1)]
    assert [c.memory_id for c in await h.store.candidates(B, NOW, POLICY, 100, T0)] == [others.id]


async def test_first_live_ts_bounds_are_inclusive_and_skip_what_recall_cannot_reach(
    h: Harness,
) -> None:
    gone, live, last = rec(A, 1, T0), rec(A, 2, T0 + HOUR_MS), rec(A, 3, T0 + DAY_MS)
    await commit(h, gone, live, last, rec(B, 4, T0 - HOUR_MS))
    await h.set_field(gone.id, "deleted", "1")
    assert await h.store.first_live_ts(A, 0, NOW) == T0 + HOUR_MS
    assert await h.store.first_live_ts(A, T0 + HOUR_MS, T0 + HOUR_MS) == T0 + HOUR_MS
    assert await h.store.first_live_ts(A, T0 + HOUR_MS + 1, NOW) == T0 + DAY_MS
    assert await h.store.first_live_ts(A, T0 + HOUR_MS + 1, T0 + DAY_MS - 1) is None
    assert await h.store.first_live_ts(B, 0, NOW) == T0 - HOUR_MS
    assert await h.store.first_live_ts("nobody", 0, NOW) is None


async def test_degrees_count_the_agents_memories_per_key(h: Harness) -> None:
    await commit(h, rec(A, 1, T0, ("k:a", "k:b")), rec(A, 2, T0, ("k:a",)), rec(B, 3, T0, ("k:a",)))
    assert await h.store.degrees(A, ["k:a", "k:b", "k:none"]) == {"k:a": 2, "k:b": 1, "k:none": 0}
    assert await h.store.degrees(A, []) == {}


# --- the persisted plan -----------------------------------------------------------------


async def test_a_saved_plan_is_pending_at_planned_until_dropped(h: Harness) -> None:
    plan = plan_of(cluster_plan("sum-1", ("m1", "m2", "m3")))
    assert await h.store.pending(A) is None
    await h.store.save_plan(A, plan)
    assert await h.store.pending(A) == "plan-1" and await h.store.pending(B) is None
    assert await h.store.load_plan(A, "plan-1") == StoredPlan(plan, Phase.PLANNED)
    assert await h.store.load_plan(B, "plan-1") is None
    assert await h.store.load_plan(A, "plan-2") is None
    fields = await h.plan_fields(A, "plan-1")
    assert fields == {"plan": encode_plan(plan).decode(), "phase": "planned", "agent_id": A}
    await h.store.mark_indexed(A, "plan-1")
    assert await h.store.load_plan(A, "plan-1") == StoredPlan(plan, Phase.INDEXED)
    await h.store.drop_pending(A)
    assert await h.store.pending(A) is None
    assert await h.store.load_plan(A, "plan-1") is not None  # only the pointer goes


# --- the phases ---------------------------------------------------------------------


async def test_summaries_are_written_hidden_and_linked_with_the_phase(h: Harness) -> None:
    sources = (rec(A, 1, T0), rec(A, 2, T0 + 1), rec(A, 3, T0 + 2))
    await commit(h, *sources)
    first = cluster_plan("sum-1", tuple(r.id for r in sources), ts=T0 + 2)
    second = cluster_plan("sum-2", ("m-x",), ts=T0 + 5, text="other")
    plan = plan_of(first, second)
    await h.store.save_plan(A, plan)
    assert await h.store.existing(A, ["sum-1", sources[0].id, "nothing"]) == {sources[0].id}

    vector = unit(3).tobytes()
    await h.store.write_summaries(A, plan, {"sum-1": vector})  # sum-2 exists already, say
    written = await h.record("sum-1")
    expected = summary_fields(A, plan, first, vector, DIMS)
    assert written == {
        name: value if name in VECTOR_FIELDS else text_of(value) if isinstance(value, bytes)
        else value if isinstance(value, str) else repr(value)
        for name, value in expected.items()
    }  # fmt: skip
    assert written["deleted"] == "1" and written["compaction_pending"] == "plan-1"
    assert await h.record("sum-2") is None
    assert (await h.nexus(A, "err:oom"))["sum-1"] == T0 + 2
    assert await h.store.existing(A, ["sum-1", "sum-2"]) == {"sum-1"}
    assert await indexed_eventually(h, ["sum-1", "sum-2"], 1) == 1
    stored = await h.store.load_plan(A, "plan-1")
    assert stored is not None and stored.phase is Phase.SUMMARIES_WRITTEN
    # A hidden summary is never a candidate, nor what a scan resumes at.
    assert [c.memory_id for c in await h.store.candidates(A, NOW, POLICY, 100, T0)] == [
        r.id for r in sources
    ]


async def test_a_vector_of_the_wrong_size_writes_nothing(h: Harness) -> None:
    plan = plan_of(cluster_plan("sum-1", ("m1",)), cluster_plan("sum-2", ("m2",)))
    await h.store.save_plan(A, plan)
    with pytest.raises(StorageError):
        await h.store.write_summaries(
            A, plan, {"sum-1": unit(1).tobytes(), "sum-2": unit(1).tobytes()[:-4]}
        )
    assert await h.record("sum-1") is None and await h.record("sum-2") is None
    stored = await h.store.load_plan(A, "plan-1")
    assert stored is not None and stored.phase is Phase.PLANNED


async def _written(h: Harness, plan: CompactionPlan, summaries: tuple[str, ...]) -> None:
    await h.store.save_plan(A, plan)
    written = {i: unit(3).tobytes() for i in summaries}
    await h.store.write_summaries(A, plan, written)
    assert await indexed_eventually(h, list(summaries), len(summaries)) == len(summaries)
    await h.store.mark_indexed(A, plan.plan_id)


async def test_the_flip_swaps_live_sources_for_the_visible_summary_once(h: Harness) -> None:
    s1, s2, s3 = rec(A, 1, T0), rec(A, 2, T0 + 1), rec(A, 3, T0 + 2)
    held, foreign = rec(A, 4, T0 + 3), rec(B, 5, T0 + 4)
    lonely = rec(A, 6, T0 + 5)
    await commit(h, s1, s2, s3, held, foreign, lonely)
    await h.set_field(held.id, "quarantined", "1")
    flipped_cluster = cluster_plan("sum-1", (s1.id, s2.id, held.id, foreign.id, s3.id))
    missing = cluster_plan("sum-missing", (lonely.id,))
    plan = plan_of(flipped_cluster, missing)
    await _written(h, plan, ("sum-1",))

    assert await h.store.flip(A, plan) == [3, -1]
    summary = await h.record("sum-1")
    assert summary is not None and summary["deleted"] == "0"
    assert "compaction_pending" not in summary
    for source in (s1, s2, s3):
        fields = await h.record(source.id)
        assert fields is not None
        assert (fields["deleted"], fields["replaced_by_summary_id"]) == ("1", "sum-1")
        assert "canonical" in fields  # dropped later, from the outbox
        assert await h.tombstone(source.id) == {
            "summary_id": "sum-1",
            "plan_id": "plan-1",
            "agent_id": A,
            "ts": str(NOW),
        }
    for untouched in (held, foreign, lonely):
        fields = await h.record(untouched.id)
        assert fields is not None and "replaced_by_summary_id" not in fields
        assert fields["deleted"] == "0" and await h.tombstone(untouched.id) == {}
    assert await h.outbox_ids(A, "plan-1") == [s1.id, s2.id, s3.id]
    stored = await h.store.load_plan(A, "plan-1")
    assert stored is not None and stored.phase is Phase.FLIPPED

    # Redone (a crash before the phase was seen): nothing flips or queues twice.
    assert await h.store.flip(A, plan) == [0, -1]
    assert await h.outbox_ids(A, "plan-1") == [s1.id, s2.id, s3.id]
    # Another agent's flip of the same summary is refused as a whole.
    assert await h.store.flip(B, plan_of(flipped_cluster, plan_id="plan-b")) == [-1]
    fields = await h.record(foreign.id)
    assert fields is not None and fields["deleted"] == "0"


async def test_vectors_drop_batch_by_batch_and_finish_clears_the_plan(h: Harness) -> None:
    sources = tuple(rec(A, n, T0 + n) for n in range(1, 6))
    await commit(h, *sources)
    ids = tuple(r.id for r in sources)
    plan = plan_of(cluster_plan("sum-1", ids))
    await _written(h, plan, ("sum-1",))
    assert await h.store.flip(A, plan) == [5]

    batch = await h.store.outbox(A, "plan-1", 2)
    assert batch == list(ids[:2])
    await h.store.drop_vectors(A, "plan-1", batch)
    for source_id in ids:
        fields = await h.record(source_id)
        assert fields is not None
        assert ("canonical" in fields, "eidolon" in fields) == ((source_id not in batch),) * 2
        assert fields["replaced_by_summary_id"] == "sum-1"  # only the vectors go
    assert await h.store.outbox(A, "plan-1", 10) == list(ids[2:])
    rest = await h.store.outbox(A, "plan-1", 10)
    await h.store.drop_vectors(A, "plan-1", rest)
    assert await h.store.outbox(A, "plan-1", 10) == []
    summary = await h.record("sum-1")
    assert summary is not None and "canonical" in summary

    await h.store.finish(A, "plan-1")
    assert await h.store.pending(A) is None
    assert await h.plan_fields(A, "plan-1") == {
        "plan": encode_plan(plan).decode(),
        "phase": "done",
        "agent_id": A,
    }
    assert await h.plan_expires(A, "plan-1")
    assert await h.outbox_ids(A, "plan-1") == []
