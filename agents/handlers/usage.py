"""Applying a served recall's side effects (a journal `usage` entry): the used
memories' usage counters and last access, and the anti-rumination window served.

Recall only reads; these writes happen here, in the apply loop, in journal order,
so a replay counts the same uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from grimoire.streams.journal.entry import SourceRef
from grimoire.streams.journal.usage import RecallUsage, answered_twice, fold_usage
from grimoire.tables.ports.learn import LearningStore
from grimoire.tables.ports.memory import UsageLedger

__all__ = ["ImmediateUsage", "StoreUsage"]


@dataclass
class StoreUsage:
    store: UsageLedger
    # Where a recall made for a run leaves what it returned and how it was ranked,
    # for the run's outcome to learn from (None: not kept).
    learning: LearningStore | None = None

    async def apply_usage(
        self,
        agent_id: str,
        usage: RecallUsage,
        seq: int | None = None,
        request: str | None = None,
    ) -> bool:
        """Apply the uses; with the entry's journal `seq`, as `fold_usage` decides from
        the store's view: once (a usage entry read again after a crash counts nothing
        twice), and once per recall `request` (one answered twice counts once).
        Whether anything was applied."""
        if self.learning is not None and usage.run_id and usage.factors:
            # Idempotent (a memory keeps its first recall's values), so it needs no
            # once-only guard of its own.
            await self.learning.record_recalls(
                agent_id, usage.run_id, {m: dict(values) for m, values in usage.factors}
            )
        if seq is not None:
            view = await self.store.usage_view(agent_id, seq, request)
            changes = fold_usage(view, agent_id, usage, seq, request)
            if changes is None:
                return False
            await self.store.commit_usage(changes)
            return True
        if usage.memory_ids:
            source = self.store.recall_source(agent_id)
            await source.touch(list(usage.memory_ids), usage.as_of_ms)
        if usage.contrarian_window is not None:
            await self.store.serve_contrarian(agent_id, usage.contrarian_window)
        return True

    async def answered(self, agent_id: str, request: str, seq: int) -> bool:
        """Whether another entry than `seq` was applied for the recall `request`."""
        return answered_twice(await self.store.usage_view(agent_id, seq, request), seq)


@dataclass
class ImmediateUsage:
    """A `UsageRecorder` that applies the use at once, for a handler run without a
    journal (unit tests, the in-process benchmark): never the worker's wiring."""

    applier: StoreUsage

    async def record_usage(
        self, agent_id: str, usage: RecallUsage, source: SourceRef | None
    ) -> None:
        await self.applier.apply_usage(agent_id, usage)
