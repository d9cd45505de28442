"""What a served recall's usage entry writes (`RedisUsageLedger`, the `UsageLedger`
port): the memories' uses and the contrarian window served, once per entry and per
recall request."""

from __future__ import annotations

from collections.abc import Sequence

from grimoire.tables.codec.watermark import WINDOW_MEMBER
from grimoire.tables.maintenance.curator_marks import queue_changed
from grimoire.tables.memory.core import RedisMemoryConcern
from grimoire.tables.transaction import agent_transaction

__all__ = ["USAGE_SEQ_WINDOW", "RedisUsageLedger"]

# How many of an agent's most recent usage entries are remembered as applied.
USAGE_SEQ_WINDOW = 10_000


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

    async def apply_usage_once(
        self,
        agent_id: str,
        seq: int,
        memory_ids: Sequence[str],
        as_of_ms: int,
        contrarian_window: int | None,
        request: str | None = None,
    ) -> bool:
        applied = self.core.keys.applied_usage(agent_id)
        # One writer per agent (its journal partition's apply loop): nothing can
        # slip in between this read and the transaction below.
        if await self.core.redis.zscore(applied, seq) is not None:
            return False
        if request is not None and await self.core.redis.zscore(applied, _request(request)):
            return False
        async with agent_transaction(self.core.redis, agent_id) as pipe:
            self.core.scripts.touch_in(
                pipe, [self.core.keys.usage(agent_id, i) for i in memory_ids], as_of_ms
            )
            # A later decay origin can promote a curated entry: its next cycle looks.
            queue_changed(pipe, self.core.keys, agent_id, memory_ids)
            if contrarian_window is not None:
                pipe.zadd(
                    self.core.keys.contrarian_window(agent_id),
                    {WINDOW_MEMBER: contrarian_window},
                    gt=True,
                )
            pipe.zadd(applied, {str(seq): seq})
            if request is not None:
                # A recall served again after its worker died journals a second
                # entry under a new seq: the request names them both.
                pipe.zadd(applied, {_request(request): seq})
            # Only recent entries can be read again (after a crash): keep those.
            pipe.zremrangebyscore(applied, "-inf", seq - USAGE_SEQ_WINDOW)
            await pipe.execute()
        return True

    async def usage_answered(self, agent_id: str, request: str, seq: int) -> bool:
        score = await self.core.redis.zscore(
            self.core.keys.applied_usage(agent_id), _request(request)
        )
        return score is not None and int(score) != seq
