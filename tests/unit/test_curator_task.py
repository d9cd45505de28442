"""CuratorRunner against InMemoryCuratorStore: no services.

Episodes are written through the in-memory memory store's own write path, so the
cycle reads them the way it reads Redis; the embedder and the decay rescheduler
are recording fakes.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

from grimoire.agents.maintenance.curator_task import (
    CuratorOptions,
    CuratorRunner,
    cycle_playbook,
    report_body,
)
from grimoire.agents.maintenance.handler import TaskRunner
from grimoire.streams.learn.curator.distill import EpisodeCluster, Polarity
from grimoire.streams.learn.curator.values import (
    CuratorPlan,
    CuratorPolicy,
    CuratorReport,
    EntryStatus,
)
from grimoire.streams.maintenance.schedule import MaintenancePlan, Pressure, Task
from grimoire.streams.model.decay import DAY_MS
from grimoire.streams.model.ids import memory_id
from grimoire.streams.model.records import (
    EventType,
    Kind,
    Layer,
    MemoryCandidate,
    MemoryRecord,
    Provenance,
)
from grimoire.streams.model.text import normalized_hash
from grimoire.streams.write.changes import WriteBatch
from grimoire.tables.maintenance.curator_store import CuratorState
from grimoire.tables.testing.curator_store import InMemoryCuratorStore
from grimoire.tables.testing.memory_store import InMemoryMemoryStore

DIMS = 16
T0 = 1_790_000_000_000
NOW = T0 + DAY_MS
A, B = "agent-a", "agent-b"
KEYS = ("entity:eth", "entity:usdc", "tag:strategy/eth-dca")
EMPTY_PLAYBOOK = "# PLAYBOOK — agent-a\n\n## Global\n\n_No heuristics yet._\n"


def vector(text: str) -> bytes:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    raw = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
    return (raw / np.linalg.norm(raw)).astype(np.float32).tobytes()


@dataclass
class Embedder:
    calls: list[list[str]] = field(default_factory=list)
    pause: bool = False

    async def __call__(self, texts: Sequence[str]) -> list[bytes]:
        self.calls.append(list(texts))
        if self.pause:
            await asyncio.sleep(0)
        return [vector(text) for text in texts]


@dataclass
class Rescheduled:
    calls: list[tuple[str, list[str], int]] = field(default_factory=list)

    async def __call__(self, agent_id: str, memory_ids: Sequence[str], now_ms: int) -> None:
        self.calls.append((agent_id, list(memory_ids), now_ms))


def episode(agent: str, n: int, outcome: str) -> MemoryRecord:
    ts, text = T0 + n, f"swap ETH for USDC through the router, attempt {n}"
    candidate = MemoryCandidate(
        id=memory_id(agent, f"ev-{n}", 0, ts),
        agent_id=agent,
        kind=Kind.EPISODE,
        layer=Layer.ACTION,
        text=text,
        ts_ms=ts,
        provenance=Provenance(f"ev-{n}", EventType.EPISODE.value, tool="swap"),
        normalized_hash=normalized_hash(text),
        tick=n,
        regime="calm",
        keys=KEYS,
        outcome=outcome,
    )
    return MemoryRecord(candidate, canonical=vector(text))


@dataclass
class Env:
    memory: InMemoryMemoryStore = field(default_factory=lambda: InMemoryMemoryStore(dims=DIMS))
    embed: Embedder = field(default_factory=Embedder)
    rescheduled: Rescheduled = field(default_factory=Rescheduled)
    options: CuratorOptions = field(default_factory=CuratorOptions)

    def __post_init__(self) -> None:
        self.store = InMemoryCuratorStore(self.memory)
        self.runner = CuratorRunner(self.store, self.embed, self.rescheduled, self.options)

    async def episodes(self, agent: str, start: int, *outcomes: str) -> None:
        records = tuple(episode(agent, start + i, o) for i, o in enumerate(outcomes))
        await self.memory.commit(WriteBatch(records=records))


def plan(agent: str, cycle: int, as_of_ms: int = NOW) -> MaintenancePlan:
    return MaintenancePlan(agent, cycle * 50, as_of_ms, Pressure.NORMAL, (Task.CURATOR,), (), cycle)


async def test_a_cycle_reports_applies_and_reschedules_its_entries() -> None:
    env = Env()
    await env.episodes(A, 0, "success", "success", "success")
    await env.episodes(B, 0, "failed", "failed", "failed")
    runner: TaskRunner = env.runner
    body = await runner(plan(A, 1))
    assert body == {"cycle": 1, "ts": NOW, "pruned": 0, "promoted": 0, "proposed": 1, "demoted": 0}
    (insight,) = await env.store.entries(A)
    assert env.rescheduled.calls == [(A, [insight.memory_id], NOW)]
    assert env.embed.calls == [[insight.text]]
    assert "tends to work" in insight.text
    hits = await env.memory.full_text(A, ["tends"], 5)  # a curated entry is a memory
    assert [hit.memory.id for hit in hits] == [insight.memory_id]
    assert await env.memory.full_text(B, ["tends"], 5) == []
    assert await env.store.get_playbook(A) == EMPTY_PLAYBOOK
    state = await env.store.state(A)
    assert (state.cycle, state.watermark_ms) == (1, T0 + 2)


async def test_only_the_entries_a_cycle_wrote_are_rescheduled() -> None:
    """An unchanged entry's due time still holds: rescheduling every entry made each
    cycle's cost follow how many entries the agent has, not what the cycle changed."""
    env = Env()
    await env.episodes(A, 0, "success", "success", "success")
    await env.runner(plan(A, 1))
    (insight,) = await env.store.entries(A)
    await env.runner(plan(A, 2))  # no new episodes, nothing decayed: nothing written
    assert env.rescheduled.calls[-1] == (A, [], NOW)
    await env.episodes(A, 10, "success")  # evidence: cycle 3 upvotes the insight
    await env.runner(plan(A, 3))
    _, rescheduled, _ = env.rescheduled.calls[-1]
    assert insight.memory_id in rescheduled
    await env.runner(plan(A, 3))  # a replayed number writes nothing
    assert env.rescheduled.calls[-1] == (A, [], NOW)


