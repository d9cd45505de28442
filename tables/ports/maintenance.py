"""The ports of the maintenance stores: stores that only store.

The maintenance tasks (decay, curator, compaction) plan in `grimoire.streams`
and keep their state through these Protocols: the decay schedule, the curator's
state, compaction plans and their phases, and the per-agent ledger that leases a
pass and records what it completed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from grimoire.streams.learn.curator.distill import EpisodeView
from grimoire.streams.learn.curator.playbook import EvidenceRow
from grimoire.streams.learn.curator.values import CuratedEntry, QuarantinedView
from grimoire.streams.maintenance.compaction import (
    CompactionCandidate,
    CompactionPlan,
    CompactionPolicy,
)
from grimoire.streams.maintenance.decay_pass import DecayBands, DecayPassPlan
from grimoire.streams.maintenance.schedule import DecayOutlook, Ledger, Task
from grimoire.streams.model.decay import DecayPolicy

if TYPE_CHECKING:
    # Type-only: each of these modules imports this one at import time.
    from grimoire.tables.maintenance.compaction_store import StoredPlan
    from grimoire.tables.maintenance.curator_store import (
        CuratorCycle,
        CuratorInputs,
        CuratorState,
    )
    from grimoire.tables.maintenance.decay_index import DueDecay

__all__ = ["CompactionStore", "CuratorStore", "DecayStore", "MaintenanceLedger"]


class MaintenanceLedger(Protocol):
    """Per agent: a lease held while a pass runs, the tick each task last completed
    at (forward only), and the history of completed tasks with their reports."""

    async def acquire(self, agent_id: str, holder: str, lease_ms: int) -> bool:
        """Take the lease unless someone else holds it (it expires after `lease_ms`)."""
        ...

    async def release(self, agent_id: str, holder: str) -> None:
        """Give the lease back if `holder` still holds it."""
        ...

    async def ledger(self, agent_id: str) -> Ledger: ...

    async def ledgers(self, agent_ids: Sequence[str]) -> dict[str, Ledger]:
        """`ledger` of many agents at once (one round trip)."""
        ...

    async def complete(
        self, agent_id: str, task: Task, tick: int, holder: str, detail: Mapping[str, Any]
    ) -> bool:
        """Record a completed task; False when the entry already stood at or past
        `tick` (another holder did it first), and then nothing is recorded."""
        ...

    async def history(self, agent_id: str) -> list[dict[str, str]]:
        """Completed tasks, oldest first: task, tick, worker and the report's fields
        as strings."""
        ...


class DecayStore(Protocol):
    """The decay schedule and its snapshots, per agent.

    Storage only: due times come from the pure functions of
    `grimoire.streams.maintenance.decay_pass` with the store's `bands` and
    `policy`, which a pass must plan with too (a snapshot's band and its next due
    time are only meaningful against the bands the schedule was computed with).
    """

    @property
    def bands(self) -> DecayBands: ...

    @property
    def policy(self) -> DecayPolicy: ...

    async def due(self, agent_id: str, as_of_ms: int, limit: int) -> DueDecay:
        """Up to `limit` members due by `as_of_ms`, oldest due first (ties by id);
        the rest stay due for a later pass."""
        ...

    async def apply_pass(
        self, agent_id: str, as_of_ms: int, plan: DecayPassPlan, *, gone: Sequence[str] = ()
    ) -> None:
        """Write a plan made from this store's `due` for the same agent and time:
        each update's snapshot (as of `as_of_ms`) and next due time (None
        unschedules), and drop `gone` and the plan's invalid entries. Idempotent:
        applying it again writes the same values."""
        ...

    async def ensure_seeded(self, agent_id: str, now_ms: int) -> int | None:
        """Schedule an agent's stored live memories once; how many were scheduled,
        or None when it had been seeded before."""
        ...

    async def outlook(self, agent_ids: Sequence[str]) -> dict[str, DecayOutlook]:
        """Each agent's schedule at a glance: seeded or not, and its earliest due
        time (one round trip for all of them)."""
        ...

    async def reschedule(self, agent_id: str, memory_ids: Sequence[str], now_ms: int) -> None:
        """Recompute due times after accesses or outcomes changed the stored fields;
        ids that are not the agent's live memories are unscheduled or ignored."""
        ...


