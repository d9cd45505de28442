"""What only the Redis curator store has: its key layout, its WATCHed transaction,
and the runner wired as the worker wires it (decay rescheduled in the DecayIndex).

The store's semantics, shared with the in-memory reference, are in
`test_curator_contract.py` (its swap episodes and fake embedder are these, from
tests/support).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import orjson
import pytest
from redis.asyncio import Redis

from grimoire.agents.maintenance.curator_task import CuratorRunner
from grimoire.infra.settings import Settings
from grimoire.streams.maintenance.schedule import MaintenancePlan, Pressure, Task
from grimoire.streams.model.decay import DAY_MS
from grimoire.streams.model.records import MemoryRecord
from grimoire.streams.write.changes import WriteBatch
from grimoire.tables.maintenance.curator_store import PAGE, RedisCuratorStore
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.redis_client import create_redis
from tests.support.curator import SWAP_KEYS, T0, first_insight_body, no_reschedule, swap_episode
from tests.support.embedders import TextSeededEmbedder
from tests.support.stored import drop_deployment

pytestmark = pytest.mark.integration

DIMS = 384
NOW = T0 + DAY_MS
A, B = "agent-a", "agent-b"
fake_embed = TextSeededEmbedder(DIMS).embed_bytes


def record(agent: str, n: int, outcome: str) -> MemoryRecord:
    return swap_episode(agent, n, outcome, dims=DIMS)


@dataclass
class Env:
    redis: Redis
    prefix: str
    memory: RedisMemoryStore
    curator: RedisCuratorStore

    async def episodes(self, agent: str, start: int, *outcomes: str) -> None:
        records = tuple(record(agent, start + i, o) for i, o in enumerate(outcomes))
        await self.memory.commit(WriteBatch(records=records))

    async def keys(self) -> set[str]:
        found = {key.decode() async for key in self.redis.scan_iter(match=f"{self.prefix}:*")}
        return {key.removeprefix(f"{self.prefix}:") for key in found}


@pytest.fixture
async def env(settings: Settings) -> AsyncIterator[Env]:
    redis = create_redis(settings.redis.url, 8)
    prefix = f"cu{uuid.uuid4().hex[:10]}"
    memory = RedisMemoryStore(redis, prefix, DIMS)
    await memory.ensure_schema()
    try:
        yield Env(redis, prefix, memory, RedisCuratorStore(redis, prefix))
    finally:
        await drop_deployment(redis, prefix)


def plan(agent: str, cycle: int) -> MaintenancePlan:
    return MaintenancePlan(agent, cycle * 5, NOW, Pressure.NORMAL, (Task.CURATOR,), (), cycle)


async def test_a_cycle_writes_the_documented_keys(env: Env) -> None:
    await env.episodes(A, 0, "success", "success", "success")
    written = await env.keys()
    report = await CuratorRunner(env.curator, fake_embed, no_reschedule).run_cycle(A, NOW, 1)
    (insight,) = await env.curator.entries(A)
    new = await env.keys() - written
    tag = f"{{{A}}}"  # every key of the agent carries it (its cluster hash tag)
    assert new == {
        f"curator:{tag}",
        f"curator:{tag}:entries",
        # the schedule and the signature index (no playbook heuristic yet: no set)
        f"curator:{tag}:due",
        f"curator:{tag}:signatures",
        f"nexus:{tag}:tool:swap",  # the situation's tool, a key no episode carries
        f"playbook:{tag}",
        f"mem:{tag}:{insight.memory_id}",
        f"use:{tag}:{insight.memory_id}",
        # the derivation index: the insight from each of its evidence episodes
        f"deriv:{tag}:of:{insight.memory_id}",
        *(f"deriv:{tag}:from:{source}" for source in insight.source_ids),
    }
    state = await env.redis.hgetall(env.curator.state_key(A))
    assert state[b"cycle"] == b"1" and state[b"watermark"] == str(T0 + 2).encode()
    assert orjson.loads(state[b"report"]) == orjson.loads(orjson.dumps(report))
    book = await env.redis.hget(env.curator.entries_key(A), insight.memory_id)
    assert book is not None and orjson.loads(book)["status"] == "proposed"
    assert state[b"scheduled"] == b"1"
    # 0.5 decays below 0.1 after log2(5) insight half-lives (7 days): its next look
    due = await env.redis.zscore(env.memory.keys.curator_due(A), insight.memory_id)
    assert due is not None and NOW + 16 * DAY_MS < due < NOW + 17 * DAY_MS
    signatures = await env.redis.zrange(env.memory.keys.curator_signatures(A), 0, -1)
    assert signatures == [f"insight|{insight.signature}|{insight.memory_id}".encode()]
    assert await env.redis.get(env.curator.playbook_key(A)) == (
        b"# PLAYBOOK \xe2\x80\x94 agent-a\n\n## Global\n\n_No heuristics yet._\n"
    )
    nexus = env.memory.graph.keys
    for key in SWAP_KEYS:
        assert await env.redis.zscore(nexus.nexus(A, key), insight.memory_id) == insight.ts_ms
    node = await env.redis.hget(nexus.nodes(A), insight.memory_id)
    assert isinstance(node, bytes) and node.startswith(b"insight\x1f")


async def test_the_runner_reschedules_the_decay_of_the_entries(env: Env) -> None:
    await env.episodes(A, 0, "success", "success", "success")
    await env.episodes(B, 0, "success", "success", "success")
    runner = CuratorRunner(env.curator, fake_embed, env.memory.decay.reschedule)
    body = await runner(plan(A, 1))
    assert body == first_insight_body(NOW)
    (insight,) = await env.curator.entries(A)
    schedule = await env.redis.zrange(env.memory.keys.decay_schedule(A), 0, -1)
    assert insight.memory_id.encode() in schedule
    others = await env.redis.zrange(env.memory.keys.decay_schedule(B), 0, -1)
    assert insight.memory_id.encode() not in others
    assert await runner(plan(A, 1)) == body  # a replay reports the same cycle


async def test_two_runs_of_one_cycle_apply_it_once(env: Env) -> None:
    """Both read the state before either applies; the WATCHed state key lets one through."""
    await env.episodes(A, 0, "success", "success", "success")

    async def slow_embed(texts: Sequence[str]) -> list[bytes]:
        await asyncio.sleep(0.05)
        return await fake_embed(texts)

    runner = CuratorRunner(env.curator, slow_embed, no_reschedule)
    first, second = await asyncio.gather(runner.run_cycle(A, NOW, 1), runner.run_cycle(A, NOW, 1))
    assert first == second and first.proposed == 1
    assert len(await env.curator.entries(A)) == 1
    assert (await env.curator.state(A)).cycle == 1


async def test_every_page_of_a_search_is_read(env: Env) -> None:
    # More episodes than one search page (500): the raw RESP3 reply keys its map
    # with bytes, and reading its total as 0 once returned the first page alone.
    count = PAGE + 120
    await env.episodes(A, 0, *(["success"] * count))
    found = await env.curator.episodes_since(A, T0 - 1)
    assert len(found) == count
    assert len({episode.memory_id for episode in found}) == count
