"""Crash-safe compaction against the real Redis Stack: memories are written by the
store's own write path, recalled by the real recall flow, and the compactor is
made to crash at every phase boundary. At each point recall must reach either
the whole old cluster or its summary, never both and never neither; `resume`
(or the next `compact`) finishes the job without a second summary."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest
from redis.asyncio import Redis

from grimoire.infra.settings import Settings
from grimoire.streams.inbound.recall_request import RecallQuery
from grimoire.streams.maintenance.compaction import DAY_MS, CompactionPlan, CompactionPolicy
from grimoire.streams.model.ids import memory_id
from grimoire.streams.model.records import (
    EventType,
    Kind,
    Layer,
    MemoryCandidate,
    MemoryRecord,
    Provenance,
)
from grimoire.streams.model.text import normalized_hash, search_terms
from grimoire.streams.recall.flow import RecallContext, run_recall
from grimoire.streams.recall.options import RecallBudgets, RetrievalMode
from grimoire.streams.write.changes import WriteBatch
from grimoire.tables.codec.memory_hash import text_of
from grimoire.tables.codec.search_replies import scored_keys
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.compaction_store import decode_plan
from grimoire.tables.maintenance.compactor import Compactor, Phase
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.queries import escape_tag
from grimoire.tables.redis_client import create_redis

pytestmark = pytest.mark.integration

DIMS = 384
T0 = 1_790_000_000_000 - (1_790_000_000_000 % DAY_MS)
NOW = T0 + 30 * DAY_MS
CLUSTER_QUERY = "worker ran out of memory loading batch"
WALK_QUERY = "rotated app2 log after the deploy"
POLICY = CompactionPolicy(min_age_ms=7 * DAY_MS, max_rolled_keys=1)


def bag_of_words(text: str) -> npt.NDArray[np.float32]:
    """Deterministic vectors: texts sharing words point the same way."""
    vector = np.zeros(DIMS, dtype=np.float32)
    for term in search_terms(text):
        vector[int.from_bytes(hashlib.sha256(term.encode()).digest()[:4], "big") % DIMS] += 1
    norm = float(np.linalg.norm(vector))
    if norm == 0:
        vector[0] = 1.0
        return vector
    return vector / norm


async def fake_embed(texts: Sequence[str]) -> npt.NDArray[np.float32]:
    return np.stack([bag_of_words(text) for text in texts]).astype(np.float32)


class Crash(Exception):
    pass


class CrashAt:
    """A checkpoint hook that raises at each listed phase once, in order."""

    def __init__(self, *phases: str) -> None:
        self.pending = list(phases)

    async def __call__(self, phase: str) -> None:
        if self.pending and phase == self.pending[0]:
            self.pending.pop(0)
            raise Crash(phase)


@dataclass
class World:
    redis: Redis
    prefix: str
    store: RedisMemoryStore
    agent: str
    sources: tuple[str, ...]
    walk_seed: str

    def compactor(self, *crash_at: str) -> Compactor:
        return Compactor(
            self.redis, self.prefix, fake_embed, POLICY, CrashAt(*crash_at), outbox_batch=1
        )

    async def recall(self, text: str, lane_k: int = 20) -> dict[str, tuple[str, ...]]:
        vector = (await fake_embed([text]))[0]
        query = RecallQuery(
            agent_id=self.agent,
            query=text,
            reply_to="r",
            correlation_id="c",
            budgets=RecallBudgets(
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
            terms=search_terms(text),
            canonical=vector,
            eidolon=vector,
        )
        outcome = await run_recall(query, ctx, self.store.recall_source(self.agent))
        return {item.record.memory_id: item.lanes for item in outcome.items}

    async def summaries(self) -> list[str]:
        """Every summary document of the agent, hidden or not."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.execute_command(
                "FT.SEARCH", self.store.index_name,
                f"@agent_id:{{{escape_tag(self.agent)}}} @kind:{{summary}}",
                "NOCONTENT", "WITHSCORES", "LIMIT", 0, 100, "DIALECT", 2,
            )  # fmt: skip
            (reply,) = await pipe.execute()
        return sorted(key.rsplit(":", 1)[-1] for key, _ in scored_keys(reply))

    async def pending_plan(self) -> CompactionPlan:
        keys = Keyspace(self.prefix)
        plan_id = text_of(await self.redis.get(keys.compaction_pending(self.agent)))
        return decode_plan(await self.redis.hget(keys.compaction_plan(self.agent, plan_id), "plan"))

    async def vectors_left(self) -> int:
        async with self.redis.pipeline(transaction=False) as pipe:
            for source in self.sources:
                pipe.hexists(self.store.key(source), "canonical")
            return sum(bool(found) for found in await pipe.execute())


