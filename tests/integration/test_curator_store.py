"""The curator against the real Redis: episodes written by the memory store's own
write path, cycles run by RedisCuratorStore, results read back from Redis."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from redis.asyncio import Redis

from grimoire.infra.settings import Settings
from grimoire.streams.model.decay import DAY_MS
from grimoire.streams.model.ids import memory_id
from grimoire.streams.model.records import (
    EventType,
    Kind,
    Layer,
    MemoryCandidate,
    MemoryRecord,
    Provenance,
)
from grimoire.streams.model.text import normalized_hash
from grimoire.streams.write.changes import WriteBatch
from grimoire.tables.maintenance.curator_store import RedisCuratorStore
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.redis_client import create_redis

pytestmark = pytest.mark.integration

DIMS = 384
T0 = 1_790_000_000_000
NOW = T0 + DAY_MS  # one event time for every cycle: votes are exact, not decayed
A, B = "agent-a", "agent-b"
KEYS = ("entity:eth", "entity:usdc", "tag:strategy/eth-dca")


def vector(text: str) -> bytes:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    raw = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
    return (raw / np.linalg.norm(raw)).astype(np.float32).tobytes()


async def fake_embed(texts: Sequence[str]) -> list[bytes]:
    return [vector(text) for text in texts]


def record(
    agent: str,
    n: int,
    outcome: str,
    *,
    ts: int | None = None,
    kind: Kind = Kind.EPISODE,
    text: str | None = None,
    quarantined: bool = False,
) -> MemoryRecord:
    ts = T0 + n if ts is None else ts
    body = text or f"swap ETH for USDC through the router, attempt {n}"
    candidate = MemoryCandidate(
        id=memory_id(agent, f"ev-{kind.value}-{n}", 0, ts),
        agent_id=agent,
        kind=kind,
        layer=Layer.ACTION,
        text=body,
        ts_ms=ts,
        provenance=Provenance(f"ev-{n}", EventType.EPISODE.value, tool="swap"),
        normalized_hash=normalized_hash(body),
        tick=n,
        regime="calm",
        keys=KEYS,
        outcome=outcome,
    )
    return MemoryRecord(candidate, canonical=vector(body), quarantined=quarantined)


@dataclass
class Env:
    redis: Redis
    prefix: str
    memory: RedisMemoryStore
    curator: RedisCuratorStore

    async def write(self, *records: MemoryRecord) -> None:
        await self.memory.commit(WriteBatch(records=tuple(records)))

    async def episodes(self, agent: str, start: int, *outcomes: str) -> None:
        await self.write(*(record(agent, start + i, o) for i, o in enumerate(outcomes)))

    async def by_kind(self, agent: str, kind: str) -> list[dict[str, str]]:
        found = []
        async for key in self.redis.scan_iter(match=f"{self.prefix}:mem:*"):
            fields = {
                k.decode(): v.decode(errors="replace")
                for k, v in (await self.redis.hgetall(key)).items()
            }
            if fields["agent_id"] == agent and fields["kind"] == kind:
                found.append(fields)
        return sorted(found, key=lambda f: f["memory_id"])

    async def snapshot(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        async for key in self.redis.scan_iter(match=f"{self.prefix}:*"):
            kind = (await self.redis.type(key)).decode()
            if kind == "hash":
                state[key.decode()] = await self.redis.hgetall(key)
            elif kind == "string":
                state[key.decode()] = await self.redis.get(key)
            elif kind == "zset":
                state[key.decode()] = await self.redis.zrange(key, 0, -1, withscores=True)
        return state


@pytest.fixture
async def env(settings: Settings) -> AsyncIterator[Env]:
    redis = create_redis(settings.redis_url, 8)
    prefix = f"cu{uuid.uuid4().hex[:10]}"
    memory = RedisMemoryStore(redis, prefix, DIMS)
    await memory.ensure_schema()
    try:
        yield Env(redis, prefix, memory, RedisCuratorStore(redis, prefix, fake_embed))
    finally:
        await redis.execute_command("FT.DROPINDEX", memory.index_name, "DD")
        keys = [key async for key in redis.scan_iter(match=f"{prefix}:*")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()
        await redis.connection_pool.disconnect()


async def test_repeated_episodes_become_a_recallable_insight(env: Env) -> None:
    await env.episodes(A, 0, "success", "success", "success: filled", "returned")
    await env.episodes(B, 0, "success", "success")
    report = await env.curator.run_cycle(A, NOW, 1)
    assert (report.proposed, report.episodes_seen) == (1, 4)

    (insight,) = await env.by_kind(A, "insight")
    assert float(insight["confidence"]) == 0.5
    assert insight["archived"] == "0" and insight["event_type"] == "curator"
    assert "tends to work" in insight["text"]
    hits = await env.memory.full_text(A, ["tends"], 10)
    assert [hit.memory.id for hit in hits] == [insight["memory_id"]]
    knn = await env.memory.knn(
        A, np.frombuffer(vector(insight["text"]), dtype=np.float32).tolist(), 1
    )
    assert knn[0].memory.id == insight["memory_id"]
    assert await env.by_kind(B, "insight") == []  # the other tenant saw nothing
    assert (
        await env.curator.get_playbook(A)
        == "# PLAYBOOK — agent-a\n\n## Global\n\n_No heuristics yet._\n"
    )


async def test_votes_promotion_into_playbook_and_demotion(env: Env) -> None:
    await env.episodes(A, 0, "success", "success", "success")
    await env.curator.run_cycle(A, NOW, 1)
    await env.episodes(A, 10, "success", "success")
    report = await env.curator.run_cycle(A, NOW, 2)
    assert (report.upvoted, report.promoted, report.proposed) == (1, 1, 1)
    (insight,) = await env.by_kind(A, "insight")
    assert float(insight["confidence"]) == pytest.approx(0.6, abs=1e-9)
    (heuristic,) = await env.by_kind(A, "heuristic")
    assert float(heuristic["confidence"]) == 0.5

    for cycle in (3, 4):
        await env.episodes(A, cycle * 10, "success", "success")
        await env.curator.run_cycle(A, NOW, cycle)
    (heuristic,) = await env.by_kind(A, "heuristic")
    assert float(heuristic["confidence"]) == pytest.approx(0.7, abs=1e-9)
    playbook = await env.curator.get_playbook(A)
    assert playbook is not None
    section = playbook.split("## Strategy: eth-dca\n", 1)[1]
    assert section.startswith(f"\n- {heuristic['text']} _(confidence 0.70;")

    await env.episodes(A, 50, "failed", "failed")
    report = await env.curator.run_cycle(A, NOW, 5)
    (heuristic,) = await env.by_kind(A, "heuristic")
    assert float(heuristic["confidence"]) == pytest.approx(0.55, abs=1e-9)
    assert report.downvoted == 2 and report.demoted == 0
    await env.episodes(A, 60, "failed", "failed")
    await env.curator.run_cycle(A, NOW, 6)
    await env.episodes(A, 70, "failed", "failed")
    report = await env.curator.run_cycle(A, NOW, 7)
    (heuristic,) = await env.by_kind(A, "heuristic")
    assert float(heuristic["confidence"]) == pytest.approx(0.25, abs=1e-9)
    # both fell below 0.4 (insight 0.8 → 0.35); the heuristic, now contradicted
    # 6 to 4, was also reworded to the opposite advice
    assert (report.demoted, report.edited) == (2, 1)
    assert heuristic["text"].startswith("Avoid tool swap")
    playbook = await env.curator.get_playbook(A)
    assert playbook is not None and heuristic["memory_id"] not in playbook


async def test_archive_after_three_low_cycles_warning_exempt(env: Env) -> None:
    old_insight = record(A, 1, "", ts=T0, kind=Kind.INSIGHT, text="stale gas insight")
    old_warning = record(A, 2, "", ts=T0, kind=Kind.WARNING, text="stale gas warning")
    await env.write(old_insight, old_warning)
    later = T0 + 120 * DAY_MS
    for cycle in (1, 2):
        report = await env.curator.run_cycle(A, later + cycle, cycle)
        assert report.pruned == 0
    assert [hit.memory.id for hit in await env.memory.full_text(A, ["stale"], 10)] != []
    report = await env.curator.run_cycle(A, later + 3, 3)
    assert report.pruned == 1
    (insight,) = await env.by_kind(A, "insight")
    (warning,) = await env.by_kind(A, "warning")
    assert (insight["archived"], warning["archived"]) == ("1", "0")
    hits = await env.memory.full_text(A, ["stale"], 10)
    assert [hit.memory.id for hit in hits] == [warning["memory_id"]]


async def test_cycle_is_idempotent_per_number(env: Env) -> None:
    await env.episodes(A, 0, "success", "success", "success")
    first = await env.curator.run_cycle(A, NOW, 1)
    before = await env.snapshot()
    await env.episodes(A, 10, "success", "success")  # new evidence must wait for cycle 2
    after_write = await env.snapshot()
    again = await env.curator.run_cycle(A, NOW, 1)
    assert again == first
    assert await env.snapshot() == after_write
    assert before.keys() <= after_write.keys()
    report = await env.curator.run_cycle(A, NOW, 2)
    assert report.upvoted == 1


async def test_quarantine_review_releases_or_archives(env: Env) -> None:
    stale = record(A, 1, "", ts=NOW - 10 * DAY_MS, text="doubtful claim", quarantined=True)
    fresh = record(A, 2, "", ts=NOW - DAY_MS, text="unverified claim", quarantined=True)
    backed = record(A, 3, "", ts=NOW - DAY_MS, text="backed claim", quarantined=True)
    await env.write(stale, fresh, backed)
    await env.redis.hset(f"{env.prefix}:mem:{backed.id}", "validated_count", 2)
    report = await env.curator.run_cycle(A, NOW, 1)
    assert (report.pruned, report.released) == (1, 1)
    rows = {
        r["memory_id"]: (r["quarantined"], r["archived"]) for r in await env.by_kind(A, "episode")
    }
    assert rows == {stale.id: ("1", "1"), fresh.id: ("1", "0"), backed.id: ("0", "0")}
    ids = [stale.id, fresh.id, backed.id]
    source = env.memory.recall_source(A)
    nodes, records = await source.nodes(ids), await source.records(ids)
    assert nodes == {i: r.node() for i, r in records.items()} and len(nodes) == 3
    assert [nodes[i].deleted for i in ids] == [True, True, False]  # archived, held, released
