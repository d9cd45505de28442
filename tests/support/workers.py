"""Starting a real worker process for an integration test, and waiting until it
answers a recall (its model loaded, its partitions assigned); a deployment on a
prefix of its own, and a client for it."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from grimoire.infra.local.worker_process import start_worker, stop_worker
from grimoire.infra.settings import Settings
from grimoire.topics.client import GrimoireClient

ROOT = Path(__file__).resolve().parents[2]
READY_S = 120.0  # how long a worker may take to answer its first recall


def prefixed_settings(settings: Settings, head: str, **update: Any) -> Settings:
    """`settings` (with `update`) on a prefix of its own, `head` and 8 random hex
    digits: topics and keys no other test touches, so its worker, wipe and replay
    leave the other tests alone."""
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