def record(agent: str, n: int, text: str, ts: int, keys: tuple[str, ...]) -> MemoryRecord:
    vector = bag_of_words(text).tobytes()
    candidate = MemoryCandidate(
        id=memory_id(agent, f"ev-{n}", 0, ts),
        agent_id=agent,
        kind=Kind.EPISODE,
        layer=Layer.OBSERVATION,
        text=text,
        ts_ms=ts,
        provenance=Provenance(f"ev-{n}", EventType.EPISODE.value, session_id="s-1"),
        normalized_hash=normalized_hash(text),
        tags=("ops/memory",),
        keys=keys,
    )
    return MemoryRecord(candidate=candidate, canonical=vector, eidolon=vector, quality=0.4)


@pytest.fixture
async def world(settings: Settings) -> AsyncIterator[World]:
    redis = create_redis(settings.redis_url, 8)
    prefix = f"cp{uuid.uuid4().hex[:10]}"
    agent = f"agent-{uuid.uuid4().hex[:8]}"
    store = RedisMemoryStore(redis, prefix=prefix, dims=DIMS)
    await store.ensure_schema()
    cluster = [
        record(agent, n, f"worker ran out of memory while loading batch {n}", T0 + n * 60_000,
               ("err:oom", f"path:/srv/app{n}.log"))
        for n in range(4)
    ]  # fmt: skip
    seed = record(
        agent, 10, "rotated /srv/app2.log after the deploy", NOW - 3_600_000,
        ("path:/srv/app2.log",),
    )  # fmt: skip
    noise = record(agent, 11, "the payments release went out fine", NOW - 7_200_000, ())
    await store.commit(WriteBatch(records=(*cluster, seed, noise)))
    try:
        yield World(redis, prefix, store, agent, tuple(r.id for r in cluster), seed.id)
    finally:
        try:
            await redis.execute_command("FT.DROPINDEX", store.index_name, "DD")
            keys = [key async for key in redis.scan_iter(match=f"{prefix}:*")]
            if keys:
                await redis.delete(*keys)
        finally:
            await redis.aclose()
            await redis.connection_pool.disconnect()


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
    source = world.store.recall_source(world.agent)
    ids = [summary, *world.sources]
    nodes, records = await source.nodes(ids), await source.records(ids)
    assert nodes == {i: r.node() for i, r in records.items()} and len(nodes) == len(ids)
    assert {nodes[s].replaced_by for s in world.sources} == {summary}
    assert await reachable_side(world, summary) == "summary"
    assert await world.vectors_left() == 0
    assert await world.compactor().resume(world.agent) is None
    for source in world.sources:
        tomb = await world.redis.hgetall(f"{world.prefix}:tomb:{source}")
        assert text_of(tomb[b"summary_id"]) == summary
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
    fields = {
        text_of(k): v
        for k, v in (await world.redis.hgetall(world.store.key(summary))).items()
        if k not in (b"canonical", b"eidolon")
    }
    assert text_of(fields["kind"]) == "summary" and text_of(fields["deleted"]) == "0"
    assert "compaction_pending" not in fields
    assert text_of(fields["source_ids"]).split("|") == sorted(world.sources)
    assert text_of(fields["nexus_keys"]) == "err:oom"  # max_rolled_keys=1: paths not kept
    assert set(text_of(fields["tags"]).split("|")) >= {"topic/gc", "src/system", "ops/memory"}
    # The summary holds no path key, yet a walk through the source's path key still
    # lands on it: the source stays in the nexus ZSET and recall follows its link.
    after = await world.recall(WALK_QUERY, lane_k=1)
    assert world.sources[2] not in after
    assert summary in after and "walk" in after[summary]
    nexus = f"{world.prefix}:nexus:{world.agent}:path:/srv/app2.log"
    members = await world.redis.zrange(nexus, 0, -1)
    assert world.sources[2].encode() in members


async def test_a_source_quarantined_before_the_flip_is_not_revived_through_the_summary(
    world: World,
) -> None:
    with pytest.raises(Crash):
        await world.compactor(Phase.INDEXED).compact(world.agent, NOW)
    held = world.sources[0]
    await world.redis.hset(world.store.key(held), "quarantined", "1")
    report = await world.compactor().resume(world.agent)
    assert report is not None and report.vectors_dropped == 3
    fields = await world.redis.hmget(world.store.key(held), ["deleted", "replaced_by_summary_id"])
    assert fields == [b"0", None]
    assert not await world.redis.exists(f"{world.prefix}:tomb:{held}")


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
    await world.store.commit(WriteBatch(records=tuple(later)))
    compactor = world.compactor()
    keys = Keyspace(world.prefix)

    first = await compactor.compact(world.agent, NOW)
    assert first.status == "done" and first.sources == 4  # the T0 window only
    assert int(await world.redis.get(keys.compaction_cursor(world.agent))) == T0 + DAY_MS

    second = await compactor.compact(world.agent, NOW)  # jumps the 8-day gap
    assert second.status == "done" and second.sources == 3
    assert int(await world.redis.get(keys.compaction_cursor(world.agent))) == T0 + 10 * DAY_MS

    third = await compactor.compact(world.agent, NOW)  # nothing left in range
    assert third.status == "empty"
    assert len(await world.summaries()) == 2
