"""Workers starting together against an empty Redis all see no index, and all try
to create it: none of them may crash (a bench-faults worker once did)."""

from __future__ import annotations

import asyncio
import uuid

from redis.asyncio import Redis

from grimoire.tables.memory.store import RedisMemoryStore


async def test_workers_creating_the_index_at_once_all_start(redis_client: Redis) -> None:
    prefix = f"race{uuid.uuid4().hex[:8]}"
    stores = [RedisMemoryStore(redis_client, prefix, 8) for _ in range(4)]
    try:
        await asyncio.gather(*(store.ensure_schema() for store in stores))
        info = await redis_client.ft(stores[0].index_name).info()
        assert int(info["num_docs"]) == 0
    finally:
        await redis_client.ft(stores[0].index_name).dropindex(delete_documents=False)
