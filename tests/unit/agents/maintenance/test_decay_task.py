"""DecayRunner against the in-memory stores: no services.

Memories are written through InMemoryMemoryStore.commit (the write path) and
read back by InMemoryDecayStore; numbers follow from the default decay policy:
an episode's half-life is 48 h at quality 0.5, a warning's 30 days, and the
bands change at 0.4 and 0.1 above the 0.05 floor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial
from typing import Any

import pytest

from grimoire.agents.maintenance.decay_task import DecayRunner, decay_pass
from grimoire.agents.maintenance.handler import TaskRunner
from grimoire.streams.learn.outcomes import Outcome, OutcomeKind
from grimoire.streams.maintenance.decay_pass import DecayBands
from grimoire.streams.model.decay import DAY_MS, HOUR_MS
from grimoire.streams.model.records import Kind, MemoryRecord
from grimoire.streams.write.changes import WriteBatch
from grimoire.tables.codec.memory_hash import decode_record, hash_fields, with_usage
from grimoire.tables.testing.decay_store import InMemoryDecayStore
from grimoire.tables.testing.memory_store import InMemoryMemoryStore
from tests.support.maintenance import decay_plan, decaying_record

DIMS = 8
T0 = 1_790_000_000_000
H48 = 48 * HOUR_MS
A, B = "agent-a", "agent-b"


record = partial(decaying_record, ts=T0, dims=DIMS)


class World:
    def __init__(self, *, bands: DecayBands | None = None) -> None:
        self.memory = InMemoryMemoryStore(dims=DIMS)
        self.decay = (
            InMemoryDecayStore(self.memory)
            if bands is None
            else InMemoryDecayStore(self.memory, bands=bands)
        )

    async def write(self, *records: MemoryRecord, scheduled: bool = True) -> None:
        """Commit, then schedule as RedisMemoryStore.commit does on its pipeline."""
        await self.memory.commit(WriteBatch(records=records))
        if scheduled:
            for rec in records:
                self.decay.schedule_new(hash_fields(rec, 0))

    def read_time_value(self, agent: str, memory_id: str, now_ms: int) -> float:
        doc = self.memory.record(memory_id)
        assert doc is not None
        found = decode_record(with_usage(doc, self.memory.usage(memory_id)), agent, DIMS)
        assert found is not None
        return found.effective_confidence(now_ms)


@pytest.fixture
def world() -> World:
    return World()


def test_the_runner_is_a_task_runner(world: World) -> None:
    runner: TaskRunner = DecayRunner(world.decay, 10)
    assert isinstance(runner, DecayRunner)


async def test_first_run_seeds_then_reports_the_pass(world: World) -> None:
    # Stored before the schedule existed: the first run seeds them.
    await world.write(
        record(A, "ep"),
        record(A, "old", ts=T0 - 10 * DAY_MS),
        record(A, "warn", kind=Kind.WARNING),
        scheduled=False,
    )
    runner = DecayRunner(world.decay, 100)
    now = T0 + H48 + 1
    report = await runner(decay_plan(A, now))
    ep_now = world.read_time_value(A, "ep", now)
    old_now = world.read_time_value(A, "old", now)
    assert report == {
        "seeded": 3,
        "entries_decayed": 2,
        "avg_before": round((0.8 + 0.8) / 2, 6),
        "avg_after": round((ep_now + old_now) / 2, 6),
    }
    assert world.decay.seeded_at(A) == now
    assert world.decay.snapshot("ep") == {"effective": repr(ep_now), "band": "1", "as_of": str(now)}
    assert world.decay.snapshot("warn") == {}
    assert set(world.decay.scheduled(A)) == {"ep", "warn"}  # "old" sits at the floor

    # Nothing else is due at the same time: an idempotent re-run.
    assert await runner(decay_plan(A, now)) == {
        "seeded": 0,
        "entries_decayed": 0,
        "avg_before": 0.0,
        "avg_after": 0.0,
    }


async def test_the_limit_leaves_the_rest_for_the_next_run(world: World) -> None:
    await world.write(*(record(A, f"d{i}", ts=T0 - i) for i in range(5)))
    # Seeded at write time (a seed as late as the pass would make them all due now).
    assert await world.decay.ensure_seeded(A, T0) == 5
    runner = DecayRunner(world.decay, 2)
    now = T0 + H48 + 1
    first = await runner(decay_plan(A, now))
    assert first["entries_decayed"] == 2
    assert set(world.decay.scheduled(A)) == {f"d{i}" for i in range(5)}
    # Oldest due first: d4 has the earliest origin.
    assert world.decay.snapshot("d4") and world.decay.snapshot("d3")
    assert world.decay.snapshot("d2") == {}
    assert (await runner(decay_plan(A, now)))["entries_decayed"] == 2
    assert (await runner(decay_plan(A, now)))["entries_decayed"] == 1
    assert (await runner(decay_plan(A, now)))["entries_decayed"] == 0


async def test_another_agents_memories_are_never_touched(world: World) -> None:
    await world.write(record(A, "mine"), record(B, "theirs"))
    world.decay.schedule(A, "theirs", T0)  # a stray member in A's schedule
    report = await DecayRunner(world.decay, 100)(decay_plan(A, T0 + H48 + 1))
    assert report["entries_decayed"] == 1
    assert world.decay.snapshot("theirs") == {}
    assert set(world.decay.scheduled(A)) == {"mine"}
    assert world.decay.scheduled(B) == {"theirs": T0 + H48 + 1}


async def test_outcomes_move_the_origin_and_the_next_pass_sees_it(world: World) -> None:
    await world.write(record(A, "ep"))
    runner = DecayRunner(world.decay, 100)
    first = T0 + H48 + 1
    await runner(decay_plan(A, first))
    before = world.read_time_value(A, "ep", first)

    # A positive outcome raises confidence and resets the decay origin.
    at = first + HOUR_MS
    outcome = Outcome("out-1", A, at, OutcomeKind.POSITIVE, ("ep",))
    assert await world.memory.apply_outcome(outcome) == 1
    await world.decay.reschedule(A, ["ep"], at)
    assert world.decay.scheduled(A)["ep"] == at  # back in band 0: due at once
    report = await runner(decay_plan(A, at))
    after = world.read_time_value(A, "ep", at)
    assert report["entries_decayed"] == 1
    assert report["avg_before"] == round(before, 6)
    assert report["avg_after"] == round(after, 6)
    assert world.decay.snapshot("ep")["band"] == "0"


async def test_deleted_and_compacted_memories_drop_out(world: World) -> None:
    await world.write(record(A, "gone"), record(A, "kept"))
    for doc in world.memory.hashes():
        if doc["memory_id"] == "gone":
            doc["replaced_by_summary_id"] = "sum-1"
    report = await DecayRunner(world.decay, 100)(decay_plan(A, T0 + H48 + 1))
    assert report["entries_decayed"] == 1
    assert set(world.decay.scheduled(A)) == {"kept"}
    assert world.decay.snapshot("gone") == {}


async def test_the_pass_plans_with_the_stores_bands(world: World) -> None:
    # One band edge at 0.7: 0.8 crosses it after 48 h · log2(0.8 / 0.7).
    custom = World(bands=DecayBands((0.7,)))
    await custom.write(record(A, "ep"))
    crossing = custom.decay.scheduled(A)["ep"]
    assert abs(crossing - (T0 + H48 * math.log2(0.8 / 0.7))) <= 1
    result = await decay_pass(custom.decay, A, crossing, 10)
    assert [u.band for u in result.updates] == [1]
    entry = (await custom.decay.due(A, crossing, 10)).entries
    assert entry == ()  # rescheduled past `crossing`
    assert result.updates[0].effective_after == custom.read_time_value(A, "ep", crossing)


async def test_the_report_is_what_the_maintenance_event_carries(world: World) -> None:
    await world.write(record(A, "ep"))
    report: Mapping[str, Any] = await DecayRunner(world.decay)(decay_plan(A, T0 + H48 + 1))
    assert list(report) == ["seeded", "entries_decayed", "avg_before", "avg_after"]
    assert all(isinstance(v, int | float) for v in report.values())
