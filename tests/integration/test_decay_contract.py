"""The DecayStore contract: DecayIndex (real Redis) and InMemoryDecayStore agree.

Every test runs against both stores through the same pass the maintenance task
runs (`agents/maintenance/decay_task.decay_pass`: read what is due, plan it with
the pure planner, apply the plan). Memory hashes are written raw (the fields
`hash_fields` lays out, no vectors), so decay classes and origins can be set
directly: into Redis with HSET, for the in-memory store into a dict table that
reads back as HGETALL would. The write path's scheduling is mirrored by calling
each store's `schedule_new` with the written fields.

Passes touch only due memories, write the read-time value as the snapshot, and
reschedule or drop each entry; seeding schedules memories stored before the
schedule existed, once per agent.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import pytest
from redis.asyncio import Redis

from grimoire.agents.maintenance.decay_task import decay_pass
from grimoire.streams.maintenance.decay_pass import DecayPassPlan, DecayReport
from grimoire.streams.maintenance.schedule import DecayOutlook
from grimoire.streams.model.decay import DAY_MS, HOUR_MS
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.memory_hash import decode_record, with_usage
from grimoire.tables.maintenance.decay_index import DecayIndex, DueDecay
from grimoire.tables.ports.maintenance import DecayStore
from grimoire.tables.testing.decay_store import InMemoryDecayStore
from tests.support.contract import BACKENDS, memory_or_deployment

pytestmark = pytest.mark.integration

T0 = 1_790_000_000_000
H48 = 48 * HOUR_MS
Hash = dict[str, str | bytes]


def fields(memory_id: str, agent_id: str, **overrides: Any) -> dict[str, Any]:
    """A memory hash as memory_hash.hash_fields lays it out (no vectors needed here)."""
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


def _stored(fields: Mapping[str, Any]) -> Hash:
    """Field values as redis-py writes them (repr for numbers)."""
    return {name: v if isinstance(v, str | bytes) else repr(v) for name, v in fields.items()}


# --- the two stores behind one harness ---------------------------------------------------


class Harness:
    name: str
    store: DecayStore

    async def write(
        self, *docs: dict[str, Any], scheduled: bool = True, keep_existing: bool = False
    ) -> None:
        """Store memory hashes; `scheduled` as the write path does (else: data
        from before the schedule existed)."""
        raise NotImplementedError

    async def update(self, memory_id: str, **changes: Any) -> None:
        raise NotImplementedError

    async def touch(self, memory_id: str, last_accessed: int) -> None:
        """The usage hash's last access (recall inclusion, outcomes)."""
        raise NotImplementedError

    async def schedule(self, agent: str, memory_id: str, due: int) -> None:
        raise NotImplementedError

    async def scheduled(self, agent: str) -> dict[str, float]:
        raise NotImplementedError

    async def snapshot(self, memory_id: str) -> dict[str, str]:
        raise NotImplementedError

    async def seed(self, agent: str, now_ms: int) -> int:
        raise NotImplementedError

    async def hashes(self, memory_id: str) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        """The memory hash and the usage hash, as HGETALL returns them."""
        raise NotImplementedError

    async def read_time_value(self, agent: str, memory_id: str, now_ms: int) -> float:
        """What recall computes for this memory at `now_ms`, through recall's decoder."""
        doc, use = await self.hashes(memory_id)
        record = decode_record(with_usage(doc, use), agent, 384)
        assert record is not None
        return record.effective_confidence(now_ms)


class HashTable:
    """Memory and usage hashes in dicts: `MemoryHashes` for the in-memory store."""

    def __init__(self) -> None:
        self.records: dict[str, Hash] = {}
        self.usages: dict[str, Hash] = {}

    def record(self, memory_id: str) -> Hash | None:
        found = self.records.get(memory_id)
        return dict(found) if found is not None else None

    def usage(self, memory_id: str) -> Hash:
        return dict(self.usages.get(memory_id, {}))

    def hashes(self) -> Iterable[Hash]:
        return list(self.records.values())


