"""`grimoire up` (`make run`) as a user runs it: everything comes up on its own
ports, the printed key works, and Ctrl-C stops exactly what it started."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(url: str, token: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return int(answer.status), answer.read()
    except urllib.error.HTTPError as refused:
        return int(refused.code), refused.read()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_up_runs_everything_until_interrupted_then_stops_it(tmp_path: Path) -> None:
    ports = {name: _free_port() for name in ("kafka", "redis", "http", "mcp")}
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRIMOIRE_")}
    env["GRIMOIRE_STATE_DIR"] = str(tmp_path)
    env["GRIMOIRE_TOPIC_PREFIX"] = f"up{int(time.time())}"
    process = subprocess.Popen(
        [sys.executable, "-m", "grimoire.infra.cli", "up",
         "--kafka-port", str(ports["kafka"]), "--redis-port", str(ports["redis"]),
         "--http-port", str(ports["http"]), "--mcp-port", str(ports["mcp"])],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("The worker loads its model"):
                break
        printed = "".join(lines)
        assert "Grimoire is up." in printed, printed
        token = next(ln.split()[2] for ln in lines if ln.startswith("  API key"))
        base = f"http://127.0.0.1:{ports['http']}"
        assert _get(f"{base}/v1/health")[0] == 200
        assert _get(f"{base}/v1/agents")[0] == 401  # auth is on
        status, body = _get(f"{base}/v1/agents", token)
        assert status == 200 and json.loads(body) == {"agents": []}
        assert _get(f"{base}/inspector")[0] == 200
        deadline = time.monotonic() + 60
        while not _listening(ports["mcp"]) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _listening(ports["mcp"])
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
    assert process.returncode == 0
    assert not any(_listening(port) for port in ports.values())
