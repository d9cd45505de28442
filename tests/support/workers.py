"""Starting a real worker process for an integration test, and waiting until it
answers a recall (its model loaded, its partitions assigned)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grimoire.infra.local.worker_process import start_worker
from grimoire.infra.settings import Settings
from grimoire.topics.client import GrimoireClient

ROOT = Path(__file__).resolve().parents[2]


async def start_ready_worker(
    settings: Settings, log: Path, *, timeout: float
) -> subprocess.Popen[bytes]:
    """The worker, once it answers; on failure it is killed and the tail of its
    log goes to stderr before the error is raised."""
    process = start_worker(settings, log, cwd=ROOT)
    try:
        async with GrimoireClient(
            settings.bootstrap_servers, settings.topic_prefix, partitions=settings.partitions
        ) as probe:
            await probe.wait_until_ready(timeout=timeout)
    except BaseException:
        process.kill()
        sys.stderr.write(log.read_text(errors="replace")[-8000:])
        raise
    return process
