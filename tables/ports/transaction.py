"""The port for writes that commit inside another store's transaction.

A handler often has to write to several stores at once (an outcome's credits and
what the run learned, an entry's effects and its outbox). Each such write is a
`TransactionPart`: the store owning the transaction queues it on its pipeline, a
store without transactions applies it alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    # Type-only: `grimoire.tables.transaction` imports this module at import time.
    from grimoire.tables.transaction import AgentTransactions

__all__ = ["TransactionPart"]


class TransactionPart(Protocol):
    def queue(self, tx: AgentTransactions) -> None:
        """Queue the writes in a store's transaction (each agent's on `tx.agent`)."""
        ...

    async def apply_alone(self) -> None:
        """Write them with no pipeline (stores that have no transactions)."""
        ...
