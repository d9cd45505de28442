"""The decay schedule against the real Redis: passes touch only due memories, write
the read-time value to the unindexed snapshot hash, and reschedule or drop them."""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis
from redisvl.index import AsyncSearchIndex

from grimoire.infra.settings import Settings
from grimoire.streams.maintenance.decay_pass import DecayReport
from grimoire.streams.model.decay import DAY_MS, HOUR_MS
from grimoire.tables.codec.memory_hash import text_of
from grimoire.tables.codec.recall_record import decode_record, with_usage
from grimoire.tables.maintenance.decay_index import DecayIndex
from grimoire.tables.schema.memory_index import memory_schema

pytestmark = pytest.mark.integration

T0 = 1_790_000_000_000
H48 = 48 * HOUR_MS


@pytest.fixture
def prefix(settings: Settings) -> str:
    return f"{settings.topic_prefix}dk{uuid.uuid4().hex[:6]}"


@pytest.fixture
def agent() -> str:
    return f"agent-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def decay(redis_client: Redis, prefix: str) -> AsyncIterator[DecayIndex]:
    yield DecayIndex(redis_client, prefix)
    keys = [key async for key in redis_client.scan_iter(match=f"{prefix}:*", count=1000)]
    if keys:
        await redis_client.delete(*keys)


def fields(memory_id: str, agent_id: str, **overrides: Any) -> dict[str, Any]:
    """A memory hash as record_codec.hash_fields lays it out (no vectors needed here)."""
    base: dict[str, Any] = {
        "memory_id": memory_id,
        "agent_id": agent_id,
        "kind": "episode",
        "layer": "observation",
        "text": f"memory {memory_id}",
        "ts": T0,
        "last_accessed": T0,
        "confidence": 0.8,
        "quality": 0.5,
        "strength": 1.0,
        "provenance": "self",
        "deleted": "0",
        "archived": "0",
        "quarantined": "0",
    }
    base.update(overrides)
    return base


async def write(redis: Redis, decay: DecayIndex, *docs: dict[str, Any]) -> None:
    async with redis.pipeline(transaction=False) as pipe:
        for doc in docs:
            pipe.hset(decay.keys.memory(doc["memory_id"]), mapping=doc)
            decay.schedule_new(pipe, doc)
        await pipe.execute()


async def schedule(redis: Redis, decay: DecayIndex, agent: str) -> dict[str, float]:
    rows = await redis.zrange(decay.keys.decay_schedule(agent), 0, -1, withscores=True)
    return {text_of(member): score for member, score in rows}


async def snapshot(redis: Redis, decay: DecayIndex, memory_id: str) -> dict[str, str]:
    raw = await redis.hgetall(decay.keys.decayed(memory_id))
    return {text_of(k): text_of(v) for k, v in raw.items()}


async def read_time_value(
    redis: Redis, decay: DecayIndex, agent: str, memory_id: str, now_ms: int
) -> float:
    """What recall computes for this memory at `now_ms`, through recall's own decoder."""
    doc = {text_of(k): v for k, v in (await redis.hgetall(decay.keys.memory(memory_id))).items()}
    use = {text_of(k): v for k, v in (await redis.hgetall(decay.keys.usage(memory_id))).items()}
    record = decode_record(with_usage(doc, use), agent, 384)
    assert record is not None
    return record.effective_confidence(now_ms)


