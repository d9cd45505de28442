"""The retraction cascade over the real Redis stores (no worker): one agent with an
aggregate written by the ingest path, a compaction summary over three sources and
a curated insight (with the playbook heuristic derived from it) over two
evidence episodes; each retracted source by source.

Recall (the RecallHandler on the same Redis store, with a fake embedder) never
returns a retracted memory or a derivative left without a source, a retracted
memory leaves the nexus index, the walk's node table and the term counts, and
the witness callback sees every step.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pytest
from redis.asyncio import Redis

from grimoire.agents.handlers.ingest import IngestHandler
from grimoire.agents.handlers.recall import RecallHandler
from grimoire.agents.handlers.retraction import RetractionHandler
from grimoire.agents.maintenance.compaction_task import CompactionTask
from grimoire.agents.ports import InputMessage, MemorySink
from grimoire.infra.settings import Settings
from grimoire.streams.learn.curator.values import EntryStatus
from grimoire.streams.maintenance.compaction import DAY_MS, CompactionPolicy
from grimoire.streams.model.ids import memory_id
from grimoire.streams.model.lexicon import lexical_form
from grimoire.streams.model.records import EventType, MemoryRecord
from grimoire.streams.trust.retraction import RetractionOp
from grimoire.streams.write.changes import WriteBatch
from grimoire.streams.write.plan import aggregate_id
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.maintenance.compaction_store import RedisCompactionStore
from grimoire.tables.maintenance.curator_store import RedisCuratorStore
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.redis_client import create_redis
from grimoire.tables.trust.derivations import RedisDerivationStore
from grimoire.topics.declarations import TopicNames
from tests.support.embedders import FakeEmbedder
from tests.support.maintenance import compacted_summary
from tests.support.retraction import (
    Witness,
    curate_over,
    demoted_steps,
    retracted_steps,
    swap_record,
)
from tests.support.stored import drop_deployment

pytestmark = pytest.mark.integration

A = "agent-a"
T0 = 1_790_000_000_000 - 1_790_000_000_000 % DAY_MS
NOW = T0 + 30 * DAY_MS
KEYS = ("entity:eth", "entity:usdc", "tag:strategy/eth-dca")
REPEAT = "rpc endpoint timed out on node seven"
OOM = "worker ran out of memory loading batch"
SWAP = "swap eth for usdc attempt"


class NoUsage:
    """Recall's uses go nowhere here: this test is about what recall returns."""

    async def record_usage(self, agent_id: str, usage: Any, source: Any) -> None:
        return None


class World:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self.fake = FakeEmbedder()
        dims = self.fake.dims
        self.store = RedisMemoryStore(redis, prefix, dims)
        self.keys = self.store.keys
        self.compaction = RedisCompactionStore(redis, prefix, dims=dims)
        self.curator = RedisCuratorStore(redis, prefix)
        self.derivations = RedisDerivationStore(redis, prefix, dims=dims)
        self.sink = MemorySink()
        self.topics = TopicNames(prefix)
        self.ingest = IngestHandler(self.store, self.fake, self.sink, self.topics)
        self.recall = RecallHandler(self.store, self.fake, self.sink, self.topics, usage=NoUsage())
        self.witness = Witness()
        self.retraction = RetractionHandler(
            self.derivations, self.fake, self.curator, witness=self.witness
        )

    async def doc(self, memory_id: str) -> dict[str, str]:
        raw = await self.redis.hgetall(self.keys.memory(A, memory_id))
        return {
            text_of(k): text_of(v)
            for k, v in raw.items()
            if text_of(k) not in ("canonical", "eidolon")
        }

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return await self.fake.embed(texts)

    async def recalled(self, query: str) -> list[str]:
        """What recall returns for `query`; none of it retracted or deleted."""
        self.sink.sent.clear()
        request = {
            "agent_id": A,
            "query": query,
            "reply_to": f"{self.prefix}.replies.test",
            "correlation_id": "c-1",
            "as_of": NOW,
            "mode": "full",
            "budgets": {"max_items": 50},
        }
        await self.recall.handle(
            InputMessage(orjson.dumps(request), self.topics.recall_requests, 0, 0)
        )
        (raw,) = self.sink.on(f"{self.prefix}.replies.test")
        reply = orjson.loads(raw)
        assert "error" not in reply, reply
        found = [item["id"] for item in reply["items"]]
        for memory in found:
            doc = await self.doc(memory)
            assert doc.get("retracted") != "1" and doc.get("deleted") == "0", (memory, doc)
        return found

    async def close(self) -> None:
        await drop_deployment(self.redis, self.prefix)


