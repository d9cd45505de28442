"""Deployment-wide counters in the metrics hash (`Keyspace.metrics`) that no store
writes as part of its own changes: dead letters by reason."""

from __future__ import annotations

from redis.asyncio import Redis

from grimoire.tables.keyspace import Keyspace

__all__ = ["DEAD_LETTER_FIELD", "RedisDeadLetterCounts"]

DEAD_LETTER_FIELD = "dead_letters:"  # + reason


class RedisDeadLetterCounts:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._key = Keyspace(prefix).metrics

    async def count(self, reason: str) -> None:
        await self._redis.hincrby(self._key, f"{DEAD_LETTER_FIELD}{reason}", 1)
