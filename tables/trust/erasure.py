"""Erasing an agent from the store (the `forget` command's storage half).

Everything the agent's footprint names goes: its memories (and with them their
index entries), usage, tombstones and snapshots, its graph, counters, schedules,
curator state, maintenance ledger and witness log, and its members of the
deployment-wide keys. Its journal keys are destroyed by the key store, which makes
its journal entries unreadable (the caller does both, store first).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from redis.asyncio import Redis

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
        async with redis.pipeline(transaction=True) as pipe:
            for key, member in members:
                # One call for either type: the members live in hashes and sorted sets.
                pipe.eval(_REMOVE_MEMBER, 1, key, member)
            await pipe.execute()
    logger.info("erased %s: %d keys, %d members", agent_id, len(keys), len(members))
    return Erasure(len(keys), len(members))


_REMOVE_MEMBER = """
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'hash' then return redis.call('HDEL', KEYS[1], ARGV[1]) end
if kind == 'zset' then return redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0
"""
