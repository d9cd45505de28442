"""The curator cycle as a maintenance task: read → plan → embed → render → apply.

The store (`CuratorStore`) only reads a cycle's inputs and applies what this
module decided; the decisions come from the pure planner
(`grimoire.streams.learn.curator.plan.plan_cycle`), so the same inputs plan the
same cycle on Redis and in memory, and a replayed cycle number changes nothing.

What a cycle reads (`cycle_inputs`) follows what changed, not the agent's size:
the episodes since its watermark, the entries due in its schedule, the entries
those episodes' situations (and the due entries' own situations) name in the
signature index, the playbook's heuristics, and the quarantine. Only an agent
whose indexes were never built reads every entry, once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from grimoire.agents.ports.maintenance import Reschedule
from grimoire.streams.learn.curator.distill import cluster_episodes
from grimoire.streams.learn.curator.plan import effective, plan_cycle
from grimoire.streams.learn.curator.playbook import render_playbook
from grimoire.streams.learn.curator.schedule import (
    signature_keys,
    signature_member,
    split_signature_member,
)
from grimoire.streams.learn.curator.values import (
    DEFAULT_CURATOR_POLICY,
    CuratedEntry,
    CuratorPlan,
    CuratorPolicy,
    CuratorReport,
)
from grimoire.streams.maintenance.schedule import MaintenancePlan
from grimoire.streams.ports.learn import Distiller
from grimoire.tables.maintenance.curator_store import CuratorCycle, CuratorInputs, CuratorState
from grimoire.tables.ports.maintenance import CuratorStore

__all__ = [
    "CuratorOptions",
    "CuratorRunner",
    "Embed",
    "Reschedule",
    "cycle_inputs",
    "cycle_playbook",
    "report_body",
]

logger = logging.getLogger(__name__)

Embed = Callable[[Sequence[str]], Awaitable[list[bytes]]]
"""Texts → float32 vectors as bytes, one per text, in order (`infra.runtime.model_bytes`)."""


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
    maintenance event already carries (its type and agent), and the cycle's work
    (episodes read, entries looked at)."""
    body: dict[str, Any] = orjson.loads(report.event_json())
    body.pop("type", None)
    body.pop("agent_id", None)
    body["episodes_seen"] = report.episodes_seen
    body["entries_seen"] = report.entries_seen
    return body


def _by_time(entries: Iterable[CuratedEntry]) -> tuple[CuratedEntry, ...]:
    """Oldest first, ties by id: the order every store reads entries in."""
    return tuple(sorted(entries, key=lambda e: (e.ts_ms, e.memory_id)))


async def cycle_inputs(
    store: CuratorStore,
    agent_id: str,
    state: CuratorState,
    now_ms: int,
    policy: CuratorPolicy = DEFAULT_CURATOR_POLICY,
) -> CuratorInputs:
    """What cycle `state.cycle + 1` at `now_ms` plans from.

    Looked at: the entries due by `now_ms` and every entry of a situation the new
    episodes form (a vote may land on it). Context: the other entries of the due
    entries' situations (a derivation or an archive there needs them) and the
    playbook's heuristics. Everything else would come out of the cycle unchanged
    (`grimoire.streams.learn.curator.schedule`), so it is not read. An agent whose
    indexes are not built yet is read whole, and that cycle builds them."""
    if not state.scheduled:
        return await store.cycle_inputs(agent_id, state.watermark_ms)
    episodes = await store.episodes_since(agent_id, state.watermark_ms)
    due = await store.due_ids(agent_id, now_ms)
    playbook = await store.playbook_ids(agent_id)
    loaded = await store.load(agent_id, [*due, *playbook])
    voted = {cluster.signature for cluster in cluster_episodes(episodes, policy.top_keys)}
    named = voted | {loaded[i].signature for i in due if i in loaded and loaded[i].signature}
    members = await store.signature_members(agent_id, signature_keys(named))
    by_member = {m: split_signature_member(m) for found in members.values() for m in found}
    wanted = [i for _, i in by_member.values() if i not in loaded]
    loaded.update(await store.load(agent_id, wanted))
    stale = sorted(
        member
        for member, (_, memory_id) in by_member.items()
        if memory_id not in loaded or signature_member(loaded[memory_id]) != member
    )
    stale_set = set(stale)
    looked = {i for i in due if i in loaded}
    looked |= {
        memory_id
        for member, (signature, memory_id) in by_member.items()
        if member not in stale_set and signature in voted
    }
    named_ids = {*due, *playbook, *(i for _, i in by_member.values())}
    return CuratorInputs(
        episodes=tuple(episodes),
        entries=_by_time(loaded[i] for i in looked),
        quarantined=tuple(await store.quarantined(agent_id)),
        context=_by_time(e for i, e in loaded.items() if i not in looked),
        gone=tuple(sorted(named_ids - loaded.keys())),
        stale_signatures=tuple(stale),
    )


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
        policy = self.options.policy
        inputs = await cycle_inputs(self.store, agent_id, state, now_ms, policy)
        plan = plan_cycle(
            agent_id, cycle, now_ms, inputs.episodes, inputs.entries, inputs.quarantined,
            context=inputs.context, watermark_ms=max(state.watermark_ms, 0), policy=policy,
            distiller=self.options.distiller,
        )  # fmt: skip
        before = (*inputs.entries, *inputs.context)
        applied = await self.store.apply(
            CuratorCycle(
                agent_id=agent_id,
                plan=plan,
                before=before,
                vectors=await self._vectors(plan),
                playbook=cycle_playbook(agent_id, now_ms, plan, before, policy),
                gone=inputs.gone,
                stale_signatures=inputs.stale_signatures,
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
