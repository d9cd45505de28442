"""How far the fold got in each journal partition (`Keyspace.journal_applied`).

Redis with its append-only file fsynced every second can come back from a crash
without its last second of writes, while the consumer group's committed journal
offsets (kept by the broker) already point past them: resuming there would skip
entries whose effects were lost. This mark is written after each batch's own
writes, in the same Redis, so whatever Redis kept of it is no further than what it
kept of the fold; the worker folds again from the mark to where the group resumes.
"""

from __future__ import annotations

from collections.abc import Mapping

from redis.asyncio import Redis

from grimoire.tables.journal.marks import FORWARD_ONLY_HSET
from grimoire.tables.keyspace import Keyspace

__all__ = ["RedisJournalProgress"]


class RedisJournalProgress:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._key = Keyspace(prefix).journal_applied
        # A partition's mark only moves forward: a batch folded again after a retry
        # must not pull it back.
        self._advance = redis.register_script(FORWARD_ONLY_HSET)

    async def load(self, partition: int) -> int | None:
        raw = await self._redis.hget(self._key, str(partition))  # type: ignore[misc]
        return None if raw is None else int(raw)

    async def advance(self, offsets: Mapping[int, int]) -> None:
        if not offsets:
            return
        args: list[str | int] = []
        for partition, offset in sorted(offsets.items()):
            args += [str(partition), offset]
        await self._advance(keys=[self._key], args=args)