@pytest.fixture
async def world(settings: Settings) -> AsyncIterator[World]:
    made = World(create_redis(settings.redis.url, 8), f"rt{uuid.uuid4().hex[:10]}")
    await made.store.ensure_schema()
    try:
        yield made
    finally:
        await made.close()


def record(world: World, event: str, text: str, ts: int, **fields: Any) -> MemoryRecord:
    return swap_record(world.fake, A, event, text, ts, **fields)


async def aggregated(world: World) -> tuple[str, str]:
    """Three events with one text through the ingest path: the first admitted, the
    other two folded into an aggregate of count 3."""
    for n in range(3):
        event = {"agent_id": A, "ts": NOW - 3 + n, "text": REPEAT, "event_id": f"agg-{n}"}
        payload = orjson.dumps(event)
        await world.ingest.handle(
            EventType.EPISODE, [InputMessage(payload, world.topics.episodes, 0, n)]
        )
    first = memory_id(A, "agg-0", 0, NOW - 3)
    group = aggregate_id(A, first)
    assert (await world.doc(group))["count"] == "3"
    return first, group


async def compacted(world: World) -> tuple[list[str], str]:
    """Three old episodes on one key, folded by compaction into one summary."""
    records = [
        record(world, f"c-{n}", f"{OOM} {n}", T0 + n * 60_000, keys=("err:oom", f"path:/{n}"))
        for n in (1, 2, 3)
    ]
    await world.store.commit(WriteBatch(records=tuple(records)))
    return [r.id for r in records], await compacted_summary(world.compaction, world.embed, A, NOW)


async def curated(world: World) -> tuple[list[str], str, str]:
    """Two episodes, an active insight over both and the playbook heuristic derived
    from the insight, written by one curator cycle."""
    episodes = [record(world, f"ep-{n}", f"{SWAP} {n}", NOW - 20 + n, keys=KEYS) for n in (1, 2)]
    await world.store.commit(WriteBatch(records=tuple(episodes)))
    ids = [r.id for r in episodes]
    insight, heuristic = await curate_over(world.curator, world.fake, A, NOW, tuple(ids))
    return ids, insight.memory_id, heuristic.memory_id


async def test_the_cascade_over_an_aggregate_a_summary_and_an_insight(world: World) -> None:
    first, group = await aggregated(world)
    sources, summary = await compacted(world)
    episodes, insight, heuristic = await curated(world)
    assert {first, group} & set(await world.recalled(REPEAT))  # one copy of a repeated text
    assert summary in await world.recalled(OOM)
    assert heuristic in (await world.curator.get_playbook(A) or "")

    # -- the aggregate: a folded share, its seed's share (its text), then its origin ---
    report = await world.retraction.retract(A, "agg-2", at_ms=NOW)
    assert [(s.op, s.memory_id) for s in report.steps] == [(RetractionOp.REDUCE, group)]
    assert (await world.doc(group))["count"] == "2"
    assert world.witness.ops() == [("retract.aggregate_share", (group,))]

    # agg-1's fold created the aggregate with its text: the aggregate stands on its
    # origin's text from now on.
    report = await world.retraction.retract(A, "agg-1", at_ms=NOW)
    assert [(s.op, s.memory_id) for s in report.steps] == [
        (RetractionOp.REDUCE, group),
        (RetractionOp.REBUILD, group),
    ]
    assert (await world.doc(group))["count"] == "1"
    assert world.witness.ops() == [
        ("retract.aggregate_share", (group,)),
        ("retract.summary_rebuilt", (group,)),
    ]
    await world.retraction.retract(A, "agg-0", at_ms=NOW)
    assert world.witness.ops() == [("retract.memory", (first,)), ("retract.memory", (group,))]
    assert (await world.doc(group))["retracted"] == "1"
    assert not {first, group} & set(await world.recalled(REPEAT))

    # -- the summary: rebuilt from two sources, then retracted --------------------------
    report = await world.retraction.retract(A, "c-1", at_ms=NOW)
    assert [(s.op, s.memory_id) for s in report.steps] == [
        (RetractionOp.RETRACT, sources[0]),
        (RetractionOp.REBUILD, summary),
    ]
    rebuilt = await world.doc(summary)
    assert rebuilt["text"].startswith("Summary of 2 memories on err:oom")
    assert f"{OOM} 1" not in rebuilt["text"] and f"{OOM} 2" in rebuilt["text"]
    assert rebuilt["source_ids"] == "|".join(sorted(sources[1:]))
    assert "path:/1" not in rebuilt["nexus_keys"].split("|")
    stored = await world.redis.hget(world.keys.memory(A, summary), "canonical")
    assert stored == world.fake.vector(rebuilt["text"]).astype(np.float32).tobytes()
    assert world.witness.ops() == [
        ("retract.memory", (sources[0],)),
        ("retract.summary_rebuilt", (summary,)),
    ]
    found = await world.recalled(OOM)
    assert summary in found and sources[0] not in found
    for event in ("c-2", "c-3"):
        await world.retraction.retract(A, event, at_ms=NOW)
    assert world.witness.ops() == [
        ("retract.memory", (sources[1],)),
        ("retract.summary_rebuilt", (summary,)),
        ("retract.memory", (sources[2],)),
        ("retract.memory", (summary,)),
    ]
    assert not {summary, *sources} & set(await world.recalled(OOM))

    # -- the insight: demoted, then retracted with its heuristic ------------------------
    report = await world.retraction.retract(A, "ep-1", at_ms=NOW)
    assert [(s.op, s.memory_id) for s in report.steps] == [
        (RetractionOp.RETRACT, episodes[0]),
        (RetractionOp.DEMOTE, insight),
    ]
    (demoted,) = [e for e in await world.curator.entries(A) if e.memory_id == insight]
    assert demoted.confidence == pytest.approx(0.4) and demoted.status is EntryStatus.DEMOTED
    assert world.witness.ops() == demoted_steps(episodes[0], insight)
    assert heuristic in (await world.curator.get_playbook(A) or "")

    report = await world.retraction.retract(A, "ep-2", at_ms=NOW)
    assert report.retracted == (episodes[1], insight, heuristic)
    assert world.witness.ops() == retracted_steps(episodes[1], insight, heuristic)
    playbook = await world.curator.get_playbook(A) or ""
    assert heuristic not in playbook and "_No heuristics yet._" in playbook
    assert await world.curator.entries(A) == []
    found = await world.recalled("tool swap tends to work prefer")
    assert not {insight, heuristic, *episodes} & set(found)

    # -- nothing is left in the index, and nothing happens twice ------------------------
    assert await world.derivations.derived_from(A, ["agg-0", "c-1", "ep-1", "ep-2"]) == []
    again = await world.retraction.retract(A, "ep-2", at_ms=NOW)
    assert again.steps == () and world.witness.ops() == []