class MemoryHarness(Harness):
    name = "memory"

    def __init__(self) -> None:
        self.table = HashTable()
        self.decay = InMemoryDecayStore(self.table)
        self.store = self.decay

    async def write(
        self, *docs: dict[str, Any], scheduled: bool = True, keep_existing: bool = False
    ) -> None:
        for doc in docs:
            self.table.records.setdefault(doc["memory_id"], {}).update(_stored(doc))
            if scheduled:
                self.decay.schedule_new(doc, keep_existing=keep_existing)

    async def update(self, memory_id: str, **changes: Any) -> None:
        self.table.records.setdefault(memory_id, {}).update(_stored(changes))

    async def touch(self, memory_id: str, last_accessed: int) -> None:
        self.table.usages.setdefault(memory_id, {})["last_accessed"] = str(last_accessed)

    async def schedule(self, agent: str, memory_id: str, due: int) -> None:
        self.decay.schedule(agent, memory_id, due)

    async def scheduled(self, agent: str) -> dict[str, float]:
        return {memory_id: float(due) for memory_id, due in self.decay.scheduled(agent).items()}

    async def snapshot(self, memory_id: str) -> dict[str, str]:
        return self.decay.snapshot(memory_id)

    async def seed(self, agent: str, now_ms: int) -> int:
        return await self.decay.seed(agent, now_ms)

    async def hashes(self, memory_id: str) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        return self.table.record(memory_id) or {}, self.table.usage(memory_id)


class RedisHarness(Harness):
    name = "redis"

    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self.decay = DecayIndex(redis, prefix)
        self.store = self.decay
        self.keys = self.decay.keys
        # memory id -> its agent: keys name both since the store's format 2, the
        # contract names memories alone (agent "a" for one never written).
        self.owners: dict[str, str] = {}

    def _agent(self, memory_id: str) -> str:
        return self.owners.get(memory_id, "a")

    async def write(
        self, *docs: dict[str, Any], scheduled: bool = True, keep_existing: bool = False
    ) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            for doc in docs:
                self.owners[doc["memory_id"]] = doc["agent_id"]
                pipe.hset(self.keys.memory(doc["agent_id"], doc["memory_id"]), mapping=doc)
                if scheduled:
                    self.decay.schedule_new(pipe, doc, keep_existing=keep_existing)
            await pipe.execute()

    async def update(self, memory_id: str, **changes: Any) -> None:
        await self.redis.hset(self.keys.memory(self._agent(memory_id), memory_id), mapping=changes)

    async def touch(self, memory_id: str, last_accessed: int) -> None:
        await self.redis.hset(
            self.keys.usage(self._agent(memory_id), memory_id),
            mapping={"last_accessed": last_accessed},
        )

    async def schedule(self, agent: str, memory_id: str, due: int) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            self.decay.schedule(pipe, agent, memory_id, due)
            await pipe.execute()

    async def scheduled(self, agent: str) -> dict[str, float]:
        rows = await self.redis.zrange(self.keys.decay_schedule(agent), 0, -1, withscores=True)
        return {text_of(member): score for member, score in rows}

    async def snapshot(self, memory_id: str) -> dict[str, str]:
        raw = await self.redis.hgetall(self.keys.decayed(self._agent(memory_id), memory_id))
        return {text_of(k): text_of(v) for k, v in raw.items()}

    async def seed(self, agent: str, now_ms: int) -> int:
        return await self.decay.seed(agent, now_ms, batch=7)  # several pages

    async def hashes(self, memory_id: str) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        doc = await self.redis.hgetall(self.keys.memory(self._agent(memory_id), memory_id))
        use = await self.redis.hgetall(self.keys.usage(self._agent(memory_id), memory_id))
        return {text_of(k): v for k, v in doc.items()}, {text_of(k): v for k, v in use.items()}


