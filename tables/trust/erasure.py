"""Erasing an agent from the store (the `forget` command's storage half).

Everything the agent's footprint names goes: its memories (and with them their
index entries), usage, tombstones and snapshots, its graph, counters, schedules,
curator state, maintenance ledger, witness log and outbox, and its single values
(field state, watermark, contrarian window), then its entry in the registry of
known agents. Its journal keys are destroyed by the key store, which makes its
journal entries unreadable (the caller does both, store first). Every key but the
registry is in the agent's slot; a journal partition's list of agents with an
outbox forgets it at the partition's next hand-over (the list is found empty).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from redis.asyncio import Redis

from grimoire.tables.keyspace import Keyspace
from grimoire.tables.trust.agent_keys import agent_footprint

__all__ = ["Erasure", "erase_agent"]

logger = logging.getLogger(__name__)

_BATCH = 500


@dataclass(frozen=True, slots=True)
class Erasure:
    keys: int
    members: int


async def erase_agent(redis: Redis, prefix: str, agent_id: str) -> Erasure:
    footprint = await agent_footprint(redis, prefix, agent_id)
    keys = footprint.keys
    for start in range(0, len(keys), _BATCH):
        await redis.delete(*keys[start : start + _BATCH])
    members = footprint.member_pairs
    if members:
        # Each single value has a key of its own.
        await redis.delete(*sorted({key for key, _ in members}))
    await redis.zrem(Keyspace(prefix).agents, agent_id)
    logger.info("erased %s: %d keys, %d members", agent_id, len(keys), len(members))
    return Erasure(len(keys), len(members))
