"""Wiping a deployment's memory state: the fold's whole output, for a rebuild.

Everything under the prefix goes (the index and its documents, every agent's
state, the applied-source marks, the witness logs) except the key store: the
agents' journal keys and sequence counters are not part of the fold, and without
them the journal cannot be read back.
"""

from __future__ import annotations

import logging

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.routing import SearchRouting

__all__ = ["wipe_memory_state"]

logger = logging.getLogger(__name__)

_BATCH = 1_000


async def wipe_memory_state(redis: Redis, prefix: str) -> int:
    """Delete the fold's state under `prefix`; how many keys went."""
    keys = Keyspace(prefix)
    # Every master's index on a cluster (`grimoire.tables.routing`).
    for target in await SearchRouting(redis, prefix).every_master():
        try:
            await redis.execute_command("FT.DROPINDEX", target.index, **target.options)
        except ResponseError:
            logger.info("no index %s to drop", target.index)
    doomed: list[str] = []
    removed = 0
    async for raw in redis.scan_iter(match=keys.deployment_pattern, count=_BATCH):
        key = text_of(raw)
        if keys.is_keystore_key(key):
            continue
        doomed.append(key)
        if len(doomed) >= _BATCH:
            removed += await redis.delete(*doomed)
            doomed = []
    if doomed:
        removed += await redis.delete(*doomed)
    logger.info("wiped %d keys of %s (the key store kept)", removed, prefix)
    return removed
