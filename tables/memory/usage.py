"""What a served recall's usage entry reads and writes (`RedisUsageLedger`, the
`UsageLedger` port): the applied marks it is folded from (`fold_usage`), then the
memories' uses and the contrarian window served with its marks, in one transaction."""

from __future__ import annotations

from grimoire.streams.journal.usage import UsageChanges, UsageView
from grimoire.tables.codec.watermark import WINDOW_MEMBER
from grimoire.tables.maintenance.curator_marks import queue_changed
from grimoire.tables.memory.core import RedisMemoryConcern
from grimoire.tables.transaction import agent_transaction

__all__ = ["RedisUsageLedger"]


def _request(request: str) -> str:
    """A recall request's member of the applied-usage set (seqs are bare numbers)."""
    return f"r:{request}"


class RedisUsageLedger(RedisMemoryConcern):
    """Each agent's applied usage entries and recall requests, in one sorted set
    scored by journal seq."""

    async def serve_contrarian(self, agent_id: str, window: int) -> None:
        """Windows only move forward (GT): a late recall never reopens one."""
        await self.core.redis.zadd(
            self.core.keys.contrarian_window(agent_id), {WINDOW_MEMBER: window}, gt=True
        )

    async def usage_view(self, agent_id: str, seq: int, request: str | None) -> UsageView:
        applied = self.core.keys.applied_usage(agent_id)
        async with self.core.redis.pipeline(transaction=False) as pipe:
            pipe.zscore(applied, seq)
            if request is not None:
                pipe.zscore(applied, _request(request))
            scores = await pipe.execute()
        # A request's score is the seq that applied it (seqs start at 1: never 0).
        answered = scores[1] if request is not None else None
        return UsageView(
            seq_applied=scores[0] is not None,
            request_seq=None if answered is None else int(answered),
        )

    async def commit_usage(self, changes: UsageChanges) -> None:
        agent_id, seq = changes.agent_id, changes.seq
        applied = self.core.keys.applied_usage(agent_id)
        # One writer per agent (its journal partition's apply loop): nothing can
        # slip in between the view this was folded from and this transaction.
        async with agent_transaction(self.core.redis, agent_id) as pipe:
            self.core.scripts.touch_in(
                pipe,
                [self.core.keys.usage(agent_id, i) for i in changes.memory_ids],
                changes.as_of_ms,
            )
            # A later decay origin can promote a curated entry: its next cycle looks.
            queue_changed(pipe, self.core.keys, agent_id, changes.memory_ids)
            if changes.contrarian_window is not None:
                pipe.zadd(
                    self.core.keys.contrarian_window(agent_id),
                    {WINDOW_MEMBER: changes.contrarian_window},
                    gt=True,
                )
            pipe.zadd(applied, {str(seq): seq})
            if changes.request is not None:
                # A recall served again after its worker died journals a second
                # entry under a new seq: the request names them both.
                pipe.zadd(applied, {_request(changes.request): seq})
            # Only recent entries can be read again (after a crash): keep those.
            pipe.zremrangebyscore(applied, "-inf", f"({changes.forget_below}")
            await pipe.execute()