async def test_a_cycle_with_nothing_to_write_embeds_nothing() -> None:
    env = Env()
    report = await env.runner.run_cycle(A, NOW, 1)
    assert report == CuratorReport(agent_id=A, cycle=1, now_ms=NOW)
    assert env.embed.calls == []
    assert await env.store.state(A) == CuratorState(1, 0, report)
    assert await env.store.get_playbook(A) == EMPTY_PLAYBOOK
    assert await env.runner(plan(A, 2)) == report_body(CuratorReport(A, 2, NOW))
    assert env.rescheduled.calls == [(A, [], NOW)]


async def test_a_replayed_cycle_reports_it_again_and_writes_nothing() -> None:
    env = Env()
    await env.episodes(A, 0, "success", "success", "success")
    first = await env.runner(plan(A, 1))
    records = [dict(doc) for doc in env.memory.hashes()]
    await env.episodes(A, 10, "success", "success")  # evidence for cycle 2, not for a replay
    assert await env.runner(plan(A, 1)) == first
    assert len(env.embed.calls) == 1
    assert [dict(doc) for doc in env.memory.hashes()][: len(records)] == records
    older = await env.runner.run_cycle(A, NOW, 0)
    assert older == CuratorReport(agent_id=A, cycle=0, now_ms=NOW)
    report = await env.runner.run_cycle(A, NOW, 2)
    assert (report.upvoted, report.promoted, report.episodes_seen) == (1, 1, 2)


async def test_two_concurrent_runs_of_one_cycle_apply_it_once() -> None:
    env = Env(embed=Embedder(pause=True))
    await env.episodes(A, 0, "success", "success", "success")
    first, second = await asyncio.gather(
        env.runner.run_cycle(A, NOW, 1), env.runner.run_cycle(A, NOW, 1)
    )
    assert first == second and first.proposed == 1
    assert len(env.embed.calls) == 2  # both planned; only one was applied
    assert len(await env.store.entries(A)) == 1


async def test_an_embedder_that_loses_a_vector_fails_the_cycle_before_any_write() -> None:
    env = Env()
    await env.episodes(A, 0, "success", "success", "success")

    async def short(texts: Sequence[str]) -> list[bytes]:
        return []

    runner = CuratorRunner(env.store, short, env.rescheduled)
    with pytest.raises(ValueError, match="0 vectors for 1 texts"):
        await runner(plan(A, 1))
    assert await env.store.state(A) == CuratorState()
    assert await env.store.entries(A) == []
    assert env.rescheduled.calls == []


async def test_promotion_renders_the_playbook_at_decided_confidence() -> None:
    env = Env()
    await env.episodes(A, 0, "success", "success", "success")
    for cycle in range(1, 5):
        if cycle > 1:
            await env.episodes(A, cycle * 10, "success", "success")
        await env.runner.run_cycle(A, NOW, cycle)
    heuristic = next(e for e in await env.store.entries(A) if e.kind is Kind.HEURISTIC)
    assert heuristic.status is EntryStatus.PLAYBOOK
    playbook = await env.store.get_playbook(A)
    assert playbook is not None
    assert f"- {heuristic.text} _(confidence 0.70; id {heuristic.memory_id})_" in playbook
    # a day later the same entries render at their decayed confidence
    later = cycle_playbook(A, NOW + 30 * DAY_MS, _no_changes(), [heuristic], CuratorPolicy())
    assert "(confidence 0.70;" not in later and heuristic.memory_id in later


async def test_a_reworded_entry_is_embedded_again() -> None:
    env = Env()
    await env.episodes(A, 0, "success", "success", "success")
    await env.runner.run_cycle(A, NOW, 1)
    for cycle in (2, 3):
        await env.episodes(A, cycle * 10, "failed", "failed", "failed")
        report = await env.runner.run_cycle(A, NOW, cycle)
    assert report.edited == 1
    (insight,) = await env.store.entries(A)
    assert insight.polarity is Polarity.FAILS and "tends to fail" in insight.text
    assert env.embed.calls[-1] == [insight.text]
    stored = env.memory.record(insight.memory_id)
    assert stored is not None and stored["canonical"] == vector(insight.text)


async def test_the_options_reach_the_planner() -> None:
    class Shouting:
        def distil(self, cluster: EpisodeCluster, polarity: Polarity) -> str:
            return f"{cluster.signature} {polarity.value}".upper()

    env = Env(options=CuratorOptions(CuratorPolicy(min_cluster=2), Shouting()))
    await env.episodes(A, 0, "success", "success")
    report = await env.runner.run_cycle(A, NOW, 1)
    assert report.proposed == 1
    (insight,) = await env.store.entries(A)
    assert insight.text.isupper() and insight.text.endswith("WORKS")


def _no_changes() -> CuratorPlan:
    return CuratorPlan((), (), (), CuratorReport(A, 0, NOW), 0)