@pytest.fixture(params=BACKENDS)
async def h(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    subject = memory_or_deployment(request, MemoryHarness, RedisHarness, tag="dk", dims=384)
    async with subject as harness:
        yield harness


@pytest.fixture
def agent() -> str:
    return f"agent-{uuid.uuid4().hex[:8]}"


async def run_pass(h: Harness, agent: str, now_ms: int, limit: int = 1000) -> DecayReport:
    return (await decay_pass(h.store, agent, now_ms, limit)).report


async def plan_pass(h: Harness, agent: str, now_ms: int, limit: int) -> DecayPassPlan:
    return await decay_pass(h.store, agent, now_ms, limit)


# --- passes ------------------------------------------------------------------------------


async def test_passes_touch_only_due_entries(h: Harness, agent: str) -> None:
    await h.write(
        fields("ep", agent),
        fields("warn", agent, kind="warning"),
        fields("rock", agent, decay_class="structural"),
        fields("heur", agent, kind="heuristic", confidence=0.3, quality=0.2),
    )
    due = await h.scheduled(agent)
    # Structural never comes due; the rest at their first band crossing.
    assert set(due) == {"ep", "warn", "heur"}
    assert due["ep"] == T0 + H48 + 1
    assert due["warn"] == T0 + 30 * DAY_MS + 1
    # 0.3 → below 0.1 at a 7 d half-life (14 d halved for quality 0.2): 7 d · log2(3).
    assert abs(due["heur"] - (T0 + 7 * DAY_MS * math.log2(3))) <= 1

    assert await h.store.due(agent, T0 + H48, 1000) == DueDecay()
    assert await run_pass(h, agent, T0 + H48) == DecayReport(0, 0.0, 0.0)
    assert await h.snapshot("ep") == {}

    now = T0 + H48 + 1
    due_now = await h.store.due(agent, now, 1000)
    assert [entry.memory_id for entry in due_now.entries] == ["ep"]
    assert due_now.gone == ()
    report = await run_pass(h, agent, now)
    ep_after = await h.read_time_value(agent, "ep", now)
    assert report == DecayReport(1, 0.8, ep_after)
    snap = await h.snapshot("ep")
    assert float(snap["effective"]) == ep_after
    assert snap == {"effective": repr(ep_after), "band": "1", "as_of": str(now)}
    assert (await h.scheduled(agent))["ep"] == T0 + 3 * H48 + 1
    for untouched in ("warn", "heur", "rock"):
        assert await h.snapshot(untouched) == {}

    # Far later: the episode reaches the floor (never due again), the heuristic
    # (0.3, low quality: 7 d half-life) leaves its band; the warning is not due yet.
    later = T0 + 12 * DAY_MS
    report = await run_pass(h, agent, later)
    ep_now = await h.read_time_value(agent, "ep", later)
    heur_now = await h.read_time_value(agent, "heur", later)
    assert ep_now == 0.05
    assert report.entries_decayed == 2
    assert report.avg_before == pytest.approx((ep_after + 0.3) / 2)
    assert report.avg_after == pytest.approx((ep_now + heur_now) / 2)
    assert float((await h.snapshot("heur"))["effective"]) == heur_now
    assert set(await h.scheduled(agent)) == {"warn", "heur"}
    assert await h.snapshot("warn") == {}

    warn_at = T0 + 30 * DAY_MS + 1
    report = await run_pass(h, agent, warn_at)
    # The heuristic reached the floor at 7 d · log2(0.3 / 0.05) ≈ 18.1 d.
    assert report.entries_decayed == 2
    warn_now = await h.read_time_value(agent, "warn", warn_at)
    assert float((await h.snapshot("warn"))["effective"]) == warn_now
    assert (await h.snapshot("heur"))["band"] == "3"
    assert report.avg_after == pytest.approx((warn_now + 0.05) / 2)
    assert set(await h.scheduled(agent)) == {"warn"}


async def test_applying_a_plan_twice_writes_the_same(h: Harness, agent: str) -> None:
    await h.write(fields("ep", agent), fields("heur", agent, kind="heuristic", confidence=0.3))
    now = T0 + 12 * DAY_MS
    due = await h.store.due(agent, now, 1000)
    plan = await decay_pass(h.store, agent, now)
    schedule, snap = await h.scheduled(agent), await h.snapshot("heur")
    await h.store.apply_pass(agent, now, plan, gone=due.gone)  # a redelivered pass
    assert await h.scheduled(agent) == schedule
    assert await h.snapshot("heur") == snap


async def test_usage_hash_moves_the_origin_and_reschedule_follows(h: Harness, agent: str) -> None:
    await h.write(fields("ep", agent))
    # Included in a recall a day later: the usage hash (not the memory) holds it.
    await h.touch("ep", T0 + DAY_MS)
    await h.store.reschedule(agent, ["ep"], T0 + DAY_MS)
    assert (await h.scheduled(agent))["ep"] == T0 + DAY_MS + H48 + 1

    now = T0 + DAY_MS + H48 + 1
    assert (await run_pass(h, agent, now)).entries_decayed == 1
    value = await h.read_time_value(agent, "ep", now)
    assert float((await h.snapshot("ep"))["effective"]) == value

    # A positive outcome raises confidence and resets the origin: back in band 0,
    # so the snapshot is stale and the memory is due at once.
    outcome_at = now + HOUR_MS
    await h.update("ep", confidence=0.9)
    await h.touch("ep", outcome_at)
    await h.store.reschedule(agent, ["ep"], outcome_at)
    assert (await h.scheduled(agent))["ep"] == outcome_at
    report = await run_pass(h, agent, outcome_at)
    assert report == DecayReport(1, value, 0.9)
    assert (await h.snapshot("ep"))["band"] == "0"


async def test_deleted_missing_and_foreign_entries_leave_the_schedule(
    h: Harness, agent: str
) -> None:
    await h.write(
        fields("gone", agent),
        fields("archived", agent),
        fields("compacted", agent),
        fields("odd", agent, decay_class="geological"),
    )
    await h.schedule(agent, "missing", T0)
    await h.schedule(agent, "odd", T0)  # unknown class: schedule_new skipped it
    await h.schedule(agent, "foreign", T0)
    await h.write(fields("foreign", "someone-else"), scheduled=False)
    await h.update("gone", deleted="1")
    await h.update("archived", archived="1")
    await h.update("compacted", replaced_by_summary_id="sum-1")
    assert len(await h.scheduled(agent)) == 6

    due = await h.store.due(agent, T0 + 3 * DAY_MS, 1000)
    assert [entry.memory_id for entry in due.entries] == ["odd"]  # the planner rejects it
    assert set(due.gone) == {"missing", "foreign", "gone", "archived", "compacted"}
    report = await run_pass(h, agent, T0 + 3 * DAY_MS)
    assert report == DecayReport(0, 0.0, 0.0)
    assert await h.scheduled(agent) == {}
    assert await h.snapshot("foreign") == {}
    assert await h.snapshot("odd") == {}

    # Rescheduling another agent's memory never adds it to this agent's schedule.
    await h.store.reschedule(agent, ["foreign", "missing"], T0)
    assert await h.scheduled(agent) == {}
    assert await h.scheduled("someone-else") == {}


async def test_pass_budget_leaves_the_rest_due(h: Harness, agent: str) -> None:
    # Many memories that are not due, a few that are: the pass sees only the few.
    quiet = [fields(f"q{i:04d}", agent, kind="warning", ts=T0 + i, last_accessed=T0 + i)
             for i in range(2000)]  # fmt: skip
    due = [fields(f"d{i}", agent, ts=T0 - i, last_accessed=T0 - i) for i in range(5)]
    await h.write(*quiet, *due)
    now = T0 + H48 + 1

    first = await plan_pass(h, agent, now, limit=2)
    # Oldest due first: d4 (earliest origin) then d3.
    assert [u.memory_id for u in first.updates] == ["d4", "d3"]
    second = await plan_pass(h, agent, now, limit=10)
    assert [u.memory_id for u in second.updates] == ["d2", "d1", "d0"]
    assert (await run_pass(h, agent, now, limit=10)).entries_decayed == 0
    for update in (*first.updates, *second.updates):
        assert update.effective_after == await h.read_time_value(agent, update.memory_id, now)
    assert len(await h.scheduled(agent)) == 2005


async def test_ties_are_taken_in_id_order(h: Harness, agent: str) -> None:
    await h.write(*(fields(f"m{i}", agent) for i in (3, 1, 2)))
    now = T0 + H48 + 1
    assert [u.memory_id for u in (await plan_pass(h, agent, now, limit=2)).updates] == [
        "m1",
        "m2",
    ]
    assert [u.memory_id for u in (await plan_pass(h, agent, now, limit=2)).updates] == ["m3"]


async def test_schedules_are_per_agent(h: Harness, agent: str) -> None:
    other = f"{agent}-other"
    await h.write(fields("mine", agent), fields("theirs", other))
    now = T0 + H48 + 1
    assert [u.memory_id for u in (await plan_pass(h, agent, now, 1000)).updates] == ["mine"]
    assert await h.snapshot("theirs") == {}
    assert (await h.scheduled(other)) == {"theirs": T0 + H48 + 1}


async def test_write_path_keeps_an_existing_due_time_when_asked(h: Harness, agent: str) -> None:
    await h.write(fields("agg", agent))
    await h.schedule(agent, "agg", T0 + 5)
    # A later fold re-sends the aggregate's seed: only the fold that creates it schedules.
    await h.write(fields("agg", agent, ts=T0 + DAY_MS, last_accessed=T0 + DAY_MS))
    assert (await h.scheduled(agent))["agg"] == T0 + DAY_MS + H48 + 1
    await h.schedule(agent, "agg", T0 + 5)
    await h.write(fields("agg", agent), keep_existing=True)
    assert (await h.scheduled(agent))["agg"] == T0 + 5
    # The fold that creates an aggregate finds nothing scheduled: it is added.
    await h.write(fields("new-agg", agent), keep_existing=True)
    assert (await h.scheduled(agent))["new-agg"] == T0 + H48 + 1


# --- seeding -----------------------------------------------------------------------------


async def test_seed_schedules_existing_memories(h: Harness, agent: str) -> None:
    docs = [
        fields("old", agent, ts=T0 - 10 * DAY_MS, last_accessed=T0 - 10 * DAY_MS),
        fields("fresh", agent),
        fields("rock", agent, decay_class="structural"),
        fields("dead", agent, deleted="1"),
        fields("theirs", "another-agent"),
    ]
    docs += [fields(f"bulk{i}", agent, kind="insight") for i in range(25)]
    await h.write(*docs, scheduled=False)  # stored before the schedule existed
    assert await h.scheduled(agent) == {}

    now = T0 + HOUR_MS
    assert await h.store.ensure_seeded(agent, now) == 27
    assert await h.store.ensure_seeded(agent, now) is None  # once per agent
    assert await h.seed(agent, now) == 27  # idempotent upserts
    due = await h.scheduled(agent)
    assert set(due) == {"old", "fresh", *(f"bulk{i}" for i in range(25))}
    assert due["old"] == now  # its band already changed: due at once
    assert due["fresh"] == T0 + H48 + 1
    assert due["bulk0"] == T0 + 7 * DAY_MS + 1
    assert await h.scheduled("another-agent") == {}

    report = await run_pass(h, agent, now)
    old_now = await h.read_time_value(agent, "old", now)
    assert report == DecayReport(1, 0.8, old_now)


async def test_seeding_removes_nothing_it_does_not_find(h: Harness, agent: str) -> None:
    await h.write(fields("live", agent), fields("compacted", agent), scheduled=False)
    await h.update("compacted", replaced_by_summary_id="sum-1")
    await h.schedule(agent, "stale", T0)  # deleted since: the pass drops it
    assert await h.store.ensure_seeded(agent, T0) == 1
    assert set(await h.scheduled(agent)) == {"live", "stale"}


async def test_the_outlook_is_the_earliest_due_time_and_the_seeding(h: Harness, agent: str) -> None:
    other = f"{agent}-other"
    assert await h.store.outlook([agent, other]) == {
        agent: DecayOutlook(False, None),
        other: DecayOutlook(False, None),
    }
    await h.store.ensure_seeded(agent, T0)
    assert await h.store.outlook([agent]) == {agent: DecayOutlook(True, None)}
    await h.write(fields("late", agent), fields("early", agent, ts=T0 - DAY_MS,
                  last_accessed=T0 - DAY_MS), fields("theirs", other))  # fmt: skip
    seen = await h.store.outlook([agent, other])
    assert seen[agent] == DecayOutlook(True, T0 - DAY_MS + H48 + 1)
    assert seen[other] == DecayOutlook(False, T0 + H48 + 1)
    assert not seen[agent].idle(T0 - DAY_MS + H48 + 1) and seen[agent].idle(T0)
    # A pass moves the head on: the early entry's next crossing is later.
    await run_pass(h, agent, T0 - DAY_MS + H48 + 1)
    assert (await h.store.outlook([agent]))[agent] == DecayOutlook(True, T0 + H48 + 1)
    assert await h.store.outlook([]) == {}
