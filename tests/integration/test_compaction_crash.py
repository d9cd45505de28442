"""Crash-safe compaction: memories are written by the store's own write path,
recalled by the real recall flow, and the compaction phase machine
(`grimoire.agents.maintenance.compaction_task`) is made to crash at every phase
boundary. At each point recall must reach either the whole old cluster or its
summary, never both and never neither; `resume` (or the next `compact`)
finishes the job without a second summary.

Every test runs over the real Redis Stack (RedisCompactionStore beside
RedisMemoryStore) and over the in-memory reference stores, through one harness.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from redis.asyncio import Redis

from grimoire.agents.maintenance.compaction_task import CompactionOptions, CompactionTask
from grimoire.infra.settings import Settings
from grimoire.streams.inbound.recall_request import RecallQuery
from grimoire.streams.maintenance.compaction import DAY_MS, CompactionPlan, CompactionPolicy
from grimoire.streams.model.lexicon import query_terms
from grimoire.streams.model.records import MemoryRecord
from grimoire.streams.recall.flow import RecallContext, run_recall
from grimoire.streams.recall.options import RetrievalBudgets, RetrievalMode
from grimoire.streams.write.changes import WriteBatch
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.search_replies import scored_keys
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.compaction_store import Phase, RedisCompactionStore
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.ports.maintenance import CompactionStore
from grimoire.tables.ports.memory import MemoryStore
from grimoire.tables.queries import escape_tag
from grimoire.tables.redis_client import create_redis
from grimoire.tables.testing.compaction_store import InMemoryCompactionStore
from grimoire.tables.testing.memory_store import InMemoryMemoryStore
from tests.support.embedders import search_terms_vector
from tests.support.maintenance import Crash, CrashAt, ops_episode
from tests.support.stored import drop_deployment
from tests.support.vectors import axis_unit

pytestmark = pytest.mark.integration

DIMS = 384
T0 = 1_790_000_000_000 - (1_790_000_000_000 % DAY_MS)
NOW = T0 + 30 * DAY_MS
CLUSTER_QUERY = "worker ran out of memory loading batch"
WALK_QUERY = "rotated app2 log after the deploy"
POLICY = CompactionPolicy(min_age_ms=7 * DAY_MS, max_rolled_keys=1)
Hash = dict[str, str]


def bag_of_words(text: str) -> npt.NDArray[np.float32]:
    """Deterministic vectors: texts sharing words point the same way."""
    vector = search_terms_vector(text, DIMS)
    return vector if vector.any() else axis_unit(0, DIMS)


async def fake_embed(texts: Sequence[str]) -> npt.NDArray[np.float32]:
    return np.stack([bag_of_words(text) for text in texts]).astype(np.float32)


class World:
    """One agent's memories in a memory store, and the compaction store beside it;
    what a test inspects beyond the protocols is read per backend."""

    memory: MemoryStore
    store: CompactionStore
    agent: str
    sources: tuple[str, ...]
    walk_seed: str

    def compactor(self, *crash_at: str) -> CompactionTask:
        return CompactionTask(
            self.store, fake_embed, POLICY, CompactionOptions(outbox_batch=1), CrashAt(*crash_at)
        )

    async def recall(self, text: str, lane_k: int = 20) -> dict[str, tuple[str, ...]]:
        vector = (await fake_embed([text]))[0]
        query = RecallQuery(
            agent_id=self.agent,
            query=text,
            reply_to="r",
            correlation_id="c",
            budgets=RetrievalBudgets(
                canonical_k=lane_k,
                eidolon_k=lane_k,
                bm25_k=lane_k,
                max_items=20,
                token_budget=20_000,
            ),
            record_usage=False,
        )
        ctx = RecallContext(
            now_ms=NOW,
            mode=RetrievalMode.FULL,
            terms=query_terms(text),
            canonical=vector,
            eidolon=vector,
        )
        outcome = await run_recall(query, ctx, self.memory.recall_source(self.agent))
        return {item.record.memory_id: item.lanes for item in outcome.items}

    async def pending_plan(self) -> CompactionPlan:
        plan_id = await self.store.pending(self.agent)
        assert plan_id is not None
        stored = await self.store.load_plan(self.agent, plan_id)
        assert stored is not None
        return stored.plan

    async def cursor(self) -> int | None:
        return await self.store.cursor(self.agent)

    async def summaries(self) -> list[str]:
        """Every summary document of the agent, hidden or not."""
        raise NotImplementedError

    async def vectors_left(self) -> int:
        raise NotImplementedError

    async def fields(self, memory_id: str) -> Hash:
        """The memory's hash without its vectors, as text."""
        raise NotImplementedError

    async def tombstone(self, memory_id: str) -> Hash:
        raise NotImplementedError

    async def nexus_members(self, key: str) -> set[str]:
        raise NotImplementedError

    async def quarantine(self, memory_id: str) -> None:
        raise NotImplementedError


