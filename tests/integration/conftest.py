"""Integration fixtures: the real broker and Redis, started by the project's own
services manager on test ports, and a real worker process against them.

Nothing here skips: if a service cannot start, the tests error with its log.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from grimoire.infra.services import LocalServices, ServicePorts
from grimoire.infra.settings import Settings
from grimoire.topics.client import GrimoireClient, RecallTimeout

ROOT = Path(__file__).resolve().parents[2]
STATE_DIR = ROOT / ".grimoire" / "test"
WHEEL_CACHE = ROOT / ".grimoire" / "wheels"
WORKER_READY_TIMEOUT_S = 120.0


@pytest.fixture(scope="session")
def local_services() -> Iterator[LocalServices]:
    ports = ServicePorts(
        kafka=int(os.environ.get("GRIMOIRE_TEST_KAFKA_PORT", "19392")),
        redis=int(os.environ.get("GRIMOIRE_TEST_REDIS_PORT", "16679")),
    )
    services = LocalServices(STATE_DIR, ports, wheel_cache=WHEEL_CACHE)
    started = services.up()
    yield services
    if started:
        services.down()


@pytest.fixture(scope="session")
def settings(local_services: LocalServices) -> Settings:
    # A fresh prefix per session isolates runs that reuse already-running services.
    return Settings(
        broker_url=f"kafka://{local_services.kafka_bootstrap}",
        redis_url=local_services.redis_url,
        topic_prefix=f"it{uuid.uuid4().hex[:8]}",
        _env_file=None,  # type: ignore[call-arg]
    )


def _settings_env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRIMOIRE_")}
    env.update(
        GRIMOIRE_BROKER_URL=settings.broker_url,
        GRIMOIRE_REDIS_URL=settings.redis_url,
        GRIMOIRE_TOPIC_PREFIX=settings.topic_prefix,
        GRIMOIRE_PARTITIONS=str(settings.partitions),
        GRIMOIRE_LOG_LEVEL="INFO",
        HF_HUB_OFFLINE="1",
    )
    return env


async def _wait_until_answering(client: GrimoireClient, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + WORKER_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"worker exited with {process.returncode}")
        try:
            await client.recall("_readiness_probe", "ready?", timeout=2.0)
            return
        except RecallTimeout:
            continue
    raise TimeoutError("worker did not answer a recall in time")


@pytest.fixture(scope="session")
async def worker(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[subprocess.Popen[bytes]]:
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "grimoire.infra.cli", "worker"],
            env=_settings_env(settings),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    try:
        async with GrimoireClient(
            settings.bootstrap_servers, settings.topic_prefix, partitions=settings.partitions
        ) as probe:
            await _wait_until_answering(probe, process)
    except BaseException:
        process.kill()
        sys.stderr.write(log_path.read_text(errors="replace")[-8000:])
        raise
    yield process
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture
async def client(
    settings: Settings, worker: subprocess.Popen[bytes]
) -> AsyncIterator[GrimoireClient]:
    async with GrimoireClient(
        settings.bootstrap_servers, settings.topic_prefix, partitions=settings.partitions
    ) as grimoire:
        yield grimoire


@pytest.fixture
async def redis_client(settings: Settings) -> AsyncIterator[Redis]:
    redis = Redis.from_url(settings.redis_url)
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


@pytest.fixture
def eventually() -> Callable[..., Awaitable[Any]]:
    return _eventually