class CuratorStore(Protocol):
    """The curator's storage, per agent. Reads see only the agent's own memories."""

    async def state(self, agent_id: str) -> CuratorState: ...

    async def cycle_inputs(self, agent_id: str, watermark_ms: int) -> CuratorInputs:
        """The live episodes newer than `watermark_ms` (up to the store's episode
        cap), every live curated entry, and the quarantined memories to review."""
        ...

    async def entries(self, agent_id: str) -> list[CuratedEntry]:
        """The live insights, heuristics and warnings (neither quarantined nor
        archived), with their decay origin and bookkeeping."""
        ...

    async def evidence(self, agent_id: str, clade_weight: float) -> list[EvidenceRow]:
        """The agent's evidence entries and its clade's copies of theirs (a copy
        weighed by `clade_weight`), for PLAYBOOK.md's evidence section."""
        ...

    async def episodes_since(self, agent_id: str, watermark_ms: int) -> list[EpisodeView]:
        """The live episodes newer than `watermark_ms`, oldest first (up to the cap)."""
        ...

    async def quarantined(self, agent_id: str) -> list[QuarantinedView]:
        """The quarantined memories to review, oldest first."""
        ...

    async def due_ids(self, agent_id: str, now_ms: int) -> list[str]:
        """The ids scheduled for a look by `now_ms`, by (due time, id)."""
        ...

    async def playbook_ids(self, agent_id: str) -> list[str]:
        """The ids the playbook index holds, sorted."""
        ...

    async def signature_members(
        self, agent_id: str, prefixes: Sequence[str]
    ) -> dict[str, list[str]]:
        """Each `signature_key` prefix's members of the signature index, sorted."""
        ...

    async def load(self, agent_id: str, memory_ids: Sequence[str]) -> dict[str, CuratedEntry]:
        """Those of `memory_ids` that are live curated entries of the agent."""
        ...

    async def get_playbook(self, agent_id: str) -> str | None: ...

    async def apply(self, cycle: CuratorCycle) -> bool:
        """Write the whole cycle or nothing: records, usage times, bookkeeping,
        quarantine decisions, playbook and state. False, writing nothing, when a
        cycle numbered the same or later has already been applied. Raises
        ValueError when a rewritten text comes without its vector."""
        ...


class CompactionStore(Protocol):
    """The storage steps of one agent's compaction, each atomic on its own.

    Tenancy: every read and write is scoped to `agent_id`; another agent's
    memory is never a candidate, never flipped and never hidden."""

    # ---- candidate scan ---------------------------------------------------------
    async def cursor(self, agent_id: str) -> int | None:
        """The event time the next scan starts at (None before the first pass)."""
        ...

    async def set_cursor(self, agent_id: str, ts_ms: int) -> None: ...

    async def first_live_ts(self, agent_id: str, since_ms: int, horizon_ms: int) -> int | None:
        """The event time of the agent's first live memory in [since, horizon]."""
        ...

    async def candidates(
        self, agent_id: str, now_ms: int, policy: CompactionPolicy, limit: int, since_ms: int
    ) -> list[CompactionCandidate]:
        """At most `limit` of the agent's live memories of the policy's level, old
        enough (`ts <= now - min_age`), in [since, since + window), oldest first,
        with their usage counters merged in."""
        ...

    async def degrees(self, agent_id: str, keys: Sequence[str]) -> dict[str, int]:
        """How many memories of the agent carry each nexus key."""
        ...

    # ---- the persisted plan -----------------------------------------------------
    async def save_plan(self, agent_id: str, plan: CompactionPlan) -> None:
        """Store the plan at PLANNED and point the agent's pending plan at it."""
        ...

    async def pending(self, agent_id: str) -> str | None:
        """The id of the agent's unfinished plan, if any."""
        ...

    async def load_plan(self, agent_id: str, plan_id: str) -> StoredPlan | None:
        """The plan and its phase; None when either is missing."""
        ...

    async def drop_pending(self, agent_id: str) -> None:
        """Forget the pending pointer (of a plan that is gone)."""
        ...

    # ---- the phases -------------------------------------------------------------
    async def existing(self, agent_id: str, memory_ids: Sequence[str]) -> set[str]:
        """The ids that have a memory record of the agent (whatever its state)."""
        ...

    async def write_summaries(
        self, agent_id: str, plan: CompactionPlan, vectors: Mapping[str, bytes]
    ) -> None:
        """Write the summaries named in `vectors` (summary id -> float32 vector)
        HIDDEN, with their nexus links, and move the plan to SUMMARIES_WRITTEN."""
        ...

    async def indexed(self, agent_id: str, summary_ids: Sequence[str]) -> int:
        """How many of these summaries (of the agent) the search index returns."""
        ...

    async def mark_indexed(self, agent_id: str, plan_id: str) -> None: ...

    async def flip(self, agent_id: str, plan: CompactionPlan) -> list[int]:
        """The logical deletion, in one step: each summary visible, each of its
        sources still live deleted + replaced_by_summary_id with a tombstone and
        queued in the outbox; the plan at FLIPPED. Per cluster: sources flipped,
        or -1 when the summary is missing (its sources stay). Idempotent."""
        ...

    async def outbox(self, agent_id: str, plan_id: str, limit: int) -> list[str]:
        """The first `limit` source ids whose vectors are still to drop."""
        ...

    async def drop_vectors(self, agent_id: str, plan_id: str, memory_ids: Sequence[str]) -> None:
        """Drop these sources' vectors and take them off the outbox's head, in one step."""
        ...

    async def finish(self, agent_id: str, plan_id: str) -> None:
        """Plan DONE (kept `PLAN_TTL_S` for audit), pending pointer and outbox gone."""
        ...
