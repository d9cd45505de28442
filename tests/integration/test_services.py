"""grimoire.infra.local.services against real tansu and redis-server processes on spare ports."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from aiokafka import AIOKafkaClient

from grimoire.infra.exceptions import GrimoireInfraError, ServiceError
from grimoire.infra.local.services import LocalServices, ServicePorts
from tests.support.stacks import WHEEL_CACHE

pytestmark = pytest.mark.integration


def _free_ports() -> ServicePorts:
    socks = [socket.socket() for _ in range(2)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        kafka, redis_port = (sock.getsockname()[1] for sock in socks)
    finally:
        for sock in socks:
            sock.close()
    return ServicePorts(kafka=kafka, redis=redis_port)


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _gone(pid: int) -> bool:
    # Services started by an exited CLI are reparented to an init that may not reap them.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def _pid_of(line: str) -> int:
    assert line.startswith("running pid "), line
    return int(line.split()[2])


def _names(reply: Any) -> set[bytes]:
    return {name.encode() if isinstance(name, str) else name for name in reply}


@pytest.fixture
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServices]:
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    svc = LocalServices(tmp_path_factory.mktemp("state"), _free_ports(), wheel_cache=WHEEL_CACHE)
    yield svc
    svc.down()  # never leak processes, even after a failed assertion


async def test_up_is_ready_idempotent_and_down_stops_everything(services: LocalServices) -> None:
    ports = services.ports
    services.ensure_binaries()
    # Start through the CLI in a child interpreter: the services must outlive that parent.
    cli = [sys.executable, "-m", "grimoire.infra.local.services", "up"]
    args = ["--state-dir", str(services.state_dir)]
    args += ["--kafka-port", str(ports.kafka), "--redis-port", str(ports.redis)]
    done = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "kafka: running pid" in done.stdout and f"127.0.0.1:{ports.redis}" in done.stdout
    pids = {name: _pid_of(line) for name, line in services.status().items()}

    client = AIOKafkaClient(bootstrap_servers=services.kafka_bootstrap, request_timeout_ms=5000)
    try:
        await client.bootstrap()
        metadata = await client.fetch_all_metadata()
    finally:
        await client.close()
    assert {(b.host, b.port) for b in metadata.brokers()} == {("127.0.0.1", ports.kafka)}

    r = redis.Redis.from_url(services.redis_url)
    try:
        modules = r.execute_command("MODULE", "LIST")
        names = {m[b"name"] if isinstance(m, dict) else m[1] for m in modules}
        assert {b"search", b"ReJSON"} <= names
        assert _names(r.execute_command("FT._LIST")) == set()
        schema = ["v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", "4"]
        schema += ["DISTANCE_METRIC", "COSINE"]
        r.execute_command(
            "FT.CREATE", "t_idx", "ON", "HASH", "PREFIX", "1", "t:", "SCHEMA", *schema
        )
        assert b"t_idx" in _names(r.execute_command("FT._LIST"))
        timeout = r.execute_command("FT.CONFIG", "GET", "TIMEOUT")
        assert dict(timeout) == {b"TIMEOUT": b"0"}  # RESP3 map or RESP2 pairs
    finally:
        r.close()

    # Called with this test's loop running, so the Kafka probe takes the worker-thread path.
    assert services.up() is False
    assert {name: _pid_of(line) for name, line in services.status().items()} == pids

    services.down()
    assert all(_gone(pid) for pid in pids.values())
    assert not _listening(ports.kafka) and not _listening(ports.redis)
    assert not list((services.state_dir / "run").glob("*.pid"))
    assert services.status() == {"kafka": "stopped", "redis": "stopped"}
    services.down()  # second down is a no-op


@pytest.mark.parametrize("taken", ["kafka", "redis"])
def test_up_refuses_port_held_by_foreign_listener(services: LocalServices, taken: str) -> None:
    port = getattr(services.ports, taken)
    other = services.ports.redis if taken == "kafka" else services.ports.kafka
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with pytest.raises(ServiceError, match=f"127.0.0.1:{port}.*did not start"):
            services.up()
        assert "in use by another process" in services.status()[taken]
    assert not _listening(other)
    assert not list((services.state_dir / "run").glob("*.pid"))
    assert issubclass(ServiceError, GrimoireInfraError)


def test_down_leaves_foreign_pid_alive(services: LocalServices) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        run_dir = services.state_dir / "run"
        run_dir.mkdir(parents=True)
        (run_dir / f"tansu-{services.ports.kafka}.pid").write_text(f"{sleeper.pid}\n")
        (run_dir / f"redis-{services.ports.redis}.pid").write_text(f"{sleeper.pid}\n")
        assert services.status() == {"kafka": "stopped", "redis": "stopped"}
        services.down()
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_failed_start_reports_log_and_rolls_back(services: LocalServices) -> None:
    services.ensure_binaries()
    broken = services.bin_dir / "rejson.so"
    broken.write_bytes(b"not a shared object")  # keeps its exec bit, so it is not re-extracted
    with pytest.raises(ServiceError, match=r"redis \(pid \d+\) exited during startup") as err:
        services.up()
    assert "rejson.so" in str(err.value)  # the log tail names the module that failed
    # Kafka did start in that call; it must have been stopped again.
    assert not _listening(services.ports.kafka)
    assert services.status() == {"kafka": "stopped", "redis": "stopped"}
