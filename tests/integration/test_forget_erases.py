"""Forgetting erases: after the stated bound nothing readable of the agent is left.

A durable stack of its own (the broker's log in the local S3 store, Redis with its
append-only file), one ingest worker and one recall worker, the staging purge on
with a short bound. Agent A's events carry three distinctive strings; A is recalled
(usage journaled by the recall worker), then forgotten. Once the bound has passed,
every partition of every topic read from its earliest offset, every Redis key (name
and value, the key store included) hold neither A's id nor any of the strings;
agent B's digest is unchanged. Then A's id is used again and recalled: every usage
entry journaled after the reuse is applied, none is dead-lettered.
"""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from redis.asyncio import Redis

from grimoire.infra.local.services import LocalServices, ServicePorts
from grimoire.infra.local.worker_process import start_worker, stop_worker
from grimoire.infra.settings import Settings
from grimoire.streams.journal.entry import EntryKind, decode_entry
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.trust.digest import agent_digest
from grimoire.topics.client import GrimoireClient
from grimoire.topics.declarations import TopicNames
from grimoire.topics.offsets import true_end_offsets
from grimoire.topics.schemas import CommandV1, EpisodeV1, ToolEventV1
from tests.support.journal import journal_name_of
from tests.support.stacks import WHEEL_CACHE
from tests.support.workers import client_for, start_ready_worker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
KAFKA, REDIS = 19442, 16529  # the object store: 20442..20446 and each + 10000
SECRETS = ("xylophone-quasar-7731", "/srv/marmalade/teapot-42.cfg", "zanzibar cobalt lighthouse")
T0 = 1_790_000_000_000
RETENTION_S = 6.0
INTERVAL_S = 2.0
# The documented bound (docs/security.md): the retention, one purge interval, and
# the sequencer's and handlers' commit interval for the staging topics.
BOUND_S = RETENTION_S + INTERVAL_S + 3.0


@pytest.fixture(scope="module")
def durable() -> Iterator[LocalServices]:
    state = ROOT / ".grimoire" / "test-forget"
    services = LocalServices(
        state, ServicePorts(kafka=KAFKA, redis=REDIS), wheel_cache=WHEEL_CACHE, durable=True
    )
    services.down()
    # A fresh store: what is scanned is this test's alone.
    for data in (services.object_store_dir, state / f"redis-{REDIS}"):
        shutil.rmtree(data, ignore_errors=True)
    services.up()
    yield services
    services.down()


@pytest.fixture
async def deployment(
    durable: LocalServices, tmp_path: Path
) -> AsyncIterator[tuple[Settings, GrimoireClient, Redis]]:
    settings = Settings(
        broker_url=f"kafka://{durable.kafka_bootstrap}",
        redis_url=durable.redis_url,
        topic_prefix=f"fg{uuid.uuid4().hex[:8]}",
        maintenance_enabled=False,
        staging_purge="s3",
        staging_s3_url=durable.object_store_url,
        staging_retention_s=RETENTION_S,
        staging_purge_interval_s=INTERVAL_S,
        _env_file=None,
    )
    # The ingest worker answers no recall: the recall worker's readiness says both
    # are up once a recall of an agent it has never seen comes back.
    ingest = start_worker(
        settings.with_values(worker_roles="ingest"), tmp_path / "ingest.log", ROOT
    )
    recall = await start_ready_worker(
        settings.with_values(worker_roles="recall"), tmp_path / "recall.log",
        timeout=180,
    )  # fmt: skip
    redis = Redis.from_url(settings.redis.url)
    try:
        async with client_for(settings) as client:
            yield settings, client, redis
    finally:
        await redis.aclose()
        stop_worker(recall)
        stop_worker(ingest)


