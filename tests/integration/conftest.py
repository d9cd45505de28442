"""Integration fixtures: the real broker and Redis, started by the project's own
services manager on test ports, and a real worker process against them.

Nothing here skips: if a service cannot start, the tests error with its log.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from redis.asyncio import Redis

from grimoire.infra.local.services import LocalServices, ServicePorts
from grimoire.infra.local.worker_process import stop_worker
from grimoire.infra.settings import Settings
from grimoire.tables.redis_client import create_redis
from grimoire.topics.client import GrimoireClient
from tests.support.live import Live
from tests.support.stacks import WHEEL_CACHE, stack_settings
from tests.support.workers import client_for, start_ready_worker

ROOT = Path(__file__).resolve().parents[2]
WORKER_READY_TIMEOUT_S = 120.0
# Under pytest-xdist (`make test` runs two), each test process starts its own broker
# and Redis: their ports step by this much per process, clear of a 3-master cluster's.
PORT_STEP_PER_PROCESS = 10


def xdist_process_index() -> int:
    """0 for a plain run or xdist's first worker (`gw0`), n for `gwn`."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name.removeprefix("gw")) if name.startswith("gw") else 0


def state_dir() -> Path:
    index = xdist_process_index()
    return ROOT / ".grimoire" / ("test" if index == 0 else f"test-{index}")


def redis_cluster_masters() -> int:
    """`GRIMOIRE_TEST_REDIS_CLUSTER`: run the session against a Redis Cluster of that
    many masters (`1` or `yes`: 3) on consecutive ports from the Redis test port."""
    raw = os.environ.get("GRIMOIRE_TEST_REDIS_CLUSTER", "").strip().lower()
    if raw in ("", "0", "no", "false"):
        return 0
    return 3 if raw in ("1", "yes", "true") else int(raw)


@pytest.fixture(scope="session")
def local_services() -> Iterator[LocalServices]:
    step = PORT_STEP_PER_PROCESS * xdist_process_index()
    ports = ServicePorts(
        kafka=int(os.environ.get("GRIMOIRE_TEST_KAFKA_PORT", "19392")) + step,
        redis=int(os.environ.get("GRIMOIRE_TEST_REDIS_PORT", "16679")) + step,
    )
    services = LocalServices(
        state_dir(), ports, wheel_cache=WHEEL_CACHE, redis_cluster_masters=redis_cluster_masters()
    )
    started = services.up()
    yield services
    if started:
        services.down()


@pytest.fixture(scope="session")
def settings(local_services: LocalServices) -> Settings:
    # A fresh prefix per session isolates runs that reuse already-running services.
    return stack_settings(local_services.kafka_bootstrap, local_services.redis_url, "it")


@pytest.fixture(scope="session")
async def worker(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[subprocess.Popen[bytes]]:
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    process = await start_ready_worker(settings, log_path, timeout=WORKER_READY_TIMEOUT_S)
    yield process
    stop_worker(process)


@pytest.fixture
async def client(
    settings: Settings, worker: subprocess.Popen[bytes]
) -> AsyncIterator[GrimoireClient]:
    async with client_for(settings) as grimoire:
        yield grimoire


@pytest.fixture
async def redis_client(settings: Settings) -> AsyncIterator[Redis]:
    # One Redis or a cluster client, as the worker makes it.
    redis = create_redis(settings.redis.url, 8)
    yield redis
    await redis.aclose()


@pytest.fixture
def agent_ids() -> Iterator[tuple[str, str]]:
    suffix = uuid.uuid4().hex[:8]
    yield (f"agent-a-{suffix}", f"agent-b-{suffix}")


Check = Callable[[], Awaitable[Any]]


async def _eventually(check: Check, *, timeout: float, interval: float = 0.05) -> Any:
    """Poll an async check until it returns a truthy value; returns it or raises."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last: {value!r})")
        await asyncio.sleep(interval)


async def _read_topic(bootstrap: str, topic: str, *, until: Any, timeout: float) -> list[Any]:
    """Read every partition of a topic from the start until `until(records)` holds."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    records: list[Any] = []
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        if not partitions:
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        while not until(records) and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            for messages in batches.values():
                records.extend(messages)
    finally:
        await consumer.stop()
    return records


@pytest.fixture
def read_topic() -> Callable[..., Awaitable[list[Any]]]:
    return _read_topic


@pytest.fixture
def eventually() -> Callable[..., Awaitable[Any]]:
    return _eventually


@pytest.fixture(scope="session")
def deployed(settings: Settings, worker: subprocess.Popen[bytes]) -> Settings:
    """The deployment `live` drives, once its worker answers: the session's. A module
    with a deployment of its own overrides this fixture with that one's settings."""
    return settings


@pytest.fixture
async def live(
    deployed: Settings,
    redis_client: Redis,
    agent_ids: tuple[str, str],
    eventually: Callable[..., Awaitable[Any]],
    read_topic: Callable[..., Awaitable[list[Any]]],
) -> AsyncIterator[Live]:
    """What an end-to-end test of a running worker draws on, as one (a client of its
    own; the Redis is the session's, which every deployment of the tests shares)."""
    async with client_for(deployed) as client:
        yield Live(client, redis_client, deployed, agent_ids, eventually, read_topic)
