"""Forgetting an agent: its stored state erased, then its journal keys destroyed.

In that order: a crash between the two leaves the keys, so the command (still in
the journal, not yet marked applied) runs again and finishes; the other order could
leave state in the store that no replay could ever reproduce or remove. The
witness chain was part of the erased state: the cached head is dropped, so the
record of the forgetting starts a new chain (it names no content). Redis's
append-only file is rewritten after it, so the erased writes leave the disk too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from grimoire.agents.ports.commands import AgentEraser
from grimoire.tables.ports.journal import KeyStore
from grimoire.tables.trust.witness_store import Witness

__all__ = ["AgentEraser", "Forgetting"]

logger = logging.getLogger(__name__)


@dataclass
class Forgetting:
    store: AgentEraser
    keys: KeyStore
    witness: Witness

    async def forget(self, agent_id: str) -> int:
        erased = await self.store.erase(agent_id)
        destroyed = await self.keys.forget(agent_id)
        self.witness.invalidate(agent_id)
        await self.store.compact()
        logger.info("forgot %s: %d keys erased, %d journal keys destroyed",
                    agent_id, erased.keys, destroyed)  # fmt: skip
        return erased.keys + erased.members
