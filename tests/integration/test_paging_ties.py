"""Folds that read a capped, sorted set of memories pick the same memories on a
replay when hundreds of them share one event time (issue 34), against the real
Redis (and, for the journal replay, the real broker and a worker).

RediSearch sorts by one field: memories sharing a `ts` come back in its internal
document order, the order their hashes were last written, or the order a rebuilt
index scanned the keyspace in (a Redis restart re-indexes everything it loads).
A replay into an empty Redis writes them in journal order instead. A capped read
that cut a tie in the index's order (compaction's candidate page, the curator's
episode cap) then took other memories than the first fold did, and planned
other clusters and insights.

Each test folds once with the index rebuilt between the writes and the
maintenance (checking that the tied memories' index order did change), wipes the
memory state and folds again without it; the digests must be the same.

- in-process, through the stores and runners the worker wires: 650 episodes at
  one instant under a curator capped at 300 episodes and a compaction page of
  250 candidates, both caps inside the tie;
- through the broker, a worker and `grimoire replay`: 1,060 episodes at one
  instant, the rebuild between them and the maintenance command, compaction's
  page of 1,000 candidates inside the tie.

And the list of an agent's memories the digest, the export and forget read finds
them all past the 10,000 a search returns (its offsets stopped there).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from redis.asyncio import Redis

from grimoire.agents.maintenance.compaction_task import (
    CompactionOptions,
    CompactionRunner,
    CompactionTask,
)
from grimoire.agents.maintenance.curator_task import CuratorRunner
from grimoire.infra.settings import Settings
from grimoire.streams.maintenance.compaction import CompactionBudget, CompactionPolicy
from grimoire.streams.maintenance.schedule import MaintenancePlan, Pressure, Task
from grimoire.streams.model.decay import DAY_MS
from grimoire.streams.model.records import Layer, MemoryRecord
from grimoire.streams.write.changes import WriteBatch
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.search_replies import nocontent_keys
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.compaction_store import RedisCompactionStore
from grimoire.tables.maintenance.curator_store import RedisCuratorStore
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.memory.wipe import wipe_memory_state
from grimoire.tables.ordered_search import MAX_SAME_TIME
from grimoire.tables.queries import tenant_filter
from grimoire.tables.routing import SearchRouting
from grimoire.tables.trust.agent_keys import agent_memory_ids
from grimoire.tables.trust.digest import agent_digest
from grimoire.topics.schemas import EpisodeV1
from tests.support.builders import memory_candidate, memory_record
from tests.support.contract import scratch_redis
from tests.support.embedders import TextSeededEmbedder
from tests.support.rebuild import replay_journal, stop_and_wipe
from tests.support.stored import drop_deployment, settled_digests
from tests.support.workers import client_for, prefixed_settings, workers_fixture

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

A = "agent-ties"
# Noon, so the earlier memories and the tie fall in one day's compaction bucket.
T = 1_790_000_000_000 - 1_790_000_000_000 % DAY_MS + DAY_MS // 2
MINUTE = 60_000


# ---- shared ------------------------------------------------------------------------


async def tie_order(redis: Redis, prefix: str, agent: str, ts: int) -> list[str]:
    """The agent's memories at `ts` in the index's own order (no SORTBY)."""
    target = await SearchRouting(redis, prefix).target(agent)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.execute_command(
            "FT.SEARCH", target.index, f"{tenant_filter(agent)} @ts:[{ts} {ts}]",
            "NOCONTENT", "LIMIT", 0, 10_000, "DIALECT", 2, **target.options,
        )  # fmt: skip
        (reply,) = await pipe.execute()
    return nocontent_keys(reply)


async def rebuild_index(redis: Redis, prefix: str, dims: int, agent: str) -> None:
    """What a Redis restart does to the index: built afresh from the keyspace, in
    the order the keys are scanned, not the order they were written. Checked: the
    tied memories' index order changed (else the fold could not tell)."""
    before = await tie_order(redis, prefix, agent, T)
    for target in await SearchRouting(redis, prefix).every_master():
        await redis.execute_command("FT.DROPINDEX", target.index, **target.options)  # keeps docs
    await RedisMemoryStore(redis, prefix, dims).ensure_schema()  # waits for the scan
    after = await tie_order(redis, prefix, agent, T)
    assert sorted(after) == sorted(before) and len(before) >= 600
    assert after != before, "the rebuilt index kept the write order"


