"""The compaction phase machine and its runner over the in-memory reference stores
(no services): the plan, the phases and their resumption, the scan cursor, the
report the maintenance handler publishes, and what the task leaves alone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from grimoire.agents.maintenance.compaction_task import (
    CompactionOptions,
    CompactionRunner,
    CompactionTask,
    Embed,
)
from grimoire.streams.maintenance.compaction import (
    DAY_MS,
    CompactionBudget,
    CompactionPolicy,
)
from grimoire.streams.maintenance.schedule import MaintenancePlan, Pressure, Task
from grimoire.streams.model.records import MemoryRecord
from grimoire.streams.write.changes import WriteBatch
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.exceptions import StorageError
from grimoire.tables.maintenance.compaction_store import PLAN_TTL_S, CompactionStalled, Phase
from grimoire.tables.testing.compaction_store import InMemoryCompactionStore
from grimoire.tables.testing.memory_store import InMemoryMemoryStore
from tests.support.embedders import search_terms_vector
from tests.support.maintenance import Crash, CrashAt, ops_episode

DIMS = 16
T0 = 1_790_000_000_000 - (1_790_000_000_000 % DAY_MS)
NOW = T0 + 30 * DAY_MS
POLICY = CompactionPolicy(min_age_ms=7 * DAY_MS, max_rolled_keys=1)
AGENT, OTHER = "agent-a", "agent-b"


@dataclass
class CountingEmbed:
    dims: int = DIMS
    calls: list[tuple[str, ...]] = field(default_factory=list)

    async def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(tuple(texts))
        return np.stack([search_terms_vector(t, self.dims) for t in texts]).astype(np.float32)


def record(agent: str, n: int, text: str, ts: int, keys: tuple[str, ...]) -> MemoryRecord:
    return ops_episode(agent, n, text, ts, keys, search_terms_vector(text, DIMS))


def cluster(agent: str, first: int = 0, ts: int = T0) -> list[MemoryRecord]:
    return [
        record(agent, first + n, f"worker ran out of memory while loading batch {n}",
               ts + n * 60_000, ("err:oom", f"path:/srv/app{n}.log"))
        for n in range(4)
    ]  # fmt: skip


@dataclass
class World:
    memory: InMemoryMemoryStore
    store: InMemoryCompactionStore
    embed: CountingEmbed
    sources: tuple[str, ...]

    def task(self, *crash_at: str, embed: Embed | None = None, **options: Any) -> CompactionTask:
        return CompactionTask(
            self.store,
            embed or self.embed,
            POLICY,
            CompactionOptions(outbox_batch=1, **options),
            CrashAt(*crash_at),
        )

    def doc(self, memory_id: str) -> dict[str, str]:
        found = self.memory.record(memory_id) or {}
        return {k: text_of(v) for k, v in found.items() if k not in ("canonical", "eidolon")}

    def vectors_left(self) -> int:
        return sum("canonical" in (self.memory.record(s) or {}) for s in self.sources)

    def visible(self, memory_id: str) -> bool:
        return self.doc(memory_id).get("deleted") == "0"


async def make_world() -> World:
    memory = InMemoryMemoryStore(dims=DIMS)
    mine = cluster(AGENT)
    await memory.commit(WriteBatch(records=(*mine, *cluster(OTHER, first=50))))
    return World(
        memory,
        InMemoryCompactionStore(memory, dims=DIMS),
        CountingEmbed(),
        tuple(r.id for r in mine),
    )


@pytest.fixture
async def world() -> World:
    return await make_world()


async def test_compact_folds_the_cluster_into_one_visible_summary(world: World) -> None:
    other_before = [h for h in map(dict, world.memory.hashes()) if h["agent_id"] == OTHER]
    report = await world.task().compact(AGENT, NOW)

    assert report.status == "done" and not report.resumed and report.finished_pending == ""
    assert report.sources == 4 and report.vectors_dropped == 4
    (summary,) = report.summary_ids
    fields = world.doc(summary)
    assert fields["kind"] == "summary" and fields["deleted"] == "0"
    assert "compaction_pending" not in fields and fields["compaction_plan"] == report.plan_id
    assert fields["source_ids"].split("|") == sorted(world.sources)
    assert fields["nexus_keys"] == "err:oom"
    for source in world.sources:
        assert world.doc(source)["deleted"] == "1"
        assert world.doc(source)["replaced_by_summary_id"] == summary
        tomb = world.store.tombstone(source)
        assert tomb == {
            "summary_id": summary,
            "plan_id": report.plan_id,
            "agent_id": AGENT,
            "ts": str(NOW),
        }
    assert world.vectors_left() == 0
    assert await world.store.pending(AGENT) is None
    plan = world.store.plan_fields(AGENT, report.plan_id)
    assert plan is not None and plan["phase"] == Phase.DONE
    assert world.store.plan_ttl_s(AGENT, report.plan_id) == PLAN_TTL_S
    assert world.store.outbox_ids(AGENT, report.plan_id) == []
    # Tenancy: the other agent's identical cluster is untouched.
    assert [h for h in map(dict, world.memory.hashes()) if h["agent_id"] == OTHER] == other_before
    assert world.embed.calls == [(fields["text"],)]


async def test_the_phases_are_checkpointed_in_order(world: World) -> None:
    task = world.task()
    await task.compact(AGENT, NOW)
    assert isinstance(task.checkpoint, CrashAt)
    assert task.checkpoint.seen == [
        Phase.PLANNED,
        Phase.SUMMARIES_WRITTEN,
        Phase.INDEXED,
        Phase.FLIPPED,
        *[Phase.OUTBOX_BATCH] * 4,
        Phase.DONE,
    ]


@pytest.mark.parametrize(
    ("phase", "flipped", "vectors"),
    [
        (Phase.PLANNED, False, 4),
        (Phase.SUMMARIES_WRITTEN, False, 4),
        (Phase.INDEXED, False, 4),
        (Phase.FLIPPED, True, 4),
        (Phase.OUTBOX_BATCH, True, 3),
    ],
)
async def test_a_crash_after_any_phase_is_resumed_to_the_end_without_a_second_summary(
    world: World, phase: Phase, flipped: bool, vectors: int
) -> None:
    with pytest.raises(Crash):
        await world.task(phase).compact(AGENT, NOW)
    plan_id = await world.store.pending(AGENT)
    assert plan_id is not None
    stored = await world.store.load_plan(AGENT, plan_id)
    assert stored is not None
    (summary,) = (c.summary_id for c in stored.plan.clusters)
    expected_phase = Phase.FLIPPED if phase is Phase.OUTBOX_BATCH else phase
    assert stored.phase is expected_phase
    if phase is Phase.PLANNED:
        assert world.memory.record(summary) is None
    else:
        assert world.visible(summary) is flipped
    assert all(world.visible(s) for s in world.sources) is not flipped
    assert world.vectors_left() == vectors

    report = await world.task().resume(AGENT)
    assert report is not None and report.resumed and report.status == "done"
    assert report.summary_ids == (summary,) and report.vectors_dropped == vectors
    assert world.visible(summary) and not any(world.visible(s) for s in world.sources)
    assert world.vectors_left() == 0
    assert len(world.embed.calls) == 1  # a written summary is never embedded again
    assert await world.task().resume(AGENT) is None
    again = await world.task().compact(AGENT, NOW + DAY_MS)
    assert again.status == "empty"


async def test_the_next_compact_finishes_a_crashed_plan_first(world: World) -> None:
    with pytest.raises(Crash):
        await world.task(Phase.SUMMARIES_WRITTEN).compact(AGENT, NOW)
    with pytest.raises(Crash):
        await world.task(Phase.OUTBOX_BATCH).compact(AGENT, NOW)
    plan_id = await world.store.pending(AGENT)
    report = await world.task().compact(AGENT, NOW)
    assert report.status == "empty" and report.finished_pending == plan_id
    assert world.vectors_left() == 0 and await world.store.pending(AGENT) is None


async def test_a_summary_the_index_has_not_caught_up_with_stalls_and_resumes(
    world: World,
) -> None:
    with pytest.raises(Crash):
        await world.task(Phase.PLANNED).compact(AGENT, NOW)
    plan_id = await world.store.pending(AGENT)
    assert plan_id is not None
    stored = await world.store.load_plan(AGENT, plan_id)
    assert stored is not None
    world.store.unindexed = {c.summary_id for c in stored.plan.clusters}

    with pytest.raises(CompactionStalled):
        await world.task(index_timeout_s=0.0).resume(AGENT)
    stalled = await world.store.load_plan(AGENT, plan_id)
    assert stalled is not None and stalled.phase is Phase.SUMMARIES_WRITTEN
    assert all(world.visible(s) for s in world.sources)  # nothing flipped

    world.store.unindexed = set()
    report = await world.task().resume(AGENT)
    assert report is not None and report.status == "done"


async def test_an_embedder_of_the_wrong_size_writes_nothing(world: World) -> None:
    with pytest.raises(StorageError):
        await world.task(embed=CountingEmbed(dims=DIMS + 1)).compact(AGENT, NOW)
    plan_id = await world.store.pending(AGENT)
    assert plan_id is not None
    stored = await world.store.load_plan(AGENT, plan_id)
    assert stored is not None and stored.phase is Phase.PLANNED
    assert not [h for h in world.memory.hashes() if h["kind"] == "summary"]
    report = await world.task().resume(AGENT)
    assert report is not None and report.status == "done"


async def test_pressure_pauses_and_nothing_old_enough_is_empty(world: World) -> None:
    paused = await world.task().compact(AGENT, NOW, signals=("tag:ops/outbox-critical",))
    assert paused.status == "paused" and await world.store.pending(AGENT) is None
    assert await world.store.cursor(AGENT) is None  # not even the scan ran
    young = await world.task().compact(AGENT, T0 + DAY_MS)
    assert young.status == "empty" and young.plan_id == ""
    assert all(world.visible(s) for s in world.sources)


async def test_a_pending_pointer_without_its_plan_is_dropped(world: World) -> None:
    class Dangling(InMemoryCompactionStore):
        dropped = False

        async def pending(self, agent_id: str) -> str | None:
            return None if self.dropped else "plan-gone"

        async def drop_pending(self, agent_id: str) -> None:
            self.dropped = True

    store = Dangling(world.memory, dims=DIMS)
    task = CompactionTask(store, world.embed, POLICY)
    assert await task.resume(AGENT) is None
    assert store.dropped


async def test_the_scan_moves_window_by_window_jumps_gaps_and_wraps(world: World) -> None:
    later = [
        record(AGENT, 20 + n, f"disk quota exceeded on volume {n}", T0 + 9 * DAY_MS + n,
               ("err:quota",))
        for n in range(3)
    ]  # fmt: skip
    await world.memory.commit(WriteBatch(records=tuple(later)))
    task = world.task()

    first = await task.compact(AGENT, NOW)
    assert first.status == "done" and first.sources == 4
    assert await world.store.cursor(AGENT) == T0 + DAY_MS
    second = await task.compact(AGENT, NOW)  # jumps the 8-day gap
    assert second.status == "done" and second.sources == 3
    assert await world.store.cursor(AGENT) == T0 + 10 * DAY_MS
    third = await task.compact(AGENT, NOW)  # past the end: wraps to the oldest
    assert third.status == "empty"
    summaries = [h for h in world.memory.hashes() if h["kind"] == "summary"]
    assert len(summaries) == 2


async def test_a_full_page_moves_the_cursor_to_its_last_instant(world: World) -> None:
    task = world.task(max_candidates=2)
    report = await task.compact(AGENT, NOW)
    assert report.status == "empty"  # two memories are no cluster
    assert await world.store.cursor(AGENT) == T0 + 60_000


@dataclass
class RecordingDecay:
    calls: list[tuple[str, tuple[str, ...], int]] = field(default_factory=list)

    async def reschedule(self, agent_id: str, memory_ids: Sequence[str], now_ms: int) -> None:
        self.calls.append((agent_id, tuple(memory_ids), now_ms))


def maintenance_plan(as_of_ms: int) -> MaintenancePlan:
    return MaintenancePlan(
        agent_id=AGENT,
        tick=3,
        as_of_ms=as_of_ms,
        pressure=Pressure.NORMAL,
        tasks=(Task.COMPACTION,),
        postponed=(),
        curator_cycle=0,
    )


async def test_the_runner_reports_and_schedules_the_decay_of_new_summaries(
    world: World,
) -> None:
    decay = RecordingDecay()
    runner = CompactionRunner(world.task(), decay, CompactionBudget(max_clusters=1))
    report = dict(await runner(maintenance_plan(NOW)))
    plan_id = report["plan_id"]
    (summary,) = [text_of(h["memory_id"]) for h in world.memory.hashes() if h["kind"] == "summary"]
    assert report == {
        "status": "done",
        "plan_id": plan_id,
        "summaries": 1,
        "summary_ids": summary,
        "sources": 4,
        "vectors_dropped": 4,
        "finished_pending": "",
    }
    assert plan_id and decay.calls == [(AGENT, (summary,), NOW)]

    quiet = dict(await runner(maintenance_plan(NOW + DAY_MS)))
    assert quiet["status"] == "empty" and quiet["summaries"] == 0 and quiet["summary_ids"] == ""
    assert len(decay.calls) == 1  # nothing new, nothing rescheduled


async def test_the_runner_reports_a_crashed_plan_it_finished(world: World) -> None:
    with pytest.raises(Crash):
        await world.task(Phase.FLIPPED).compact(AGENT, NOW)
    crashed = await world.store.pending(AGENT)
    report = await CompactionRunner(world.task(), RecordingDecay())(maintenance_plan(NOW))
    assert report["status"] == "empty" and report["finished_pending"] == crashed
    assert world.vectors_left() == 0
