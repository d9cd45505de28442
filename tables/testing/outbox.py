"""The reference `Outbox`: a list per journal partition, as RedisOutbox keeps it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grimoire.tables.codec.outbox_entry import OutboxEntry
from grimoire.tables.transaction import TransactionPart

__all__ = ["InMemoryOutbox"]


class _Part:
    def __init__(self, queue: list[OutboxEntry], entries: Sequence[OutboxEntry]) -> None:
        self._queue = queue
        self._entries = list(entries)

    def queue(self, pipe: Any) -> None:
        raise TypeError("the in-memory outbox joins no Redis pipeline")

    async def apply_alone(self) -> None:
        self._queue.extend(self._entries)


class InMemoryOutbox:
    def __init__(self) -> None:
        self.queues: dict[int, list[OutboxEntry]] = {}

    def part(self, journal_partition: int, entries: Sequence[OutboxEntry]) -> TransactionPart:
        return _Part(self.queues.setdefault(journal_partition, []), entries)

    async def pending(self, journal_partition: int) -> list[OutboxEntry]:
        return list(self.queues.get(journal_partition, []))

    async def remove(self, journal_partition: int, count: int) -> None:
        queue = self.queues.get(journal_partition, [])
        del queue[: max(0, count)]
