"""CuratorRunner against InMemoryCuratorStore: no services.

Episodes are written through the in-memory memory store's own write path, so the
cycle reads them the way it reads Redis; the embedder and the decay rescheduler
are recording fakes.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence, Sized
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
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
    CuratedEntry,
    CuratorPlan,
    CuratorPolicy,
    CuratorReport,
    EntryStatus,
)
from grimoire.streams.learn.outcomes import Outcome, OutcomeKind
from grimoire.streams.maintenance.schedule import MaintenancePlan, Pressure, Task
from grimoire.streams.model.decay import DAY_MS
from grimoire.streams.model.lexicon import query_terms
from grimoire.streams.model.records import Kind, Layer, MemoryRecord
from grimoire.streams.write.changes import WriteBatch
from grimoire.tables.maintenance.curator_store import CuratorState
from grimoire.tables.testing.curator_store import InMemoryCuratorStore
from grimoire.tables.testing.memory_store import InMemoryMemoryStore
from tests.support.builders import memory_candidate, memory_record
from tests.support.curator import T0, first_insight_body, swap_episode
from tests.support.embedders import TextSeededEmbedder
from tests.support.usage import apply_usage_entry

DIMS = 16
NOW = T0 + DAY_MS
A, B = "agent-a", "agent-b"
EMPTY_PLAYBOOK = "# PLAYBOOK — agent-a\n\n## Global\n\n_No heuristics yet._\n"


vector = TextSeededEmbedder(DIMS).vector


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
    return swap_episode(agent, n, outcome, dims=DIMS, event=f"ev-{n}")


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
    assert body == first_insight_body(NOW)
    (insight,) = await env.store.entries(A)
    assert env.rescheduled.calls == [(A, [insight.memory_id], NOW)]
    assert env.embed.calls == [[insight.text]]
    assert "tends to work" in insight.text
    hits = await env.memory.full_text(A, query_terms("tends"), 5)  # a curated entry is a memory
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
    assert await env.store.state(A) == CuratorState(1, 0, report, scheduled=True)
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


# --- looking at what changed only ---------------------------------------------------------


class LooksAtEverything:
    """The cycle as it was before its indexes: the store never reports them built,
    so every cycle reads and decides on every live entry."""

    def __init__(self, store: InMemoryCuratorStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def state(self, agent_id: str) -> CuratorState:
        return replace(await self.store.state(agent_id), scheduled=False)


@dataclass
class CountingStore:
    """Counts the entries each read hands the runner (the cycle's work)."""

    store: InMemoryCuratorStore
    read: dict[str, int] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def _count(self, name: str, found: Sized) -> None:
        self.read[name] = self.read.get(name, 0) + len(found)

    async def cycle_inputs(self, agent_id: str, watermark_ms: int) -> Any:
        inputs = await self.store.cycle_inputs(agent_id, watermark_ms)
        self._count("entries", inputs.entries)
        return inputs

    async def load(self, agent_id: str, memory_ids: Sequence[str]) -> dict[str, CuratedEntry]:
        self._count("asked", memory_ids)
        found = await self.store.load(agent_id, memory_ids)
        self._count("loaded", found)
        return found


SITUATIONS = [(tool, key) for tool in ("swap", "bridge", "lend") for key in ("eth", "usdc", "sol")]


def situated(agent: str, n: int, outcome: str, situation: int, ts: int) -> MemoryRecord:
    tool, asset = SITUATIONS[situation % len(SITUATIONS)]
    text = f"{tool} {asset} attempt {n}"
    candidate = memory_candidate(
        agent,
        f"ev-{n}",
        text,
        ts=ts,
        layer=Layer.ACTION,
        tool=tool,
        regime="calm",
        keys=(f"entity:{asset}",),
        outcome=outcome,
    )
    return memory_record(candidate, vector(text), eidolon=b"")


def ingested(agent: str, n: int, kind: Kind, ts: int, confidence: float) -> MemoryRecord:
    text = f"{kind.value} number {n} from the field"
    candidate = memory_candidate(
        agent,
        f"in-{n}",
        text,
        ts=ts,
        kind=kind,
        layer=Layer.CONTEMPLATION,
        keys=(f"entity:thing{n}",),
    )
    return memory_record(candidate, vector(text), eidolon=b"", confidence=confidence)


async def _state_of(env: Env) -> dict[str, Any]:
    """What the cycles decided: curated records, bookkeeping (an exempt entry's low
    counter capped at 3, the documented difference), PLAYBOOK.md."""
    policy = CuratorPolicy()
    records = {
        _text(doc["memory_id"]): {
            name: _text(doc[name])
            for name in ("confidence", "archived", "text", "validated_count", "contradicted_count")
            if name in doc
        }
        for doc in env.memory.hashes()
        if _text(doc["kind"]) in ("insight", "heuristic", "warning")
    }
    books = {}
    for entry_id, raw in env.store.bookkeeping(A).items():
        book = orjson.loads(raw)
        doc = env.memory.record(entry_id) or {}
        if _text(doc.get("kind", "")) == "warning" or doc.get("provenance") == "bloodstain":
            book["consecutive_low"] = min(book["consecutive_low"], policy.prune_after_cycles)
        books[entry_id] = book
    return {"records": records, "books": books, "playbook": await env.store.get_playbook(A)}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


DECIDED = ("pruned", "promoted", "proposed", "demoted", "upvoted", "downvoted", "edited")


async def test_a_cycle_looking_at_what_changed_decides_what_one_looking_at_all_decides() -> None:
    """Two stores fed the same writes, usage, outcomes and cycles over ~90 days: one
    cycle reads every entry (as before its indexes), the other what is due, what its
    episodes name and the playbook. Same records, bookkeeping, playbook, decisions."""
    due_only, everything = Env(), Env()
    full = CuratorRunner(
        LooksAtEverything(everything.store),  # type: ignore[arg-type]
        everything.embed,
        everything.rescheduled,
    )
    rng = random.Random(11)
    now, serial, seen = T0, 0, {"due_only": 0, "everything": 0}
    totals = dict.fromkeys(DECIDED, 0)
    statuses: set[str] = set()
    for cycle in range(1, 60):
        now += rng.choice([2, 12, 36, 48]) * 3_600_000
        # The world turns halfway: what worked starts failing (edits follow).
        verdicts = ["success", "success", "failed", ""] if cycle < 30 else ["failed", "failed", ""]
        records = [
            situated(A, serial + n, rng.choice(verdicts), s, now - 50)
            for n, s in enumerate(rng.choices(range(cycle % 9 + 1), k=rng.randrange(0, 10)))
        ]
        if cycle % 7 == 1:  # insights and warnings from the agent itself
            records += [
                ingested(A, serial + 50 + n, kind, now - rng.randrange(0, 30) * DAY_MS, conf)
                for n, (kind, conf) in enumerate(
                    [(Kind.INSIGHT, 0.9), (Kind.WARNING, 0.3), (Kind.INSIGHT, 0.45)]
                )
            ]
        serial += 100
        entries = await everything.store.entries(A)
        used = [e.memory_id for e in rng.sample(entries, min(3, len(entries)))]
        blamed = [e.memory_id for e in rng.sample(entries, min(2, len(entries)))]
        for env, runner in ((due_only, due_only.runner), (everything, full)):
            await env.memory.commit(WriteBatch(records=tuple(records)))
            if used:  # a recall used these: their decay origin moves to now
                await apply_usage_entry(env.memory, A, cycle, used, now - 10, None)
            if blamed and cycle % 3 == 0:
                kind = OutcomeKind.NEGATIVE if cycle % 2 else OutcomeKind.POSITIVE
                await env.memory.apply_outcome(
                    Outcome(f"o-{cycle}", A, now - 5, kind, tuple(blamed))
                )
            report = await runner.run_cycle(A, now, cycle)
            seen["due_only" if env is due_only else "everything"] += report.entries_seen
            decided = {name: getattr(report, name) for name in DECIDED}
            if env is due_only:
                expected = decided
        assert decided == expected, f"cycle {cycle}"
        state = await _state_of(everything)
        assert await _state_of(due_only) == state, f"cycle {cycle}"
        totals = {name: totals[name] + decided[name] for name in DECIDED}
        statuses |= {book["status"] for book in state["books"].values()}
    # the run went through every kind of decision
    assert {"active", "playbook", "demoted"} <= statuses
    assert all(totals.values()), totals
    assert seen["due_only"] < seen["everything"] / 2


async def test_a_cycles_reads_do_not_grow_with_the_entries_nothing_touched() -> None:
    """Untouched entries (not due, not of the new episodes' situations) are never
    read: a cycle after 10 and after 300 of them reads the same entries."""
    read: dict[int, dict[str, int]] = {}
    looked: dict[int, int] = {}
    for untouched in (10, 300):
        env = Env()
        # Confident insights of their own situations: nothing falls due for weeks.
        await env.memory.commit(
            WriteBatch(
                records=tuple(ingested(A, n, Kind.INSIGHT, T0, 0.95) for n in range(untouched))
            )
        )
        await env.episodes(A, 0, "success", "success", "success")
        await env.runner.run_cycle(A, NOW, 1)  # builds the indexes: reads everything once
        counting = CountingStore(env.store)
        runner = CuratorRunner(counting, env.embed, env.rescheduled)  # type: ignore[arg-type]
        await env.episodes(A, 10, "success", "success")
        report = await runner.run_cycle(A, NOW + DAY_MS, 2)
        assert report.upvoted == 1
        read[untouched], looked[untouched] = counting.read, report.entries_seen
    assert read[10] == read[300] and looked[10] == looked[300] == 1
    assert "entries" not in read[300]  # never the read of every entry
