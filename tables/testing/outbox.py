"""The reference `Outbox`: a list per agent, listed per journal partition, as
RedisOutbox keeps them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grimoire.tables.codec.outbox_entry import OutboxEntry
from grimoire.tables.ports.transaction import TransactionPart

__all__ = ["InMemoryOutbox"]


class _OutboxPart:
    def __init__(
        self, queues: dict[str, list[OutboxEntry]], entries: Sequence[OutboxEntry]
    ) -> None:
        self._queues = queues
        self._entries = list(entries)

    def queue(self, tx: Any) -> None:
        raise TypeError("the in-memory outbox joins no Redis pipeline")

    async def apply_alone(self) -> None:
        for entry in self._entries:
            self._queues.setdefault(entry.key, []).append(entry)


class InMemoryOutbox:
    def __init__(self) -> None:
        # journal partition -> agent -> its entries, oldest first
        self.queues: dict[int, dict[str, list[OutboxEntry]]] = {}

    def part(self, journal_partition: int, entries: Sequence[OutboxEntry]) -> TransactionPart:
        return _OutboxPart(self.queues.setdefault(journal_partition, {}), entries)

    async def pending(self, journal_partition: int) -> list[OutboxEntry]:
        agents = self.queues.get(journal_partition, {})
        return [entry for agent in sorted(agents) for entry in agents[agent]]

    async def remove(self, journal_partition: int, counts: Mapping[str, int]) -> None:
        agents = self.queues.get(journal_partition, {})
        for agent_id, count in counts.items():
            del agents.get(agent_id, [])[: max(0, count)]
