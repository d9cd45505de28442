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
from redis.exceptions import ResponseError

from grimoire.tables.journal.marks import RedisAppliedMarks
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.trust.agent_keys import agent_footprint

__all__ = ["Erasure", "RedisAgentEraser", "erase_agent"]

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


class RedisAgentEraser:
    """The store's half of a forget on Redis: the agent's state and its
    applied-input marks (they name it, though with no content); once the caller
    has destroyed the agent's keys too, `compact` rewrites the append-only file so
    the erased writes (the keys among them) leave the disk."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._prefix = prefix

    async def erase(self, agent_id: str) -> Erasure:
        erased = await erase_agent(self._redis, self._prefix, agent_id)
        await RedisAppliedMarks(self._redis, self._prefix).forget(agent_id)
        return erased

    async def compact(self) -> None:
        """Redis's append-only file keeps every write it logged, the erased agent's
        among them, until it is rewritten: a rewrite now leaves it holding only
        what Redis holds. Best effort: one already running, or no append-only file
        (the memory profile), is fine."""
        try:
            config = await self._redis.config_get("appendonly")
            if config.get("appendonly") in ("yes", b"yes"):
                await self._redis.bgrewriteaof()
        except (ResponseError, NotImplementedError) as exc:
            logger.debug("append-only file not rewritten after a forget: %s", exc)
