"""Reading the journal in tests: which journal name an agent goes by."""

from __future__ import annotations

from redis.asyncio import Redis

from grimoire.streams.journal.entry import journal_name
from grimoire.tables.keyspace import Keyspace


async def journal_name_of(redis: Redis, prefix: str, agent_id: str) -> str:
    """The agent's journal name under the deployment's secret (also once the agent is
    forgotten: the secret stays, the key store's mapping of the name goes)."""
    secret = await redis.get(Keyspace(prefix).journal_secret)
    assert isinstance(secret, bytes), "no journal secret yet: nothing was journaled"
    return journal_name(secret, agent_id)
