"""The publication outbox: events the fold committed, until the broker has them.

A decision's memory-event and witness event are queued in the same transaction
as the decision (`Outbox.part`), then published; once the producer has flushed
them, they are trimmed. A worker killed in between leaves them queued, and the
partition's next owner publishes them before applying anything: every decision
is heard of at least once. A kill after the flush and before the trim publishes
them again, byte for byte (each event names its candidate, memory or witness
sequence, so a consumer recognises the copy).

One list per journal partition (`Keyspace.outbox`): the partition's single apply
loop is its only writer, so what it finds there at the start of a batch is
exactly what an earlier owner left behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from redis.asyncio import Redis

from grimoire.tables.codec.outbox_entry import (
    OutboxEntry,
    decode_outbox_entry,
    encode_outbox_entry,
)
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.transaction import TransactionPart

__all__ = ["Outbox", "OutboxEntry", "RedisOutbox"]


class Outbox(Protocol):
    def part(self, journal_partition: int, entries: Sequence[OutboxEntry]) -> TransactionPart:
        """`entries` queued behind the partition's others, inside a store's
        transaction."""
        ...

    async def pending(self, journal_partition: int) -> list[OutboxEntry]:
        """Everything queued for the partition, oldest first."""
        ...

    async def remove(self, journal_partition: int, count: int) -> None:
        """Drop the oldest `count` entries (published and acknowledged)."""
        ...


class _ListPart:
    def __init__(self, redis: Redis, key: str, values: list[bytes]) -> None:
        self._redis = redis
        self._key = key
        self._values = values

    def queue(self, pipe: Any) -> None:
        if self._values:
            pipe.rpush(self._key, *self._values)

    async def apply_alone(self) -> None:
        if self._values:
            await self._redis.rpush(self._key, *self._values)


class RedisOutbox:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self.keys = Keyspace(prefix)

    def part(self, journal_partition: int, entries: Sequence[OutboxEntry]) -> TransactionPart:
        values = [encode_outbox_entry(entry) for entry in entries]
        return _ListPart(self._redis, self.keys.outbox(journal_partition), values)

    async def pending(self, journal_partition: int) -> list[OutboxEntry]:
        rows = await self._redis.lrange(self.keys.outbox(journal_partition), 0, -1)
        return [decode_outbox_entry(row) for row in rows]

    async def remove(self, journal_partition: int, count: int) -> None:
        if count > 0:
            await self._redis.ltrim(self.keys.outbox(journal_partition), count, -1)
