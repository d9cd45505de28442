"""What a served recall's usage entry reads and writes in memory
(`InMemoryUsageLedger`, the `UsageLedger` port), as `RedisUsageLedger` does: the
applied marks it is folded from (`fold_usage`), then the memories' uses and the
contrarian window served with its marks."""

from __future__ import annotations

from grimoire.streams.journal.usage import UsageChanges, UsageView
from grimoire.tables.testing.curator_marks import curator_indexes
from grimoire.tables.testing.memory_core import InMemoryMemoryConcern

__all__ = ["InMemoryUsageLedger"]


class InMemoryUsageLedger(InMemoryMemoryConcern):
    """Each agent's applied usage entries (their seqs) and recall requests (the seq
    that applied each)."""

    async def serve_contrarian(self, agent_id: str, window: int) -> None:
        """Windows only move forward (ZADD GT): a late recall never reopens one."""
        contrarian = self.core.contrarian
        contrarian[agent_id] = max(window, contrarian.get(agent_id, window))

    async def usage_view(self, agent_id: str, seq: int, request: str | None) -> UsageView:
        answered = self.core.usage_requests.get(agent_id, {})
        return UsageView(
            seq_applied=seq in self.core.usage_applied.get(agent_id, set()),
            request_seq=None if request is None else answered.get(request),
        )

    async def commit_usage(self, changes: UsageChanges) -> None:
        agent_id = changes.agent_id
        for memory_id in changes.memory_ids:
            self.core.touch(memory_id, changes.as_of_ms)
        curator_indexes(self).changed(agent_id, changes.memory_ids)
        if changes.contrarian_window is not None:
            await self.serve_contrarian(agent_id, changes.contrarian_window)
        applied = self.core.usage_applied.setdefault(agent_id, set())
        answered = self.core.usage_requests.setdefault(agent_id, {})
        applied.add(changes.seq)
        if changes.request is not None:
            answered[changes.request] = changes.seq
        # Redis's ZREMRANGEBYSCORE over the applied marks, entries and requests alike.
        applied.difference_update([s for s in applied if s < changes.forget_below])
        for request in [r for r, s in answered.items() if s < changes.forget_below]:
            del answered[request]
