"""Per-agent maintenance state in Redis: the ledger of completed ticks and a lease.

Partition ownership already routes an agent's commands to one worker; the lease
covers the moments it does not (a rebalance hands the partition over while the
old owner is still mid-pass, or two leaders briefly both fire the timer). The
ledger only advances after a task completed, and only forwards, so a duplicate
command finds nothing due.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from redis.asyncio import Redis

from grimoire.streams.maintenance.schedule import Ledger, Task
from grimoire.tables.keyspace import Keyspace

__all__ = ["MaintenanceLedgerStore", "agent_watermarks", "known_agents"]

logger = logging.getLogger(__name__)

# Advance a ledger entry only forwards; returns 1 when it moved.
_ADVANCE = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current and tonumber(current) >= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

# Release the lease only if we still hold it (it may have expired and moved on).
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class MaintenanceLedgerStore:
    """`MaintenanceLedger` in Redis: a hash per agent advanced by a forward-only
    script, a stream of completions, and the lease as a key with an expiry."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._keys = Keyspace(prefix)
        self._advance = redis.register_script(_ADVANCE)
        self._release = redis.register_script(_RELEASE)

    def ledger_key(self, agent_id: str) -> str:
        return self._keys.maintenance_ledger(agent_id)

    def lease_key(self, agent_id: str) -> str:
        return self._keys.maintenance_lease(agent_id)

    def log_key(self, agent_id: str) -> str:
        return self._keys.maintenance_log(agent_id)

    async def acquire(self, agent_id: str, holder: str, lease_ms: int) -> bool:
        return bool(await self._redis.set(self.lease_key(agent_id), holder, nx=True, px=lease_ms))

    async def release(self, agent_id: str, holder: str) -> None:
        await self._release(keys=[self.lease_key(agent_id)], args=[holder])

    async def ledger(self, agent_id: str) -> Ledger:
        return _ledger(await self._redis.hgetall(self.ledger_key(agent_id)))

    async def ledgers(self, agent_ids: Sequence[str]) -> dict[str, Ledger]:
        if not agent_ids:
            return {}
        async with self._redis.pipeline(transaction=False) as pipe:
            for agent_id in agent_ids:
                pipe.hgetall(self.ledger_key(agent_id))
            rows = await pipe.execute()
        return {agent_id: _ledger(raw) for agent_id, raw in zip(agent_ids, rows, strict=True)}

    async def complete(
        self, agent_id: str, task: Task, tick: int, holder: str, detail: Mapping[str, Any]
    ) -> bool:
        """Record a completed task; False when a ledger entry at or past `tick`
        already existed (another holder did it first)."""
        moved = bool(await self._advance(keys=[self.ledger_key(agent_id)], args=[task.value, tick]))
        if moved:
            entry = {"task": task.value, "tick": tick, "worker": holder}
            entry.update({k: str(v) for k, v in detail.items()})
            await self._redis.xadd(self.log_key(agent_id), entry, maxlen=10_000, approximate=True)
        return moved

    async def history(self, agent_id: str) -> list[dict[str, str]]:
        rows = await self._redis.xrange(self.log_key(agent_id))
        return [{_s(k): _s(v) for k, v in fields.items()} for _, fields in rows]


_TASK_FIELDS = frozenset(task.value for task in Task)


def _ledger(raw: Mapping[Any, Any]) -> Ledger:
    return Ledger(**{_s(k): int(_s(v)) for k, v in raw.items() if _s(k) in _TASK_FIELDS})


async def known_agents(redis: Redis, prefix: str, batch: int = 500) -> AsyncIterator[str]:
    """Every agent that has ever had an event ingested (the registry of known
    agents the write path keeps, `Keyspace.agents`: one small member per agent,
    cheap to scan, on a cluster as on one Redis)."""
    async for name, _ in redis.zscan_iter(Keyspace(prefix).agents, count=batch):
        yield _s(name)


async def agent_watermarks(
    redis: Redis, prefix: str, batch: int = 500
) -> AsyncIterator[tuple[str, int]]:
    """`known_agents` with each agent's watermark (its latest event time, ms; on a
    cluster the registry is written just before the agent's own watermark, so it
    may be ahead of it by a batch that failed and is retried)."""
    async for name, score in redis.zscan_iter(Keyspace(prefix).agents, count=batch):
        yield _s(name), int(score)


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
