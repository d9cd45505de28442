"""Writes that ride in another store's transaction.

The apply loop's effects of a mutation (its witness record, the events that tell
the world about it) must be stored with the mutation or not at all: a worker
killed between the two would leave a decision nobody hears of, and a chain with a
gap. A store that commits a mutation takes such parts and queues them on its own
MULTI/EXEC pipeline; a store with no transactions (the in-memory references)
applies them right after its own writes.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["TransactionPart"]


class TransactionPart(Protocol):
    def queue(self, pipe: Any) -> None:
        """Queue the writes on a Redis pipeline (a MULTI/EXEC one)."""
        ...

    async def apply_alone(self) -> None:
        """Write them with no pipeline (stores that have no transactions)."""
        ...
