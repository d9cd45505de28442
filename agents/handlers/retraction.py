"""Retract a source event and what derives from it; pin and unpin a memory.

`RetractionHandler.retract` reads the part of the derivation index the source
reaches (`DerivationStore`), plans the cascade with the pure
`grimoire.streams.trust.retraction.plan_retraction`, embeds the summaries it
rebuilds (one model call), regenerates PLAYBOOK.md when a curated entry was
demoted or retracted, applies everything in one store step, and then reports
each step to the witness callback (`op`, the memory ids, details without text).

The journal's apply loop calls these when it applies a `retract`, `pin` or
`unpin` command entry: it is the only writer of the agent's state, so reading
then writing across round trips is race-free, and `at_ms` is the command's event
time (never the wall clock), so a replay writes the same.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from grimoire.agents.ports import Embedder
from grimoire.streams.learn.curator.plan import effective
from grimoire.streams.learn.curator.playbook import render_playbook
from grimoire.streams.model.records import Kind
from grimoire.streams.trust.retraction import (
    DEFAULT_RETRACTION_POLICY,
    DerivationRole,
    DerivationView,
    Edge,
    RetractionOp,
    RetractionPlan,
    RetractionPolicy,
    Step,
    plan_retraction,
)
from grimoire.tables.ports.maintenance import CuratorStore
from grimoire.tables.ports.trust import DerivationStore

__all__ = [
    "PIN_OP",
    "PLAYBOOK_OP",
    "UNPIN_OP",
    "RetractionHandler",
    "RetractionReport",
    "Witness",
    "no_witness",
]

logger = logging.getLogger(__name__)

Witness = Callable[[str, Sequence[str], Mapping[str, object]], Awaitable[None]]
"""(op, memory ids, details) of one mutation: the lead wires it to the witness chain."""

PLAYBOOK_OP = "retract.playbook_regenerated"
PIN_OP = "pin.memory"
UNPIN_OP = "unpin.memory"


async def no_witness(op: str, ids: Sequence[str], details: Mapping[str, object]) -> None:
    return None


@dataclass(frozen=True, slots=True)
class RetractionReport:
    agent_id: str
    source_id: str
    steps: tuple[Step, ...] = ()
    dropped_edges: int = 0
    playbook_regenerated: bool = False

    def ids(self, op: RetractionOp) -> tuple[str, ...]:
        return tuple(step.memory_id for step in self.steps if step.op is op)

    @property
    def retracted(self) -> tuple[str, ...]:
        return self.ids(RetractionOp.RETRACT)

    @property
    def memory_ids(self) -> tuple[str, ...]:
        """Every memory the retraction changed, in the order of its steps."""
        return tuple(dict.fromkeys(step.memory_id for step in self.steps))

    def details(self) -> dict[str, object]:
        """The retraction as a whole, for a witness record: ids and counts, no text."""
        rebuilt = [step for step in self.steps if step.op is RetractionOp.REBUILD]
        aggregate = Kind.AGGREGATE.value
        return {
            "source_event_id": self.source_id,
            "retracted": list(self.ids(RetractionOp.RETRACT)),
            "aggregate_shares": list(self.ids(RetractionOp.REDUCE)),
            "summaries_rebuilt": [s.memory_id for s in rebuilt if s.kind != aggregate],
            "aggregates_rebuilt": [s.memory_id for s in rebuilt if s.kind == aggregate],
            "insights_demoted": list(self.ids(RetractionOp.DEMOTE)),
            "reinforcements": list(self.ids(RetractionOp.UNREINFORCE)),
            "edges_dropped": self.dropped_edges,
            "playbook_regenerated": self.playbook_regenerated,
        }


@dataclass
class RetractionHandler:
    store: DerivationStore
    embedder: Embedder
    curator: CuratorStore | None = None  # PLAYBOOK.md is regenerated through it
    witness: Witness = no_witness
    policy: RetractionPolicy = field(default_factory=lambda: DEFAULT_RETRACTION_POLICY)

    async def retract(self, agent_id: str, source_event_id: str, *, at_ms: int) -> RetractionReport:
        """Retract everything derived from `source_event_id` (an input event id, or
        a memory id: then that memory too) in the agent's memory."""
        view = await self._view(agent_id, source_event_id)
        plan = plan_retraction(source_event_id, view, self.policy)
        if plan.empty:
            return RetractionReport(agent_id, source_event_id)
        vectors = await self._vectors(plan)
        playbook = await self._playbook(agent_id, plan, at_ms)
        await self.store.apply(agent_id, plan, vectors, at_ms=at_ms, playbook=playbook)
        for step in plan.steps:
            details = {"source_event_id": source_event_id, "at": at_ms, **step.details()}
            await self.witness(step.op.value, (step.memory_id,), details)
        if playbook is not None:
            changed = sorted(s.memory_id for s in plan.steps if s.curated)
            await self.witness(
                PLAYBOOK_OP, changed, {"source_event_id": source_event_id, "at": at_ms}
            )
        logger.info(
            "retracted %s of %s: %d steps, %d edges dropped",
            source_event_id, agent_id, len(plan.steps), len(plan.dropped),
        )  # fmt: skip
        return RetractionReport(
            agent_id,
            source_event_id,
            plan.steps,
            len(plan.dropped),
            playbook is not None,
        )

    async def pin(self, agent_id: str, memory_id: str) -> bool:
        """Exempt one of the agent's memories from compaction and archiving;
        False (and nothing witnessed) when the agent has no memory by that id."""
        return await self._pin(agent_id, memory_id, pinned=True)

    async def unpin(self, agent_id: str, memory_id: str) -> bool:
        return await self._pin(agent_id, memory_id, pinned=False)

    async def _pin(self, agent_id: str, memory_id: str, *, pinned: bool) -> bool:
        if not await self.store.set_pinned(agent_id, memory_id, pinned):
            return False
        await self.witness(PIN_OP if pinned else UNPIN_OP, (memory_id,), {"pinned": pinned})
        return True

    # ---- reading the part of the graph the source reaches ---------------------------

    async def _view(self, agent_id: str, source_id: str) -> DerivationView:
        """Edges out of the source and out of everything derived from it
        (transitively), the edges into those memories, the memories themselves
        with every source a summary of them keeps and every aggregate's origin,
        and the degrees of the keys a rebuilt summary may roll up."""
        edges: set[Edge] = set()
        seen = {source_id}
        frontier = [source_id]
        while frontier:
            found = await self.store.derived_from(agent_id, frontier)
            edges.update(found)
            frontier = sorted({edge.derived_id for edge in found} - seen)
            seen.update(frontier)
        affected = sorted(seen - {source_id})
        edges.update(await self.store.sources_of(agent_id, affected))
        # The summaries' sources and the aggregates' origins too: a rebuild reads
        # the ones left. (Other sources are input events, or memories the plan
        # only needs the ids of.)
        readable = (DerivationRole.COMPACTED, DerivationRole.ORIGIN)
        kept = {edge.source_id for edge in edges if edge.role in readable}
        nodes = await self.store.nodes(agent_id, sorted({source_id, *affected, *kept}))
        summaries = {i for i in affected if i in nodes and nodes[i].kind == Kind.SUMMARY.value}
        keys: set[str] = set()
        for edge in edges:
            source = nodes.get(edge.source_id)
            if edge.derived_id in summaries and edge.role is DerivationRole.COMPACTED and source:
                keys.update(source.content.keys if source.content else ())
        degrees = await self.store.degrees(agent_id, sorted(keys))
        return DerivationView(tuple(sorted(edges)), nodes, degrees)

    async def _vectors(self, plan: RetractionPlan) -> dict[str, bytes]:
        """One embedding call for every summary the retraction rebuilds."""
        rebuilt = [step for step in plan.of(RetractionOp.REBUILD) if step.summary is not None]
        if not rebuilt:
            return {}
        texts = [step.summary.text for step in rebuilt if step.summary is not None]
        embedded = await self.embedder.embed(texts)
        if len(embedded) != len(rebuilt):
            raise ValueError(f"embedder returned {len(embedded)} vectors for {len(rebuilt)}")
        return {
            step.memory_id: np.asarray(embedded[row], dtype=np.float32).tobytes()
            for row, step in enumerate(rebuilt)
        }

    async def _playbook(self, agent_id: str, plan: RetractionPlan, at_ms: int) -> str | None:
        """PLAYBOOK.md after the retraction, when a curated entry changed and the
        document with it: each heuristic at its decayed confidence as of the
        retraction (as a curator cycle renders it)."""
        if self.curator is None or not plan.curated_changed:
            return None
        entries = {entry.memory_id: entry for entry in await self.curator.entries(agent_id)}
        for step in plan.steps:
            if step.op is RetractionOp.RETRACT:
                entries.pop(step.memory_id, None)
            elif step.op is RetractionOp.DEMOTE and step.entry is not None:
                entries[step.memory_id] = step.entry
        policy = self.policy.curator
        shown = [
            replace(entry, confidence=effective(entry, at_ms, policy)) for entry in entries.values()
        ]
        rendered = render_playbook(agent_id, shown)
        if rendered == await self.curator.get_playbook(agent_id):
            return None
        return rendered
