"""A decay pass costs what is due, not what is stored: the same number of due
memories takes about as long among 10k memories as among 100k."""

from __future__ import annotations

import gc
import time
import uuid
from typing import Any

import pytest
from redis.asyncio import Redis

from grimoire.infra.settings import Settings
from grimoire.tables.decay_index import DecayIndex

pytestmark = pytest.mark.integration

T0 = 1_790_000_000_000
H48 = 48 * 3_600_000
DUE = 500
CHUNK = 5000


def doc(memory_id: str, agent_id: str, kind: str) -> dict[str, Any]:
    return {
        "memory_id": memory_id,
        "agent_id": agent_id,
        "kind": kind,
        "layer": "observation",
        "text": f"memory {memory_id}",
        "ts": T0,
        "last_accessed": T0,
        "confidence": 0.8,
        "quality": 0.5,
        "strength": 1.0,
        "provenance": "self",
        "deleted": "0",
        "archived": "0",
    }


async def fastest_pass_ms(redis: Redis, prefix: str, total: int) -> float:
    decay = DecayIndex(redis, prefix)
    agent = "agent-scale"
    for start in range(0, total, CHUNK):
        async with redis.pipeline(transaction=False) as pipe:
            for i in range(start, min(total, start + CHUNK)):
                # DUE episodes come due at 48 h; the warnings not for 30 days.
                fields = doc(f"m{i:06d}", agent, "episode" if i < DUE else "warning")
                pipe.hset(decay.keys.memory(fields["memory_id"]), mapping=fields)
                decay.schedule_new(pipe, fields)
            await pipe.execute()
    timings: list[float] = []
    gc.collect()
    for rep in range(10):
        now = T0 + H48 + 1 + rep
        # Make the same DUE memories due again, as an access or outcome would.
        async with redis.pipeline(transaction=False) as pipe:
            for i in range(DUE):
                decay.schedule(pipe, agent, f"m{i:06d}", now)
            await pipe.execute()
        started = time.perf_counter()
        report = await decay.run_pass(agent, now, limit=2 * DUE)
        timings.append(time.perf_counter() - started)
        assert report.entries_decayed == DUE
    assert await redis.zcard(decay.keys.schedule(agent)) == total
    # The fastest of several runs: the pass's own cost, without scheduler or GC noise
    # (the first run also warms the script cache and the connection).
    return min(timings[1:]) * 1000


async def drop(redis: Redis, prefix: str) -> None:
    batch: list[Any] = []
    async for key in redis.scan_iter(match=f"{prefix}:*", count=CHUNK):
        batch.append(key)
        if len(batch) >= CHUNK:
            await redis.delete(*batch)
            batch.clear()
    if batch:
        await redis.delete(*batch)


async def test_pass_cost_is_independent_of_store_size(
    redis_client: Redis, settings: Settings
) -> None:
    timings: dict[int, float] = {}
    for total in (10_000, 100_000):
        prefix = f"{settings.topic_prefix}ds{uuid.uuid4().hex[:6]}"
        try:
            timings[total] = await fastest_pass_ms(redis_client, prefix, total)
        finally:
            await drop(redis_client, prefix)
    print(f"decay pass fastest ms by store size: {timings}")
    assert timings[100_000] <= 2 * timings[10_000], timings
