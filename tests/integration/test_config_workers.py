"""A configuration change rules the next event on every worker: two workers share
the journal's partitions, and agents on all of them are configured (ingest off)
and then send an event each, which is skipped by whichever worker applies it."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from grimoire.infra.local.worker_process import stop_worker
from grimoire.infra.settings import Settings
from grimoire.tables.keyspace import Keyspace
from grimoire.topics.client import GrimoireClient
from grimoire.topics.declarations import partition_of
from grimoire.topics.schemas import CommandV1, EpisodeV1
from tests.support.workers import start_ready_worker

T0 = 1_790_000_000_000


@pytest.fixture(scope="module")
def two_worker_settings(settings: Settings) -> Settings:
    suffix = uuid.uuid4().hex[:8]
    return settings.with_values(topic_prefix=f"cw{suffix}", app_id=f"grimoire-cw{suffix}")


@pytest.fixture(scope="module")
async def two_workers(
    two_worker_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[list[subprocess.Popen[bytes]]]:
    logs = tmp_path_factory.mktemp("config-workers")
    workers: list[subprocess.Popen[bytes]] = []
    try:
        for n in (1, 2):
            log = logs / f"{n}.log"
            workers.append(await start_ready_worker(two_worker_settings, log, timeout=180))
    except BaseException:
        for process in workers:
            process.kill()
        raise
    # Both in the group before anything is sent: each holds journal partitions.
    for n in (1, 2):
        deadline = time.monotonic() + 60
        while "_on_partitions_assigned" not in (logs / f"{n}.log").read_text(errors="replace"):
            assert time.monotonic() < deadline, f"worker {n} was never assigned partitions"
            await asyncio.sleep(0.2)
    yield workers
    for process in workers:
        stop_worker(process)


async def test_ingest_off_is_obeyed_on_every_workers_partitions(
    two_worker_settings: Settings, two_workers: list[subprocess.Popen[bytes]], eventually: Any
) -> None:
    settings = two_worker_settings
    partitions = settings.broker.partitions
    agents: dict[int, str] = {}
    n = 0
    while len(agents) < partitions:  # one agent on every journal partition
        agent = f"fleet-{n}"
        agents.setdefault(partition_of(agent, partitions), agent)
        n += 1
    keys = Keyspace(settings.broker.topic_prefix)
    redis = Redis.from_url(settings.redis.url)
    try:
        async with GrimoireClient(
            settings.bootstrap_servers, settings.broker.topic_prefix, partitions=partitions
        ) as client:

            async def links(count: int) -> bool:
                lengths = [await redis.xlen(keys.witness(a)) for a in agents.values()]
                return all(length >= count for length in lengths)

            for agent in agents.values():
                await client.send_command(
                    CommandV1(agent_id=agent, command="configure", config={"ingest_enabled": False})
                )
            await eventually(lambda: links(1), timeout=120, interval=0.3)
            for agent in agents.values():
                await client.publish_episode(
                    EpisodeV1(agent_id=agent, ts=T0, text="alert: relayer stalled", event_id="e-1")
                )
            await eventually(lambda: links(2), timeout=120, interval=0.3)
        assert all(process.poll() is None for process in two_workers)
        for agent in agents.values():
            assert await redis.hlen(keys.decided(agent)) == 0, agent  # skipped, not decided
    finally:
        await redis.aclose()
