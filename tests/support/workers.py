"""Starting a real worker process for an integration test, and waiting until it
answers a recall (its model loaded, its partitions assigned); a deployment on a
prefix of its own, and a client for it; two such deployments as one module fixture."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from redis.asyncio import Redis

from grimoire.infra.local.worker_process import start_worker, stop_worker
from grimoire.infra.settings import Settings
from grimoire.tables.redis_client import create_redis
from grimoire.topics.client import GrimoireClient

__all__ = [
    "NO_TIMER_S",
    "READY_S",
    "ROOT",
    "TwoDeployments",
    "add_worker",
    "client_for",
    "prefixed_settings",
    "running_workers",
    "start_ready_worker",
    "two_deployments_fixture",
    "workers_fixture",
]

ROOT = Path(__file__).resolve().parents[2]
READY_S = 120.0  # how long a worker may take to answer its first recall
# A block interval no test lasts: the block timer never fires, so maintenance (where
# it is on) runs only when a test sends the command.
NO_TIMER_S: Final = 3_600.0


def prefixed_settings(
    settings: Settings, head: str, *, timer: bool = True, **update: Any
) -> Settings:
    """`settings` (with `update`) on a prefix of its own, `head` and 8 random hex
    digits: topics and keys no other test touches, so its worker, wipe and replay
    leave the other tests alone. Without `timer`, the block timer is out of the way
    (`NO_TIMER_S`)."""
    if not timer:
        update.setdefault("block_interval_s", NO_TIMER_S)
    return settings.with_values(topic_prefix=f"{head}{uuid.uuid4().hex[:8]}", **update)


def client_for(settings: Settings) -> GrimoireClient:
    """A client (not started: `async with` it) of the deployment `settings` name."""
    return GrimoireClient(
        settings.bootstrap_servers,
        settings.broker.topic_prefix,
        partitions=settings.broker.partitions,
    )


async def start_ready_worker(
    settings: Settings, log: Path, *, timeout: float
) -> subprocess.Popen[bytes]:
    """The worker, once it answers; on failure it is killed and the tail of its
    log goes to stderr before the error is raised."""
    process = start_worker(settings, log, cwd=ROOT)
    try:
        async with client_for(settings) as probe:
            await probe.wait_until_ready(timeout=timeout)
    except BaseException:
        process.kill()
        sys.stderr.write(log.read_text(errors="replace")[-8000:])
        raise
    return process


@asynccontextmanager
async def running_workers(logs: Path, **deployments: Settings) -> AsyncIterator[dict[str, Any]]:
    """`{"logs": logs, name: process}`: a ready worker per named deployment (its log
    `logs/<name>.log`). On the way out, every process then in the dict is stopped:
    those started here, and any a test put there (a restarted worker)."""
    held: dict[str, Any] = {"logs": logs}
    try:
        for name, settings in deployments.items():
            await add_worker(held, name, settings)
        yield held
    finally:
        for process in held.values():
            if isinstance(process, subprocess.Popen):
                stop_worker(process)


async def add_worker(held: dict[str, Any], name: str, settings: Settings) -> None:
    """Start a ready worker as `name` in a `running_workers` dict: one more deployment,
    or one a test stopped, started again. Each start logs to a file of its own
    (`<name>.log`, then `<name>-2.log`, …); `running_workers` stops it on the way out."""
    logs: Path = held["logs"]
    log, starts = logs / f"{name}.log", 1
    while log.exists():
        starts += 1
        log = logs / f"{name}-{starts}.log"
    held[name] = await start_ready_worker(settings, log, timeout=READY_S)


def workers_fixture(name: str, **deployments: str) -> Any:
    """A module fixture called `name` (assign it to that name in the test module):
    `running_workers` for each deployment, given as worker name = the name of the
    fixture with its settings, logging to a temporary folder of its own. Those
    settings fixtures must be plain functions: pytest-asyncio cannot set up an async
    fixture requested by name from inside another."""

    @pytest.fixture(scope="module", name=name)
    async def held_workers(
        request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
    ) -> AsyncIterator[dict[str, Any]]:
        chosen = {worker: request.getfixturevalue(of) for worker, of in deployments.items()}
        async with running_workers(tmp_path_factory.mktemp(name), **chosen) as held:
            yield held

    return held_workers


@dataclass(frozen=True)
class TwoDeployments:
    """A test module's two deployments, `source` and `target` (prefixes of their own,
    a ready worker each), the Redis they share (the session's), and what one test
    leaves for the next (the module's tests run in file order)."""

    source: Settings
    target: Settings
    workers: dict[str, Any]  # `running_workers`: "source" and "target"
    redis: Redis
    state: dict[str, Any]  # from the start: "agent", and its "successor"


def two_deployments_fixture(
    name: str, heads: tuple[str, str], *, successor: str, **update: Any
) -> Any:
    """A module fixture called `name` (assign it to that name in the test module): a
    `TwoDeployments` on prefixes of the `heads` (`prefixed_settings` with `update`),
    its workers logging to a temporary folder of its own. Its state names a fresh
    agent (`pred-…`) and a successor for it (`<successor>-…`)."""

    @pytest.fixture(scope="module", name=name)
    async def two_deployments(
        settings: Settings, tmp_path_factory: pytest.TempPathFactory
    ) -> AsyncIterator[TwoDeployments]:
        source, target = (prefixed_settings(settings, head, **update) for head in heads)
        state = {
            "agent": f"pred-{uuid.uuid4().hex[:6]}",
            "successor": f"{successor}-{uuid.uuid4().hex[:6]}",
        }
        redis = create_redis(settings.redis.url, 8)
        try:
            logs = tmp_path_factory.mktemp(name)
            async with running_workers(logs, source=source, target=target) as held:
                yield TwoDeployments(source, target, held, redis, state)
        finally:
            await redis.aclose()

    return two_deployments
