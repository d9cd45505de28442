"""What a deployment's Redis holds, read the way integration tests check it: a
memory hash's fields, the outcomes an agent applied, digests once they settle."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from redis.asyncio import Redis

from grimoire.tables.keyspace import Keyspace
from grimoire.tables.memory.imported import VECTOR_FIELDS
from grimoire.tables.memory.wipe import wipe_memory_state
from grimoire.tables.redis_client import close_masters
from grimoire.tables.trust.digest import agent_digest

# The `eventually` fixture: poll a check until it is truthy (tests/integration/conftest.py).
Eventually = Callable[..., Awaitable[Any]]


async def memory_fields(
    redis: Redis, keys: Keyspace, agent_id: str, memory_id: str, *names: str
) -> dict[str, str]:
    """A memory hash's fields as text: those of `names` that are set or, with no
    names, every field but the vectors."""
    key = keys.memory(agent_id, memory_id)
    if names:
        values = await redis.hmget(key, list(names))
        return {n: v.decode() for n, v in zip(names, values, strict=True) if v is not None}
    raw = await redis.hgetall(key)
    return {k.decode(): v.decode() for k, v in raw.items() if k not in VECTOR_FIELDS}


async def outcomes_applied(
    redis: Redis, keys: Keyspace, agent_id: str, outcome_ids: Iterable[str]
) -> bool:
    """Whether the agent applied every one of these outcomes (by event id)."""
    applied = await redis.smembers(keys.applied_outcomes(agent_id))
    return {i.encode() for i in outcome_ids} <= applied


async def wait_outcomes_applied(
    eventually: Eventually,
    redis: Redis,
    keys: Keyspace,
    agent_id: str,
    outcome_ids: Iterable[str],
    *,
    timeout: float = 60.0,
    interval: float = 0.1,
) -> None:
    wanted = list(outcome_ids)

    async def done() -> bool:
        return await outcomes_applied(redis, keys, agent_id, wanted)

    await eventually(done, timeout=timeout, interval=interval)


async def settled_digests(
    redis: Redis, prefix: str, agents: list[str], eventually: Eventually, *, quiet_s: float
) -> list[str]:
    """Every agent's full digest, once it stays the same for `quiet_s` seconds."""

    async def quiet() -> Any:
        first = [(await agent_digest(redis, prefix, a)).sha256 for a in agents]
        await asyncio.sleep(quiet_s)
        second = [(await agent_digest(redis, prefix, a)).sha256 for a in agents]
        return second if first == second else None

    return list(await eventually(quiet, timeout=120, interval=0.1))


async def owned_key(
    redis: Redis, build: Callable[[str, str], str], agents: Iterable[str], memory_id: str
) -> str:
    """The key `build(agent, memory_id)` of whichever of `agents` holds the memory
    (keys name their agent since the store's format 2, while contract suites name
    memories alone); the first agent's when none does."""
    candidates = [build(agent, memory_id) for agent in agents]
    for key in candidates:
        if await redis.exists(key):
            return key
    return candidates[0]


async def drop_deployment(redis: Redis, prefix: str) -> None:
    """Every index and key of a test deployment gone, then the client closed: on one
    Redis or a cluster (each master's index, each master's keys)."""
    try:
        await wipe_memory_state(redis, prefix)
        left = [key async for key in redis.scan_iter(match=f"{prefix}:*", count=1000)]
        if left:
            await redis.delete(*left)
    finally:
        await close_masters(redis)
        await redis.aclose()
        pool = getattr(redis, "connection_pool", None)  # a cluster client has none
        if pool is not None:
            await pool.disconnect()