async def test_a_retracted_memory_leaves_the_nexus_nodes_and_term_counts(world: World) -> None:
    text = "disk full on node seven"
    payload = orjson.dumps({"agent_id": A, "ts": NOW, "text": text, "event_id": "d-1"})
    await world.ingest.handle(EventType.EPISODE, [InputMessage(payload, world.topics.episodes)])
    target = memory_id(A, "d-1", 0, NOW)
    keys = (await world.doc(target))["nexus_keys"].split("|")
    terms = lexical_form(text, NOW).terms()
    counts = await world.redis.hmget(world.keys.terms(A), list(terms))
    assert keys and all(int(count) == 1 for count in counts)
    assert await world.redis.hget(world.keys.nodes(A), target) is not None

    await world.retraction.retract(A, "d-1", at_ms=NOW)
    for key in keys:
        assert await world.redis.zscore(world.keys.nexus(A, key), target) is None
    assert await world.redis.hget(world.keys.nodes(A), target) is None
    counts = await world.redis.hmget(world.keys.terms(A), list(terms))
    assert all(int(count) == 0 for count in counts)
    doc = await world.doc(target)
    assert (doc["retracted"], doc["deleted"], doc["retracted_at"]) == ("1", "1", str(NOW))
    assert target not in await world.recalled(text)


async def test_pin_keeps_a_memory_out_of_compaction(world: World) -> None:
    records = [record(world, f"p-{n}", f"{OOM} {n}", T0 + n, keys=("err:oom",)) for n in (1, 2, 3)]
    await world.store.commit(WriteBatch(records=tuple(records)))
    assert await world.retraction.pin(A, records[0].id)
    assert not await world.retraction.pin("agent-b", records[0].id)
    policy = CompactionPolicy(min_age_ms=7 * DAY_MS)
    task = CompactionTask(world.compaction, world.embed, policy)
    assert (await task.compact(A, NOW)).status == "empty"
    assert await world.retraction.unpin(A, records[0].id)
    await world.compaction.set_cursor(A, T0)  # the next sweep of the agent's history
    assert (await task.compact(A, NOW)).status == "done"
    pinned = records[0].id
    assert world.witness.ops() == [("pin.memory", (pinned,)), ("unpin.memory", (pinned,))]