async def _eventually(check: Any, timeout: float, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {timeout}s: {found!r}"
        await asyncio.sleep(interval)


async def _publish(client: GrimoireClient, agent: str, texts: list[str], start: int) -> None:
    for n, text in enumerate(texts, start):
        await client.publish_episode(
            EpisodeV1(
                agent_id=agent,
                ts=T0 + n * 12_000,
                text=text,
                event_id=f"{agent}-{n}",
                importance=0.9,
                tags=["ops/forget-test"],
            )
        )


async def _topic_bytes(settings: Settings) -> dict[str, bytes]:
    """Every record of every topic, from each partition's earliest offset: its key,
    value and headers, by topic."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    await admin.start()
    try:
        topics = [
            t for t in await admin.list_topics() if t.startswith(settings.broker.topic_prefix)
        ]
        partitions = {
            described["topic"]: sorted(p["partition"] for p in described["partitions"])
            for described in await admin.describe_topics(topics)
        }
    finally:
        await admin.close()
    found: dict[str, bytes] = {}
    for topic in sorted(topics):
        chunks: list[bytes] = []
        for record in await _records(settings, topic, partitions[topic]):
            chunks += [record.key or b"", record.value or b""]
            chunks += [name.encode() + value for name, value in record.headers]
        found[topic] = b"\n".join(chunks)
    return found


async def _redis_bytes(redis: Redis) -> dict[bytes, bytes]:
    """Every key of the deployment's Redis (the key store's too), with its value."""
    found: dict[bytes, bytes] = {}
    async for key in redis.scan_iter(count=1000):
        kind = (await redis.type(key)).decode()
        if kind == "string":
            value: Any = await redis.get(key)
        elif kind == "hash":
            value = await redis.hgetall(key)
        elif kind == "set":
            value = sorted(await redis.smembers(key))
        elif kind == "zset":
            value = await redis.zrange(key, 0, -1, withscores=True)
        elif kind == "list":
            value = await redis.lrange(key, 0, -1)
        elif kind == "stream":
            value = await redis.xrange(key)
        elif kind == "ReJSON-RL":
            value = await redis.execute_command("JSON.GET", key)
        else:
            value = await redis.dump(key)
        found[key] = repr(value).encode()
    return found


def _leaks(blobs: dict[Any, bytes], needles: tuple[str, ...]) -> list[tuple[Any, str]]:
    return [
        (name, needle)
        for name, blob in blobs.items()
        for needle in needles
        if needle.encode() in blob or needle.encode() in (name if isinstance(name, bytes) else b"")
    ]


async def test_forgetting_leaves_nothing_readable_and_a_reused_id_starts_clean(
    deployment: tuple[Settings, GrimoireClient, Redis],
) -> None:
    settings, client, redis = deployment
    suffix = uuid.uuid4().hex[:6]
    agent, other = f"forget-me-{suffix}", f"keep-me-{suffix}"
    await _publish(
        client,
        agent,
        [
            f"the deploy of {SECRETS[0]} failed on node seven",
            f"config file {SECRETS[1]} was rewritten by the migration",
            f"the {SECRETS[2]} alert fired twice overnight",
        ],
        0,
    )
    await client.publish_tool_event(
        ToolEventV1(
            agent_id=agent, ts=T0 + 50_000, tool="shell", args_digest="d1",
            result=f"cat {SECRETS[1]}", paths=[SECRETS[1]], event_id=f"{agent}-tool",
        )
    )  # fmt: skip
    await _publish(client, other, ["the nightly backup finished", "rotated the api keys"], 0)

    async def recallable() -> bool:
        answer = await client.recall(agent, SECRETS[2], k=5)
        mine = await client.recall(other, "nightly backup", k=2, record_usage=False)
        return any(SECRETS[2] in item.text for item in answer.items) and bool(mine.items)

    await _eventually(recallable, timeout=120)
    for query in SECRETS:
        await client.recall(agent, query, k=3)  # usage entries, journaled by the recall worker
    await asyncio.sleep(3)
    kept = (await agent_digest(redis, settings.broker.topic_prefix, other)).sha256

    await client.send_command(
        CommandV1(agent_id=agent, command="forget", event_id=f"forget-{suffix}")
    )

    async def erased() -> bool:
        return not [k async for k in redis.scan_iter(match=f"*{agent}*", count=1000)]

    await _eventually(erased, timeout=60)
    forgotten_at = time.monotonic()
    await asyncio.sleep(BOUND_S)
    needles = (agent, *SECRETS)

    async def clean() -> list[tuple[Any, str]]:
        leaks = _leaks(await _topic_bytes(settings), needles)
        leaks += _leaks(await _redis_bytes(redis), needles)
        return leaks

    leaks = await clean()
    waited = time.monotonic() - forgotten_at
    assert leaks == [], f"readable after {waited:.0f}s (bound {BOUND_S:.0f}s): {leaks[:10]}"
    assert (await agent_digest(redis, settings.broker.topic_prefix, other)).sha256 == kept

    # The id used again: a new key, and every usage entry sealed with it is applied.
    await _publish(client, agent, ["a fresh start on node nine"], 10)

    async def reborn() -> bool:
        answer = await client.recall(agent, "fresh start node nine", k=3, record_usage=False)
        return bool(answer.items)

    await _eventually(reborn, timeout=60)
    for _ in range(3):
        await client.recall(agent, "fresh start", k=3)
    name = await journal_name_of(redis, settings.broker.topic_prefix, agent)
    current = await redis.hget(Keyspace(settings.broker.topic_prefix).agent_keys(agent), "current")
    assert current is not None
    topics = TopicNames(settings.broker.topic_prefix)

    async def usage_applied() -> tuple[int, int] | None:
        journal = await _journal_entries(settings, topics.journal)
        sealed_now = [
            e for e in journal
            if e.journal == name and e.kind is EntryKind.USAGE and e.key_id == current.decode()
        ]  # fmt: skip
        members = await redis.zrange(
            Keyspace(settings.broker.topic_prefix).applied_usage(agent), 0, -1
        )
        # Entries by seq (the set also names the recall requests they answered).
        applied = sum(1 for member in members if member.isdigit())
        return (
            (len(sealed_now), applied)
            if len(sealed_now) >= 3 and applied == len(sealed_now)
            else None
        )

    assert await _eventually(usage_applied, timeout=60)
    # Nothing sealed with the new key was refused as sealed with a destroyed one.
    letters = await _dead_letters(settings, topics.dead_letters)
    assert not [
        letter for letter in letters
        if letter.get("reason") == "key_forgotten" and current.decode() in letter["detail"]
    ]  # fmt: skip


async def _journal_entries(settings: Settings, topic: str) -> list[Any]:
    return [decode_entry(value) for value in await _values(settings, topic)]


async def _dead_letters(settings: Settings, topic: str) -> list[dict[str, Any]]:
    return [orjson.loads(value) for value in await _values(settings, topic)]


async def _values(settings: Settings, topic: str) -> list[bytes]:
    records = await _records(settings, topic, range(settings.broker.partitions))
    return [record.value or b"" for record in records]


async def _records(settings: Settings, topic: str, partitions: Iterable[int]) -> list[Any]:
    """Every record of `topic`'s `partitions`, each from its earliest offset."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        ends = await true_end_offsets(consumer, tps)
        found: list[Any] = []
        for tp in tps:
            await consumer.seek_to_beginning(tp)
            while await consumer.position(tp) < ends[tp]:
                batch = await consumer.getmany(tp, timeout_ms=1000)
                records = batch.get(tp, [])
                if not records:
                    break
                found += records
        return found
    finally:
        await consumer.stop()