async def test_passes_touch_only_due_entries(
    redis_client: Redis, decay: DecayIndex, agent: str
) -> None:
    await write(
        redis_client,
        decay,
        fields("ep", agent),
        fields("warn", agent, kind="warning"),
        fields("rock", agent, decay_class="structural"),
        fields("heur", agent, kind="heuristic", confidence=0.3, quality=0.2),
    )
    due = await schedule(redis_client, decay, agent)
    # Structural never comes due; the rest at their first band crossing.
    assert set(due) == {"ep", "warn", "heur"}
    assert due["ep"] == T0 + H48 + 1
    assert due["warn"] == T0 + 30 * DAY_MS + 1
    # 0.3 → below 0.1 at a 7 d half-life (14 d halved for quality 0.2): 7 d · log2(3).
    assert abs(due["heur"] - (T0 + 7 * DAY_MS * math.log2(3))) <= 1

    assert await decay.run_pass(agent, T0 + H48) == DecayReport(0, 0.0, 0.0)
    assert await snapshot(redis_client, decay, "ep") == {}

    now = T0 + H48 + 1
    report = await decay.run_pass(agent, now)
    ep_after = await read_time_value(redis_client, decay, agent, "ep", now)
    assert report == DecayReport(1, 0.8, ep_after)
    snap = await snapshot(redis_client, decay, "ep")
    assert float(snap["effective"]) == ep_after
    assert snap == {"effective": repr(ep_after), "band": "1", "as_of": str(now)}
    assert (await schedule(redis_client, decay, agent))["ep"] == T0 + 3 * H48 + 1
    for untouched in ("warn", "heur", "rock"):
        assert await snapshot(redis_client, decay, untouched) == {}

    # Far later: the episode reaches the floor (never due again), the heuristic
    # (0.3, low quality: 7 d half-life) leaves its band; the warning is not due yet.
    later = T0 + 12 * DAY_MS
    report = await decay.run_pass(agent, later)
    ep_now = await read_time_value(redis_client, decay, agent, "ep", later)
    heur_now = await read_time_value(redis_client, decay, agent, "heur", later)
    assert ep_now == 0.05
    assert report.entries_decayed == 2
    assert report.avg_before == pytest.approx((ep_after + 0.3) / 2)
    assert report.avg_after == pytest.approx((ep_now + heur_now) / 2)
    assert float((await snapshot(redis_client, decay, "heur"))["effective"]) == heur_now
    after = await schedule(redis_client, decay, agent)
    assert set(after) == {"warn", "heur"}
    assert await snapshot(redis_client, decay, "warn") == {}

    warn_at = T0 + 30 * DAY_MS + 1
    report = await decay.run_pass(agent, warn_at)
    # The heuristic reached the floor at 7 d · log2(0.3 / 0.05) ≈ 18.1 d.
    assert report.entries_decayed == 2
    warn_now = await read_time_value(redis_client, decay, agent, "warn", warn_at)
    assert float((await snapshot(redis_client, decay, "warn"))["effective"]) == warn_now
    assert (await snapshot(redis_client, decay, "heur"))["band"] == "3"
    assert report.avg_after == pytest.approx((warn_now + 0.05) / 2)
    assert set(await schedule(redis_client, decay, agent)) == {"warn"}


async def test_usage_hash_moves_the_origin_and_reschedule_follows(
    redis_client: Redis, decay: DecayIndex, agent: str
) -> None:
    await write(redis_client, decay, fields("ep", agent))
    # Included in a recall a day later: the usage hash (not the memory) holds it.
    await redis_client.hset(decay.keys.usage("ep"), mapping={"last_accessed": T0 + DAY_MS})
    await decay.reschedule(agent, ["ep"], T0 + DAY_MS)
    assert (await schedule(redis_client, decay, agent))["ep"] == T0 + DAY_MS + H48 + 1

    now = T0 + DAY_MS + H48 + 1
    assert (await decay.run_pass(agent, now)).entries_decayed == 1
    value = await read_time_value(redis_client, decay, agent, "ep", now)
    assert float((await snapshot(redis_client, decay, "ep"))["effective"]) == value

    # A positive outcome raises confidence and resets the origin: back in band 0,
    # so the snapshot is stale and the memory is due at once.
    outcome_at = now + HOUR_MS
    await redis_client.hset(decay.keys.memory("ep"), mapping={"confidence": 0.9})
    await redis_client.hset(decay.keys.usage("ep"), mapping={"last_accessed": outcome_at})
    await decay.reschedule(agent, ["ep"], outcome_at)
    assert (await schedule(redis_client, decay, agent))["ep"] == outcome_at
    report = await decay.run_pass(agent, outcome_at)
    assert report == DecayReport(1, value, 0.9)
    assert (await snapshot(redis_client, decay, "ep"))["band"] == "0"


