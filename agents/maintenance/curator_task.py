"""The curator cycle as a maintenance task: read → plan → embed → render → apply.

The store (`CuratorStore`) only reads a cycle's inputs and applies what this
module decided; the decisions come from the pure planner
(`grimoire.streams.learn.curator.plan.plan_cycle`), so the same inputs plan the
same cycle on Redis and in memory, and a replayed cycle number changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import orjson

from grimoire.streams.learn.curator.distill import Distiller
from grimoire.streams.learn.curator.plan import effective, plan_cycle
from grimoire.streams.learn.curator.playbook import render_playbook
from grimoire.streams.learn.curator.values import (
    DEFAULT_CURATOR_POLICY,
    CuratedEntry,
    CuratorPlan,
    CuratorPolicy,
    CuratorReport,
)
from grimoire.streams.maintenance.schedule import MaintenancePlan
from grimoire.tables.maintenance.curator_store import CuratorCycle, CuratorState, CuratorStore

__all__ = [
    "CuratorOptions",
    "CuratorRunner",
    "Embed",
    "Reschedule",
    "cycle_playbook",
    "report_body",
]

logger = logging.getLogger(__name__)

Embed = Callable[[Sequence[str]], Awaitable[list[bytes]]]
"""Texts → float32 vectors as bytes, one per text, in order (`infra.runtime.model_bytes`)."""


class Reschedule(Protocol):
    """Recomputes the decay due times of memories whose stored fields changed
    (`DecayStore.reschedule`)."""

    async def __call__(self, agent_id: str, memory_ids: Sequence[str], now_ms: int) -> None: ...


@dataclass(frozen=True, slots=True)
class CuratorOptions:
    policy: CuratorPolicy = DEFAULT_CURATOR_POLICY
    distiller: Distiller | None = None  # None: the planner's extractive distiller


def cycle_playbook(
    agent_id: str,
    now_ms: int,
    plan: CuratorPlan,
    before: Sequence[CuratedEntry],
    policy: CuratorPolicy,
) -> str:
    """PLAYBOOK.md after the cycle, each heuristic at the decayed confidence the
    cycle decided on (the stored one only moves when a vote lands)."""
    final = {entry.memory_id: entry for entry in before}
    final.update({change.entry.memory_id: change.entry for change in plan.changes})
    shown = [
        replace(entry, confidence=effective(entry, now_ms, policy)) for entry in final.values()
    ]
    return render_playbook(agent_id, shown)


def report_body(report: CuratorReport) -> dict[str, Any]:
    """The task's report: the `CuratorCycleComplete` body without what the
    maintenance event already carries (its type and agent)."""
    body: dict[str, Any] = orjson.loads(report.event_json())
    body.pop("type", None)
    body.pop("agent_id", None)
    return body


@dataclass(frozen=True, slots=True)
class CuratorRunner:
    """One curator cycle (numbered by the tick, so a replay numbers it alike); its
    votes and new entries change confidences, so their decay is rescheduled."""

    store: CuratorStore
    embed: Embed
    reschedule: Reschedule
    options: CuratorOptions = field(default_factory=CuratorOptions)

    async def __call__(self, plan: MaintenancePlan) -> Mapping[str, Any]:
        report, changed = await self._cycle(plan.agent_id, plan.as_of_ms, plan.curator_cycle)
        # Only the entries this cycle wrote: an unchanged entry's due time still
        # holds (rescheduling every entry made each cycle's cost follow how many
        # entries the agent has, not what the cycle changed).
        await self.reschedule(plan.agent_id, changed, plan.as_of_ms)
        return report_body(report)

    async def run_cycle(self, agent_id: str, now_ms: int, cycle: int) -> CuratorReport:
        """Cycle `cycle` as of `now_ms`; for a number that already ran, only that
        cycle's report (or an empty one for an older number)."""
        return (await self._cycle(agent_id, now_ms, cycle))[0]

    async def _cycle(
        self, agent_id: str, now_ms: int, cycle: int
    ) -> tuple[CuratorReport, list[str]]:
        """The cycle's report and the ids of the entries it wrote (none when the
        number already ran or the cycle lost a race to another run of it)."""
        state = await self.store.state(agent_id)
        if cycle <= state.cycle:
            logger.info(
                "curator cycle %d for %s already ran (last %d)", cycle, agent_id, state.cycle
            )
            return _replayed(state, agent_id, now_ms, cycle), []
        inputs = await self.store.cycle_inputs(agent_id, state.watermark_ms)
        policy = self.options.policy
        plan = plan_cycle(
            agent_id, cycle, now_ms, inputs.episodes, inputs.entries, inputs.quarantined,
            watermark_ms=max(state.watermark_ms, 0), policy=policy,
            distiller=self.options.distiller,
        )  # fmt: skip
        applied = await self.store.apply(
            CuratorCycle(
                agent_id=agent_id,
                plan=plan,
                before=inputs.entries,
                vectors=await self._vectors(plan),
                playbook=cycle_playbook(agent_id, now_ms, plan, inputs.entries, policy),
            )
        )
        if not applied:  # another run of this number got there first
            logger.warning("curator cycle %d for %s was applied meanwhile", cycle, agent_id)
            return _replayed(await self.store.state(agent_id), agent_id, now_ms, cycle), []
        return plan.report, [change.entry.memory_id for change in plan.changes]

    async def _vectors(self, plan: CuratorPlan) -> dict[str, bytes]:
        """One embedding call for every text the cycle wrote (new or reworded)."""
        changed = [change.entry for change in plan.changes if change.text_changed]
        if not changed:
            return {}
        vectors = await self.embed([entry.text for entry in changed])
        if len(vectors) != len(changed):
            raise ValueError(f"embedder returned {len(vectors)} vectors for {len(changed)} texts")
        return {entry.memory_id: vector for entry, vector in zip(changed, vectors, strict=True)}


def _replayed(state: CuratorState, agent_id: str, now_ms: int, cycle: int) -> CuratorReport:
    if cycle == state.cycle and state.report is not None:
        return state.report
    return CuratorReport(agent_id=agent_id, cycle=cycle, now_ms=now_ms)
