"""Crash-safe compaction (docs/design.md §6): a persisted plan driven through idempotent,
resumable phases, over any `CompactionStore`.

  planned            the plan and a pending pointer are stored; nothing else changed
  summaries_written  each summary exists HIDDEN (deleted=1 + compaction_pending)
                     and is linked in the nexus (a hidden node is never walked)
  indexed            the search index returns every summary (so the flip shows a
                     findable one)
  flipped            ONE store step: summaries visible, sources deleted=1 +
                     replaced_by_summary_id, tombstones, outbox filled
  (outbox batches)   source vectors dropped a batch at a time: the physical deletion,
                     the only step a crash can interrupt midway
  done               pending pointer cleared

The logical deletion is atomic, so at every crash point recall reaches either the
whole cluster (before the flip) or the summary (after it), never both or neither.
Sources stay in the nexus: a walk through any of their keys lands on the source,
which recall replaces by its summary. The store records each phase in the same
step as its writes, so `resume` redoes at most one phase, and every write is
guarded so redoing it changes nothing.

What is decided here (the scan cursor's moves, the plan, which summaries still
need a vector, how long to wait for the index) is the same whatever the store;
the store only reads and writes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from grimoire.agents.ports.maintenance import DecayScheduler
from grimoire.streams.maintenance.compaction import (
    DEFAULT_COMPACTION_BUDGET,
    DEFAULT_COMPACTION_POLICY,
    CompactionBudget,
    CompactionCandidate,
    CompactionPlan,
    CompactionPolicy,
    paused,
    plan_compaction,
)
from grimoire.streams.maintenance.schedule import MaintenancePlan
from grimoire.tables.maintenance.compaction_store import CompactionStalled, Phase
from grimoire.tables.ports.maintenance import CompactionStore

__all__ = [
    "DEFAULT_COMPACTION_OPTIONS",
    "Checkpoint",
    "CompactionOptions",
    "CompactionReport",
    "CompactionRunner",
    "CompactionTask",
    "DecayScheduler",
    "Embed",
]

logger = logging.getLogger(__name__)

Embed = Callable[[Sequence[str]], Awaitable[npt.NDArray[np.float32]]]
# Called after each phase (and each outbox batch) with its name: where tests crash it.
Checkpoint = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class CompactionOptions:
    outbox_batch: int = 64  # source vectors dropped per store step
    max_candidates: int = 1_000  # one page of a scan window
    index_timeout_s: float = 10.0  # then CompactionStalled; `resume` waits again
    index_poll_s: float = 0.02

    def __post_init__(self) -> None:
        if self.outbox_batch < 1 or self.max_candidates < 1:
            raise ValueError("outbox_batch and max_candidates must be >= 1")


DEFAULT_COMPACTION_OPTIONS: Final = CompactionOptions()


@dataclass(frozen=True, slots=True)
class CompactionReport:
    agent_id: str
    plan_id: str
    status: str  # "done", "empty" (nothing to compact) or "paused" (pressure signal)
    summary_ids: tuple[str, ...] = ()
    sources: int = 0
    vectors_dropped: int = 0
    resumed: bool = False
    finished_pending: str = ""  # a crashed plan that this call finished first


@dataclass(frozen=True, slots=True)
class CompactionTask:
    """One agent's compaction: plan with the pure planner, then drive the store
    through the phases; `resume` finishes a plan a crash left behind."""

    store: CompactionStore
    embed: Embed
    policy: CompactionPolicy = DEFAULT_COMPACTION_POLICY
    options: CompactionOptions = DEFAULT_COMPACTION_OPTIONS
    checkpoint: Checkpoint | None = None

    async def compact(
        self,
        agent_id: str,
        now_ms: int,
        budget: CompactionBudget = DEFAULT_COMPACTION_BUDGET,
        *,
        signals: Sequence[str] = (),
    ) -> CompactionReport:
        """Finish any crashed plan, then plan and run a new one (`now_ms` is event time)."""
        if paused(signals, self.policy):
            logger.info("compaction paused for %s by %s", agent_id, sorted(signals))
            return CompactionReport(agent_id, "", "paused")
        previous = await self.resume(agent_id)
        candidates = await self._scan(agent_id, now_ms)
        keys = sorted({key for c in candidates for key in c.keys})
        degrees = await self.store.degrees(agent_id, keys)
        plan = plan_compaction(candidates, degrees, now_ms, self.policy, budget)
        finished = previous.plan_id if previous else ""
        if plan.empty:
            return CompactionReport(agent_id, "", "empty", finished_pending=finished)
        await self.store.save_plan(agent_id, plan)
        logger.info(
            "compaction plan %s for %s: %d clusters", plan.plan_id, agent_id, len(plan.clusters)
        )
        await self._mark(Phase.PLANNED)
        report = await self._run(agent_id, plan, Phase.PLANNED, resumed=False)
        return replace(report, finished_pending=finished)

    async def resume(self, agent_id: str) -> CompactionReport | None:
        """Drive the agent's unfinished plan to the end; None when there is none."""
        plan_id = await self.store.pending(agent_id)
        if plan_id is None:
            return None
        stored = await self.store.load_plan(agent_id, plan_id)
        if stored is None:
            logger.warning("pending compaction %s of %s has no plan; dropped", plan_id, agent_id)
            await self.store.drop_pending(agent_id)
            return None
        logger.info("resuming compaction %s of %s at %s", plan_id, agent_id, stored.phase)
        return await self._run(agent_id, stored.plan, stored.phase, resumed=True)

    # ---- the candidate scan ------------------------------------------------------

    async def _scan(self, agent_id: str, now_ms: int) -> list[CompactionCandidate]:
        """The next window of the agent's history, from a persisted cursor: each
        pass reads one window (or one page of it), so its cost follows what a
        window holds rather than the store's size; at the end the cursor wraps
        so memories that became compactable later are seen again."""
        horizon = now_ms - self.policy.min_age_ms
        start = await self.store.cursor(agent_id)
        if start is None or start > horizon:
            # First pass, or past the end: (re)start at the oldest memory. This
            # read sorts the whole range, so it runs once per sweep, not per pass.
            start = await self.store.first_live_ts(agent_id, 0, horizon)
            if start is None:
                return []
        candidates = await self._window(agent_id, now_ms, start)
        if not candidates:  # a gap in the agent's history: jump to what follows
            following = await self.store.first_live_ts(
                agent_id, start + self.policy.window_ms, horizon
            )
            if following is not None:
                start = following
                candidates = await self._window(agent_id, now_ms, start)
        if len(candidates) >= self.options.max_candidates:
            last = max(c.ts_ms for c in candidates)
            cursor = last if last > start else last + 1  # a full page of one instant
        else:
            cursor = start + self.policy.window_ms
        await self.store.set_cursor(agent_id, cursor)
        return candidates

    async def _window(self, agent_id: str, now_ms: int, start: int) -> list[CompactionCandidate]:
        return await self.store.candidates(
            agent_id, now_ms, self.policy, self.options.max_candidates, start
        )

    # ---- phases -------------------------------------------------------------------

    async def _run(
        self, agent_id: str, plan: CompactionPlan, phase: Phase, *, resumed: bool
    ) -> CompactionReport:
        if phase is Phase.PLANNED:
            await self._write_summaries(agent_id, plan)
            phase = Phase.SUMMARIES_WRITTEN
            await self._mark(phase)
        if phase is Phase.SUMMARIES_WRITTEN:
            await self._wait_indexed(agent_id, plan)
            await self.store.mark_indexed(agent_id, plan.plan_id)
            phase = Phase.INDEXED
            await self._mark(phase)
        if phase is Phase.INDEXED:
            flipped = await self.store.flip(agent_id, plan)
            for cluster, count in zip(plan.clusters, flipped, strict=True):
                if count < 0:
                    logger.warning("summary %s missing at flip: sources kept", cluster.summary_id)
            phase = Phase.FLIPPED
            await self._mark(phase)
        dropped = 0
        if phase is Phase.FLIPPED:
            dropped = await self._drain(agent_id, plan.plan_id)
            await self.store.finish(agent_id, plan.plan_id)
            await self._mark(Phase.DONE)
        return CompactionReport(
            agent_id=agent_id,
            plan_id=plan.plan_id,
            status="done",
            summary_ids=tuple(c.summary_id for c in plan.clusters),
            sources=sum(len(c.source_ids) for c in plan.clusters),
            vectors_dropped=dropped,
            resumed=resumed,
        )

    async def _write_summaries(self, agent_id: str, plan: CompactionPlan) -> None:
        """Only the summaries not written yet: one that exists may be visible
        already, and rewriting it would re-index its vectors (and re-embed)."""
        present = await self.store.existing(agent_id, [c.summary_id for c in plan.clusters])
        missing = [c for c in plan.clusters if c.summary_id not in present]
        vectors: dict[str, bytes] = {}
        if missing:
            embedded = await self.embed([c.text for c in missing])
            for row, cluster in enumerate(missing):
                vectors[cluster.summary_id] = np.asarray(embedded[row], dtype=np.float32).tobytes()
        await self.store.write_summaries(agent_id, plan, vectors)

    async def _wait_indexed(self, agent_id: str, plan: CompactionPlan) -> None:
        """The index catches up with a write shortly after it; flipping before it
        has would make the cluster briefly unfindable."""
        ids = [c.summary_id for c in plan.clusters]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.index_timeout_s
        while True:
            total = await self.store.indexed(agent_id, ids)
            if total >= len(ids):
                return
            if loop.time() > deadline:
                raise CompactionStalled(f"plan {plan.plan_id}: {total}/{len(ids)} indexed")
            await asyncio.sleep(self.options.index_poll_s)

    async def _drain(self, agent_id: str, plan_id: str) -> int:
        """Drop the replaced sources' vectors one batch per store step; a crash
        between batches leaves the rest queued, and a redone batch changes nothing."""
        dropped = 0
        while True:
            batch = await self.store.outbox(agent_id, plan_id, self.options.outbox_batch)
            if not batch:
                return dropped
            await self.store.drop_vectors(agent_id, plan_id, batch)
            dropped += len(batch)
            await self._mark(Phase.OUTBOX_BATCH)

    async def _mark(self, phase: Phase) -> None:
        if self.checkpoint is not None:
            await self.checkpoint(phase.value)


@dataclass(frozen=True, slots=True)
class CompactionRunner:
    """The compaction `TaskRunner`: finishes a crashed plan if there is one, then
    one budgeted compaction; its summaries are new memories, so their decay is
    scheduled."""

    task: CompactionTask
    decay: DecayScheduler
    budget: CompactionBudget = field(default_factory=CompactionBudget)

    async def __call__(self, plan: MaintenancePlan) -> Mapping[str, Any]:
        report = await self.task.compact(plan.agent_id, plan.as_of_ms, self.budget)
        if report.summary_ids:
            await self.decay.reschedule(plan.agent_id, list(report.summary_ids), plan.as_of_ms)
        return {
            "status": report.status,
            "plan_id": report.plan_id,
            "summaries": len(report.summary_ids),
            "summary_ids": ",".join(report.summary_ids),
            "sources": report.sources,
            "vectors_dropped": report.vectors_dropped,
            "finished_pending": report.finished_pending,
        }