async def compacted(redis: Redis, prefix: str, agent: str) -> list[tuple[str, str]]:
    """(source id, summary id) of every memory compaction replaced."""
    keys = Keyspace(prefix)
    found = [
        keys.memory_id_of(k)
        async for k in redis.scan_iter(match=keys.agent_memory_pattern(agent), count=1000)
    ]
    async with redis.pipeline(transaction=False) as pipe:
        for memory in found:
            pipe.hget(keys.memory(agent, memory), "replaced_by_summary_id")
        summaries = await pipe.execute()
    return sorted(
        (memory, text_of(summary))
        for memory, summary in zip(found, summaries, strict=True)
        if summary
    )


# ---- in-process: the stores and runners the worker wires --------------------------

DIMS = 8
TIED = 650
EARLIER = 20
MAX_EPISODES = 300  # the curator's cap: 20 earlier + 280 of the tie
MAX_CANDIDATES = 250  # compaction's page: 20 earlier + 230 of the tie
NOW = T + 2 * DAY_MS
POLICY = CompactionPolicy(min_age_ms=DAY_MS)


EMBEDDER = TextSeededEmbedder(DIMS)
vector = EMBEDDER.vector
embed_bytes = EMBEDDER.embed_bytes
embed_array = EMBEDDER.embed_array


def episode(n: int, ts: int) -> MemoryRecord:
    """Three situations (the venue), successes and failures in each."""
    text = f"swap {n} on venue {n % 3} filled after {n % 7} retries"
    candidate = memory_candidate(
        A,
        f"ev-{n}",
        text,
        ts=ts,
        layer=Layer.ACTION,
        tool="swap",
        tick=1,
        keys=("tool:swap", f"entity:venue-{n % 3}"),
        outcome="success" if n % 5 else "failure",
    )
    return memory_record(candidate, vector(text), quality=0.5)


def records() -> tuple[MemoryRecord, ...]:
    earlier = [episode(n, T - (EARLIER - n) * MINUTE) for n in range(EARLIER)]
    return (*earlier, *(episode(EARLIER + n, T) for n in range(TIED)))


def first_by_time_then_id(count: int) -> list[str]:
    return [r.id for r in sorted(records(), key=lambda r: (r.candidate.ts_ms, r.id))][:count]


@dataclass
class Deployment:
    redis: Redis
    prefix: str

    async def fold(self, *, rebuild: bool) -> str:
        """Write the episodes, then (after an index rebuild if asked) a curator cycle
        and a compaction pass as the maintenance handler runs them; the digest."""
        memory = RedisMemoryStore(self.redis, self.prefix, DIMS)
        await memory.ensure_schema()
        await memory.commit(WriteBatch(records=records()))
        if rebuild:
            await rebuild_index(self.redis, self.prefix, DIMS, A)
        curator = RedisCuratorStore(self.redis, self.prefix, max_episodes=MAX_EPISODES)
        episodes = await curator.episodes_since(A, -1)
        assert [e.memory_id for e in episodes] == first_by_time_then_id(MAX_EPISODES)
        report = await CuratorRunner(curator, embed_bytes, memory.decay.reschedule).run_cycle(
            A, NOW, 1
        )
        assert report.proposed >= 3
        # Compaction's candidates: the first of the episodes and the new entries.
        live = [(r.candidate.ts_ms, r.id) for r in records()]
        live += [(e.ts_ms, e.memory_id) for e in await curator.entries(A)]
        candidates = {memory for _, memory in sorted(live)[:MAX_CANDIDATES]}
        task = CompactionTask(
            RedisCompactionStore(self.redis, self.prefix, dims=DIMS),
            embed_array,
            POLICY,
            CompactionOptions(max_candidates=MAX_CANDIDATES),
        )
        plan = MaintenancePlan(A, 60, NOW, Pressure.NORMAL, (Task.COMPACTION,), (), 1)
        result = await CompactionRunner(task, memory.decay, CompactionBudget(max_clusters=8))(plan)
        assert result["status"] == "done" and int(result["sources"]) > 0
        assert {s for s, _ in await compacted(self.redis, self.prefix, A)} <= candidates
        return (await agent_digest(self.redis, self.prefix, A)).sha256


