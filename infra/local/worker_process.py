"""Running a worker as a child process (demo, tests, benchmarks)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from pydantic import SecretStr

from grimoire.infra.local.services import die_with_parent
from grimoire.infra.settings import ENV_PREFIX, Settings


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes a child process see exactly these settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    for name, value in settings.flat_values().items():
        if isinstance(value, SecretStr):
            # str() would hand the child "**********" in place of the secret.
            value = value.get_secret_value()
        if value is not None:
            env[f"{ENV_PREFIX}{name.upper()}"] = str(value)
    env["HF_HUB_OFFLINE"] = "1"
    return env


def start_worker(
    settings: Settings,
    log_path: Path,
    cwd: Path | None = None,
    *,
    tie_to_parent: bool = False,
    append_log: bool = False,
) -> subprocess.Popen[bytes]:
    """`tie_to_parent`: the worker gets SIGTERM when this process dies, however it
    dies (`grimoire up` leaves nothing running behind it)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab" if append_log else "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "grimoire.infra.cli", "worker"],
            env=settings_env(settings),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            preexec_fn=die_with_parent if tie_to_parent else None,
        )


def stop_worker(process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