def _text_hash(raw: dict[Any, Any]) -> Hash:
    return {
        text_of(k): text_of(v) for k, v in raw.items() if text_of(k) not in ("canonical", "eidolon")
    }


class RedisWorld(World):
    def __init__(self, redis: Redis, prefix: str, agent: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self.agent = agent
        self.redis_memory = RedisMemoryStore(redis, prefix=prefix, dims=DIMS)
        self.memory = self.redis_memory
        self.store = RedisCompactionStore(redis, prefix, dims=DIMS)

    async def summaries(self) -> list[str]:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.execute_command(
                "FT.SEARCH", self.redis_memory.index_name,
                f"@agent_id:{{{escape_tag(self.agent)}}} @kind:{{summary}}",
                "NOCONTENT", "WITHSCORES", "LIMIT", 0, 100, "DIALECT", 2,
            )  # fmt: skip
            (reply,) = await pipe.execute()
        return sorted(key.rsplit(":", 1)[-1] for key, _ in scored_keys(reply))

    async def vectors_left(self) -> int:
        async with self.redis.pipeline(transaction=False) as pipe:
            for source in self.sources:
                pipe.hexists(self.redis_memory.key(self.agent, source), "canonical")
            return sum(bool(found) for found in await pipe.execute())

    async def fields(self, memory_id: str) -> Hash:
        return _text_hash(await self.redis.hgetall(self.redis_memory.key(self.agent, memory_id)))

    async def tombstone(self, memory_id: str) -> Hash:
        return _text_hash(
            await self.redis.hgetall(Keyspace(self.prefix).tombstone(self.agent, memory_id))
        )

    async def nexus_members(self, key: str) -> set[str]:
        nexus = Keyspace(self.prefix).nexus(self.agent, key)
        return {text_of(m) for m in await self.redis.zrange(nexus, 0, -1)}

    async def quarantine(self, memory_id: str) -> None:
        await self.redis.hset(self.redis_memory.key(self.agent, memory_id), "quarantined", "1")


class MemoryWorld(World):
    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.in_memory = InMemoryMemoryStore(dims=DIMS)
        self.memory = self.in_memory
        self.compaction = InMemoryCompactionStore(self.in_memory, dims=DIMS)
        self.store = self.compaction

    async def summaries(self) -> list[str]:
        return sorted(
            text_of(doc["memory_id"])
            for doc in self.in_memory.hashes()
            if text_of(doc["agent_id"]) == self.agent and text_of(doc["kind"]) == "summary"
        )

    async def vectors_left(self) -> int:
        return sum("canonical" in (self.in_memory.record(s) or {}) for s in self.sources)

    async def fields(self, memory_id: str) -> Hash:
        return _text_hash(self.in_memory.record(memory_id) or {})

    async def tombstone(self, memory_id: str) -> Hash:
        return _text_hash(self.compaction.tombstone(memory_id))

    async def nexus_members(self, key: str) -> set[str]:
        return set(await self.in_memory.nexus(self.agent, key))

    async def quarantine(self, memory_id: str) -> None:
        # What an HSET would do: the memory store hands out its stored hashes.
        doc = next(d for d in self.in_memory.hashes() if text_of(d["memory_id"]) == memory_id)
        doc["quarantined"] = "1"


def record(agent: str, n: int, text: str, ts: int, keys: tuple[str, ...]) -> MemoryRecord:
    return ops_episode(agent, n, text, ts, keys, bag_of_words(text))


async def seed(w: World) -> None:
    cluster = [
        record(w.agent, n, f"worker ran out of memory while loading batch {n}", T0 + n * 60_000,
               ("err:oom", f"path:/srv/app{n}.log"))
        for n in range(4)
    ]  # fmt: skip
    walk_seed = record(
        w.agent, 10, "rotated /srv/app2.log after the deploy", NOW - 3_600_000,
        ("path:/srv/app2.log",),
    )  # fmt: skip
    noise = record(w.agent, 11, "the payments release went out fine", NOW - 7_200_000, ())
    await w.memory.commit(WriteBatch(records=(*cluster, walk_seed, noise)))
    w.sources = tuple(r.id for r in cluster)
    w.walk_seed = walk_seed.id


@pytest.fixture(params=["redis", "memory"])
async def world(request: pytest.FixtureRequest) -> AsyncIterator[World]:
    agent = f"agent-{uuid.uuid4().hex[:8]}"
    if request.param == "memory":
        memory_world = MemoryWorld(agent)
        await seed(memory_world)
        yield memory_world
        return
    settings: Settings = request.getfixturevalue("settings")
    redis = create_redis(settings.redis.url, 8)
    w = RedisWorld(redis, f"cp{uuid.uuid4().hex[:10]}", agent)
    try:
        await w.memory.ensure_schema()
        await seed(w)
        yield w
    finally:
        await drop_deployment(redis, w.prefix)


async def reachable_side(w: World, summary: str) -> str:
    """'sources' or 'summary'; anything else (both, neither, a part) fails."""
    found = set(await w.recall(CLUSTER_QUERY))
    sources = set(w.sources)
    if sources <= found and summary not in found:
        return "sources"
    if summary in found and not sources & found:
        return "summary"
    raise AssertionError(f"cluster half-reachable: {sorted(found)} vs {sorted(sources)}")


CRASH_POINTS = [
    (Phase.PLANNED, "sources", 4),
    (Phase.SUMMARIES_WRITTEN, "sources", 4),
    (Phase.INDEXED, "sources", 4),
    (Phase.FLIPPED, "summary", 4),  # before the outbox drain
    (Phase.OUTBOX_BATCH, "summary", 3),  # midway through dropping the sources
]


@pytest.mark.parametrize(("phase", "side", "vectors"), CRASH_POINTS)
async def test_a_crash_at_any_phase_leaves_one_side_reachable_and_resume_finishes(
    world: World, phase: Phase, side: str, vectors: int
) -> None:
    assert await reachable_side(world, "none-yet") == "sources"
    with pytest.raises(Crash):
        await world.compactor(phase).compact(world.agent, NOW)
    plan = await world.pending_plan()
    (summary,) = (cluster.summary_id for cluster in plan.clusters)
    assert await world.summaries() == ([] if phase is Phase.PLANNED else [summary])
    assert await reachable_side(world, summary) == side
    assert await world.vectors_left() == vectors

    report = await world.compactor().resume(world.agent)
    assert report is not None and report.resumed and report.status == "done"
    assert await world.summaries() == [summary] == list(report.summary_ids)
    # The walk's node table follows the flip: sources point at the summary.
    source = world.memory.recall_source(world.agent)
    ids = [summary, *world.sources]
    nodes, records = await source.nodes(ids), await source.records(ids)
    assert nodes == {i: r.node() for i, r in records.items()} and len(nodes) == len(ids)
    assert {nodes[s].replaced_by for s in world.sources} == {summary}
    assert await reachable_side(world, summary) == "summary"
    assert await world.vectors_left() == 0
    assert await world.compactor().resume(world.agent) is None
    for source_id in world.sources:
        assert (await world.tombstone(source_id))["summary_id"] == summary
    again = await world.compactor().compact(world.agent, NOW + DAY_MS)
    assert again.status == "empty" and await world.summaries() == [summary]


async def test_next_compact_finishes_a_crashed_plan_even_after_a_second_crash(
    world: World,
) -> None:
    with pytest.raises(Crash):
        await world.compactor(Phase.SUMMARIES_WRITTEN).compact(world.agent, NOW)
    with pytest.raises(Crash):  # the resume itself crashes, mid drain
        await world.compactor(Phase.OUTBOX_BATCH).compact(world.agent, NOW)
    (summary,) = await world.summaries()
    assert await reachable_side(world, summary) == "summary"
    report = await world.compactor().compact(world.agent, NOW)
    assert report.status == "empty" and report.finished_pending
    assert await world.summaries() == [summary]
    assert await world.vectors_left() == 0


async def test_summary_record_and_walk_through_a_source_key(world: World) -> None:
    before = await world.recall(WALK_QUERY, lane_k=1)
    assert world.walk_seed in before and "walk" in before[world.sources[2]]

    report = await world.compactor().compact(world.agent, NOW)
    (summary,) = report.summary_ids
    fields = await world.fields(summary)
    assert fields["kind"] == "summary" and fields["deleted"] == "0"
    assert "compaction_pending" not in fields
    assert fields["source_ids"].split("|") == sorted(world.sources)
    assert fields["nexus_keys"] == "err:oom"  # max_rolled_keys=1: paths not kept
    assert set(fields["tags"].split("|")) >= {"topic/gc", "src/system", "ops/memory"}
    # The summary holds no path key, yet a walk through the source's path key still
    # lands on it: the source stays in the nexus ZSET and recall follows its link.
    after = await world.recall(WALK_QUERY, lane_k=1)
    assert world.sources[2] not in after
    assert summary in after and "walk" in after[summary]
    assert world.sources[2] in await world.nexus_members("path:/srv/app2.log")


async def test_a_source_quarantined_before_the_flip_is_not_revived_through_the_summary(
    world: World,
) -> None:
    with pytest.raises(Crash):
        await world.compactor(Phase.INDEXED).compact(world.agent, NOW)
    held = world.sources[0]
    await world.quarantine(held)
    report = await world.compactor().resume(world.agent)
    assert report is not None and report.vectors_dropped == 3
    fields = await world.fields(held)
    assert fields["deleted"] == "0" and "replaced_by_summary_id" not in fields
    assert await world.tombstone(held) == {}


async def test_the_candidate_scan_moves_window_by_window_jumps_gaps_and_wraps(
    world: World,
) -> None:
    """Each pass reads one window of history from a persisted cursor (so a pass
    costs what a window holds, not what the agent stores)."""
    later = [
        record(world.agent, 20 + n, f"disk quota exceeded on volume {n}", T0 + 9 * DAY_MS + n,
               ("err:quota",))
        for n in range(3)
    ]  # fmt: skip
    await world.memory.commit(WriteBatch(records=tuple(later)))
    compactor = world.compactor()

    first = await compactor.compact(world.agent, NOW)
    assert first.status == "done" and first.sources == 4  # the T0 window only
    assert await world.cursor() == T0 + DAY_MS

    second = await compactor.compact(world.agent, NOW)  # jumps the 8-day gap
    assert second.status == "done" and second.sources == 3
    assert await world.cursor() == T0 + 10 * DAY_MS

    third = await compactor.compact(world.agent, NOW)  # nothing left in range
    assert third.status == "empty"
    assert len(await world.summaries()) == 2