async def test_deleted_missing_and_foreign_entries_leave_the_schedule(
    redis_client: Redis, decay: DecayIndex, agent: str
) -> None:
    await write(
        redis_client,
        decay,
        fields("gone", agent),
        fields("archived", agent),
        fields("compacted", agent),
        fields("odd", agent, decay_class="geological"),
    )
    async with redis_client.pipeline(transaction=False) as pipe:
        decay.schedule(pipe, agent, "missing", T0)
        decay.schedule(pipe, agent, "odd", T0)  # unknown class: schedule_new skipped it
        decay.schedule(pipe, agent, "foreign", T0)
        await pipe.execute()
    await redis_client.hset(decay.keys.memory("foreign"), mapping=fields("foreign", "someone-else"))
    await redis_client.hset(decay.keys.memory("gone"), "deleted", "1")
    await redis_client.hset(decay.keys.memory("archived"), "archived", "1")
    await redis_client.hset(decay.keys.memory("compacted"), "replaced_by_summary_id", "sum-1")
    assert len(await schedule(redis_client, decay, agent)) == 6

    report = await decay.run_pass(agent, T0 + 3 * DAY_MS)
    assert report == DecayReport(0, 0.0, 0.0)
    assert await schedule(redis_client, decay, agent) == {}
    assert await snapshot(redis_client, decay, "foreign") == {}

    # Rescheduling another agent's memory never adds it to this agent's schedule.
    await decay.reschedule(agent, ["foreign", "missing"], T0)
    assert await schedule(redis_client, decay, agent) == {}


async def test_pass_budget_leaves_the_rest_due(
    redis_client: Redis, decay: DecayIndex, agent: str
) -> None:
    # Many memories that are not due, a few that are: the pass sees only the few.
    quiet = [fields(f"q{i:04d}", agent, kind="warning", ts=T0 + i, last_accessed=T0 + i)
             for i in range(2000)]  # fmt: skip
    due = [fields(f"d{i}", agent, ts=T0 - i, last_accessed=T0 - i) for i in range(5)]
    await write(redis_client, decay, *quiet, *due)
    now = T0 + H48 + 1

    first = await decay.plan_pass(agent, now, limit=2)
    # Oldest due first: d4 (earliest origin) then d3.
    assert [u.memory_id for u in first.updates] == ["d4", "d3"]
    second = await decay.plan_pass(agent, now, limit=10)
    assert [u.memory_id for u in second.updates] == ["d2", "d1", "d0"]
    assert (await decay.run_pass(agent, now, limit=10)).entries_decayed == 0
    for update in (*first.updates, *second.updates):
        value = await read_time_value(redis_client, decay, agent, update.memory_id, now)
        assert update.effective_after == value
    assert len(await schedule(redis_client, decay, agent)) == 2005


async def test_seed_schedules_existing_memories(
    redis_client: Redis, decay: DecayIndex, agent: str, prefix: str
) -> None:
    index = AsyncSearchIndex(memory_schema(prefix), redis_client=redis_client)
    await index.create(overwrite=True)
    try:
        docs = [
            fields("old", agent, ts=T0 - 10 * DAY_MS, last_accessed=T0 - 10 * DAY_MS),
            fields("fresh", agent),
            fields("rock", agent, decay_class="structural"),
            fields("dead", agent, deleted="1"),
            fields("theirs", "another-agent"),
        ]
        docs += [fields(f"bulk{i}", agent, kind="insight") for i in range(25)]
        async with redis_client.pipeline(transaction=False) as pipe:
            for doc in docs:  # written before the schedule existed: no schedule_new
                pipe.hset(decay.keys.memory(doc["memory_id"]), mapping=doc)
            await pipe.execute()
        assert await schedule(redis_client, decay, agent) == {}

        now = T0 + HOUR_MS
        assert await decay.ensure_seeded(agent, now) == 27
        assert await decay.ensure_seeded(agent, now) is None  # once per agent
        assert await decay.seed(agent, now, batch=7) == 27  # idempotent upserts
        due = await schedule(redis_client, decay, agent)
        assert set(due) == {"old", "fresh", *(f"bulk{i}" for i in range(25))}
        assert due["old"] == now  # its band already changed: due at once
        assert due["fresh"] == T0 + H48 + 1
        assert due["bulk0"] == T0 + 7 * DAY_MS + 1

        report = await decay.run_pass(agent, now)
        old_now = await read_time_value(redis_client, decay, agent, "old", now)
        assert report == DecayReport(1, 0.8, old_now)
    finally:
        await index.delete(drop=False)
