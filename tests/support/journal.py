"""Reading the journal in tests: which journal name an agent goes by."""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis

from grimoire.streams.journal.entry import journal_name
from grimoire.tables.keyspace import Keyspace


async def journal_name_of(redis: Redis, prefix: str, agent_id: str) -> str:
    """The agent's journal name under the deployment's secret (also once the agent is
    forgotten: the secret stays, the key store's mapping of the name goes)."""
    secret = await redis.get(Keyspace(prefix).journal_secret)
    assert isinstance(secret, bytes), "no journal secret yet: nothing was journaled"
    return journal_name(secret, agent_id)


async def journal_name_once_written(
    redis: Redis, prefix: str, agent_id: str, *, timeout: float = 60.0
) -> str:
    """`journal_name_of`, waiting for the deployment's first journal entry to
    create the secret (a test that has only just produced its inputs)."""
    deadline = time.monotonic() + timeout
    while await redis.get(Keyspace(prefix).journal_secret) is None:
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    return await journal_name_of(redis, prefix, agent_id)