@pytest.fixture
async def deployment(settings: Settings) -> AsyncIterator[Deployment]:
    async with scratch_redis(settings, "pt", connections=8, cleanup=drop_deployment) as scratch:
        yield Deployment(*scratch)


async def test_capped_folds_over_one_instant_pick_the_same_memories_after_a_rebuild(
    deployment: Deployment,
) -> None:
    first = await deployment.fold(rebuild=True)
    compacted_first = await compacted(deployment.redis, deployment.prefix, A)
    assert await wipe_memory_state(deployment.redis, deployment.prefix) > 0
    again = await deployment.fold(rebuild=False)
    assert await compacted(deployment.redis, deployment.prefix, A) == compacted_first
    assert again == first


async def test_every_memory_of_an_agent_past_what_one_search_returns_is_found(
    deployment: Deployment,
) -> None:
    """The digest's (and the export's and forget's) list of an agent's memories:
    LIMIT offsets stopped at MAXSEARCHRESULTS (10,000), and the read failed."""
    redis, keys = deployment.redis, Keyspace(deployment.prefix)
    await RedisMemoryStore(redis, deployment.prefix, DIMS).ensure_schema()
    count = MAX_SAME_TIME + 500
    ids = [f"m-{n:05d}" for n in range(count)]
    async with redis.pipeline(transaction=False) as pipe:
        for n, memory in enumerate(ids):  # half of them at one instant
            ts = T if n % 2 else T + n
            pipe.hset(
                keys.memory(A, memory), mapping={"agent_id": A, "memory_id": memory, "ts": ts}
            )
        pipe.hset(keys.memory(A, "untimed"), mapping={"agent_id": A, "memory_id": "untimed"})
        pipe.hset(keys.memory("other", "m-other"), mapping={"agent_id": "other", "ts": T})
        await pipe.execute()
    found = await agent_memory_ids(redis, deployment.prefix, A)
    assert found == sorted([*ids, "untimed"])


# ---- through the journal: broker, worker, `grimoire replay` -----------------------

JOURNAL_TIED = 1_060  # compaction's page is 1,000 candidates: 30 earlier + 970 of these
JOURNAL_EARLIER = 30
NOUNS = (
    "bridge", "relayer", "oracle", "vault", "pool", "router", "sequencer", "validator", "mempool",
    "bundler", "keeper", "auction", "ledger", "indexer", "gateway", "cache", "shard", "replica",
    "queue", "cron",
)  # fmt: skip
VERBS = (
    "stalled", "drifted", "spiked", "reverted", "throttled", "forked", "lagged", "halted",
    "rebalanced", "drained", "flooded", "jammed", "cooled", "restarted", "expired",
)  # fmt: skip
PLACES = (
    "Frankfurt", "Virginia", "Mumbai", "Stockholm", "Oregon", "Dublin", "Tokyo", "Lagos",
    "Santiago", "Sydney", "Toronto", "Warsaw", "Seoul", "Cairo", "Lima",
)  # fmt: skip
THINGS = (
    "gas", "fees", "slippage", "latency", "liquidity", "collateral", "margin", "spread", "volume",
    "nonce", "gap", "backlog", "depth", "skew", "funding",
)  # fmt: skip


