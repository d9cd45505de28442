"""Rebuilding an agent's node table and term counts gives what the write path
keeps, touches no other agent, and can run again."""

from __future__ import annotations

import uuid

from grimoire.infra.settings import Settings
from grimoire.streams.model.records import MemoryRecord
from grimoire.streams.write.changes import WriteBatch
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.memory.rebuild import rebuild_derived
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.redis_client import create_redis
from tests.support.builders import memory_candidate, memory_record
from tests.support.stored import drop_deployment
from tests.support.vectors import flat_unit

T0 = 1_790_000_000_000


def _record(agent: str, n: int, text: str, *, quarantined: bool = False) -> MemoryRecord:
    candidate = memory_candidate(
        agent, f"ev-{n}", text, ts=T0 + n, keys=(f"tag:ops/n{n % 2}", "err:timeout")
    )
    return memory_record(candidate, flat_unit(384), quarantined=quarantined)


async def test_a_rebuild_recreates_what_the_write_path_keeps(settings: Settings) -> None:
    redis = create_redis(settings.redis.url, 4)
    prefix = f"dx{uuid.uuid4().hex[:8]}"
    store = RedisMemoryStore(redis, prefix, 384)
    await store.ensure_schema()
    try:
        mine = [_record("golem-a", n, f"disk {n} full on node seven") for n in range(5)]
        mine.append(_record("golem-a", 9, "held back claim", quarantined=True))
        theirs = [_record("golem-b", n, "cpu load high") for n in range(3)]
        await store.commit(WriteBatch(records=(*mine, *theirs)))
        ks = Keyspace(prefix)
        keys = {"nodes": ks.nodes("golem-a"), "terms": ks.terms("golem-a")}
        kept = {name: await redis.hgetall(key) for name, key in keys.items()}
        other = await redis.hgetall(Keyspace(prefix).terms("golem-b"))
        assert len(kept["nodes"]) == 6 and kept["terms"][b"#memories"] == b"6"
        assert kept["terms"][b"disk"] == b"5" and kept["terms"][b"claim"] == b"1"

        await redis.delete(*keys.values())
        for _ in range(2):  # a second run recomputes, it never adds
            report = await rebuild_derived(redis, prefix, "golem-a")
            assert (report.memories, report.terms) == (6, len(kept["terms"]) - 2)
            assert {name: await redis.hgetall(key) for name, key in keys.items()} == kept
        assert await redis.hgetall(Keyspace(prefix).terms("golem-b")) == other
    finally:
        await drop_deployment(redis, prefix)
