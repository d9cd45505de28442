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

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from grimoire.tables.journal.keystore import KeyStore
from grimoire.tables.journal.marks import RedisAppliedMarks
from grimoire.tables.trust.erasure import erase_agent
from grimoire.tables.trust.witness_store import Witness

__all__ = ["Forgetting"]

logger = logging.getLogger(__name__)


@dataclass
class Forgetting:
    redis: Redis
    prefix: str
    keys: KeyStore
    witness: Witness

    async def forget(self, agent_id: str) -> int:
        erased = await erase_agent(self.redis, self.prefix, agent_id)
        # Its applied-input marks name it (no content, but nothing of it stays).
        await RedisAppliedMarks(self.redis, self.prefix).forget(agent_id)
        destroyed = await self.keys.forget(agent_id)
        self.witness.invalidate(agent_id)
        await self._compact_append_only_file()
        logger.info("forgot %s: %d keys erased, %d journal keys destroyed",
                    agent_id, erased.keys, destroyed)  # fmt: skip
        return erased.keys + erased.members

    async def _compact_append_only_file(self) -> None:
        """Redis's append-only file keeps every write it logged, the erased agent's
        among them, until it is rewritten: a rewrite now leaves it holding only
        what Redis holds. Best effort: one already running, or no append-only file
        (the memory profile), is fine."""
        try:
            config = await self.redis.config_get("appendonly")
            if config.get("appendonly") in ("yes", b"yes"):
                await self.redis.bgrewriteaof()
        except (ResponseError, NotImplementedError) as exc:
            logger.debug("append-only file not rewritten after a forget: %s", exc)