def incident(n: int) -> str:
    """Distinct enough that admission merges next to none of them (cosine <= 0.9)."""
    pick = np.random.default_rng(n).integers(0, 1 << 30, size=6)
    return (
        f"{NOUNS[pick[0] % len(NOUNS)]} {VERBS[pick[1] % len(VERBS)]} in "
        f"{PLACES[pick[2] % len(PLACES)]} while {THINGS[pick[3] % len(THINGS)]} hit "
        f"{10 + pick[4] % 99_990} and the {NOUNS[pick[5] % len(NOUNS)]} "
        f"{VERBS[(pick[5] // 7) % len(VERBS)]}"
    )


def incident_event(agent: str, n: int, ts: int, tick: int) -> EpisodeV1:
    """An alert: admitted whatever its words (a plain observation may be rejected)."""
    return EpisodeV1(
        agent_id=agent, ts=ts, tick=tick, event_id=f"incident-{n}", text=incident(n),
        episode_type="alert", importance=0.8, tags=["ops/incident", f"shift/{n % 4}"],
        outcome="success" if n % 3 else "failure",
    )  # fmt: skip


@pytest.fixture(scope="module")
def tie_settings(settings: Settings) -> Settings:
    # Maintenance by the command the test sends alone.
    return prefixed_settings(
        settings, "pt", timer=False, maintenance_enabled=True, maintenance_compaction_min_age_h=0.0
    )


tie_workers = workers_fixture("tie_workers", main="tie_settings")


async def test_a_journal_replay_over_one_instant_compacts_the_same_memories(
    tie_settings: Settings, tie_workers: dict[str, Any], eventually: Any
) -> None:
    agent = f"ties-{uuid.uuid4().hex[:6]}"
    prefix = tie_settings.broker.topic_prefix
    keys = Keyspace(prefix)
    redis = Redis.from_url(tie_settings.redis.url)

    async def decided(count: int) -> None:
        async def done() -> bool:
            return int(await redis.hlen(keys.decided(agent))) >= count

        await eventually(done, timeout=120, interval=0.2)

    try:
        events = [
            incident_event(agent, n, T - (JOURNAL_EARLIER - n) * MINUTE, 1)
            for n in range(JOURNAL_EARLIER)
        ]
        events += [
            incident_event(agent, n, T, 1)
            for n in range(JOURNAL_EARLIER, JOURNAL_EARLIER + JOURNAL_TIED)
        ]
        async with client_for(tie_settings) as client:
            for start in range(0, len(events), 100):
                batch = events[start : start + 100]
                await asyncio.gather(*(client.publish_episode(e) for e in batch))
            await decided(len(events))
            await rebuild_index(redis, prefix, 384, agent)
            # Tick 50: the curator is due; compaction is asked for.
            await client.publish_episode(incident_event(agent, 5_000, T + 1, 50))
            await decided(len(events) + 1)
            await client.request_maintenance(agent, compact=True)

            async def compacted_some() -> bool:
                return bool(await compacted(redis, prefix, agent))

            await eventually(compacted_some, timeout=120, interval=0.2)
        (before,) = await settled_digests(redis, prefix, [agent], eventually, quiet_s=2.0)
        sources = await compacted(redis, prefix, agent)
        assert len(await tie_order(redis, prefix, agent, T)) > 1_000  # the page cut the tie
        assert await redis.hget(keys.curator(agent), "cycle") == b"1"  # the curator ran

        await stop_and_wipe(redis, tie_settings, tie_workers.pop("main"))
        report = await replay_journal(tie_settings)
        assert report.entries > len(events) and report.dead_lettered == 0
        assert await compacted(redis, prefix, agent) == sources
        assert (await agent_digest(redis, prefix, agent)).sha256 == before
    finally:
        await redis.aclose()
