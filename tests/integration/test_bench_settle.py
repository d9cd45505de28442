"""`bench recall` collects the load's index garbage before it times anything:
against real RediSearch, documents rewritten during a load leave garbage that
`settle_search_index` collects at once instead of in a fork GC pass (every 30 s,
seconds of a core at 100,000 memories) that would land among the timed queries."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from redis.asyncio import Redis

from bench.recall import settle_search_index

pytestmark = pytest.mark.integration


async def _gc_stats(redis: Redis, index: str) -> dict[str, float]:
    info: Any = await redis.execute_command("FT.INFO", index)
    fields = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2], strict=True))
    stats = {_text(k): v for k, v in fields.items()}["gc_stats"]
    if not isinstance(stats, dict):
        stats = dict(zip(stats[::2], stats[1::2], strict=True))
    return {_text(k): float(v) for k, v in stats.items()}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def test_settling_collects_the_garbage_of_rewritten_documents(redis_client: Redis) -> None:
    prefix = f"settle{uuid.uuid4().hex[:8]}"
    index = f"{prefix}-idx"
    await redis_client.execute_command(
        "FT.CREATE", index, "ON", "HASH", "PREFIX", 1, f"{prefix}:", "SCHEMA", "body", "TEXT"
    )
    try:
        for version in ("first", "second"):  # the second pass rewrites every document
            async with redis_client.pipeline(transaction=False) as pipe:
                for n in range(300):
                    pipe.hset(f"{prefix}:{n}", "body", f"{version} draft of note {n}")
                await pipe.execute()
        before = await _gc_stats(redis_client, index)

        await settle_search_index(redis_client, index)

        after = await _gc_stats(redis_client, index)
        assert after["total_cycles"] > before["total_cycles"]
        assert after["bytes_collected"] > before["bytes_collected"]
    finally:
        await redis_client.execute_command("FT.DROPINDEX", index, "DD")
