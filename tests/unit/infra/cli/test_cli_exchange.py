"""`grimoire export` and `grimoire import` as a person runs them (`cli.main`).

Redis is replaced where `infra/exchange.py` opens it (a stand-in holding one
agent's state lines and the applied-chunk marks), and the Kafka client by a
recording fake: what is asserted is the file written, the chunks that would be
sent (with the caller's key), what is printed, the progress bars on stderr and
the exit code (0 done, 1 refused or not applied, 2 bad arguments or a bad file,
with a one-line reason). The journal's side of an import is in
tests/integration/test_exchange.py; the routes' in test_http_exchange_facts.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from grimoire.infra import cli
from grimoire.infra import exchange as exchange_module
from grimoire.infra.cli import common
from grimoire.streams.exchange.chunks import chunk_from_wire
from grimoire.streams.exchange.format import ExportHeader, ExportWriter, StateLine, read_export
from grimoire.streams.trust.tenancy import TenantScope
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.testing.api_keys import InMemoryApiKeyStore
from grimoire.topics import client as client_module
from grimoire.topics.schemas import CommandV1
from tests.support.cli import assert_help, patch_opener

AGENT = "fleet-a/golem-1"
HEIR = "fleet-a/golem-2"
T0 = 1_790_000_000_000
LINES = [
    StateLine("stats", "", "hash", ((b"candidates", b"3"), (b"stored", b"2"))),
    StateLine("config", "", "string", b'{"top_k":5}'),
    StateLine("watermark", "", "score", float(T0)),
]


class FakeRedis:
    """What export and import read: the agent's state and the applied chunks."""

    def __init__(self, sent: list[CommandV1], apply: bool) -> None:
        self.sent = sent
        self.apply = apply

    async def zscore(self, key: str, member: str) -> float | None:
        return float(T0) if key == Keyspace("grimoire").watermark(AGENT) else None

    async def get(self, key: str) -> bytes | None:
        return None

    async def hget(self, key: str, field: str) -> bytes | None:
        return None

    async def smembers(self, key: str) -> set[bytes]:
        # Every chunk sent is applied at once (or, with `apply` off, none ever is).
        return {c.event_id.encode() for c in self.sent if c.event_id} if self.apply else set()

    async def aclose(self) -> None:
        return None


class Sent:
    def __init__(self) -> None:
        self.commands: list[CommandV1] = []
        self.keys: list[str | None] = []
        self.apply = True


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Sent:
    record = Sent()

    def redis(url: str, db: int = 0) -> FakeRedis:
        return FakeRedis(record.commands, record.apply)

    async def state_lines(
        redis: Any, prefix: str, agent_id: str, *, vectors: bool = True, progress: Any = None
    ) -> list[StateLine]:
        if progress is not None:
            progress(len(LINES), len(LINES))
        return list(LINES) if agent_id == AGENT else []

    class FakeClient:
        def __init__(self, *args: Any, api_key: str | None = None, **kwargs: Any) -> None:
            record.keys.append(api_key)

        async def __aenter__(self) -> FakeClient:
            return self

        async def __aexit__(self, *exc: object) -> None:
            return None

        async def send_command(self, command: CommandV1) -> None:
            record.commands.append(command)

    monkeypatch.setattr(exchange_module, "create_redis", redis)
    monkeypatch.setattr(exchange_module, "read_state_lines", state_lines)
    monkeypatch.setattr(client_module, "GrimoireClient", FakeClient)
    monkeypatch.delenv("GRIMOIRE_API_KEY", raising=False)
    monkeypatch.delenv("GRIMOIRE_AUTH_ENABLED", raising=False)
    return record


def export_file(path: Path, agent: str = AGENT) -> Path:
    writer = ExportWriter()
    header = ExportHeader(agent, T0, {"stats": 1, "config": 1, "watermark": 1}, True, None, 384)
    body = writer.header(header) + b"".join(writer.line(line) for line in LINES)
    path.write_bytes(body + writer.trailer())
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv", [["export"], ["import"], ["causal"]], ids=" ".join)
def test_the_commands_have_help(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert_help(capsys, argv)


# ---- export ------------------------------------------------------------------------


def test_export_writes_a_file_import_reads_back_with_a_progress_bar(
    sent: Sent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "a.jsonl"
    code, printed, err = run(capsys, "export", "--agent", AGENT, "--out", str(out))
    assert (code, printed) == (0, "")
    items = list(read_export(out.read_bytes().splitlines()))
    header = items[0]
    assert isinstance(header, ExportHeader) and header.agent_id == AGENT
    assert header.watermark == T0 and dict(header.counts) == {
        "stats": 1,
        "config": 1,
        "watermark": 1,
    }
    assert items[1:-1] == sorted(LINES, key=lambda line: line.sort_key())
    report = orjson.loads(err.strip().splitlines()[-1])
    assert report["agent"] == AGENT and report["lines"] == 3 and report["out"] == str(out)
    assert "export: write" in err  # the progress bar


def test_export_to_standard_output_without_a_bar(
    sent: Sent, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    code = cli.main(["export", "--agent", AGENT, "--no-progress", "--no-vectors"])
    out, err = capsysbinary.readouterr()
    assert code == 0 and b"export:" not in err
    assert orjson.loads(out.splitlines()[0])["vectors"] is False
    assert len(list(read_export(out.splitlines()))) == 2 + len(LINES)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["export", "--agent", "has space"], "agent"),
        (["export", "--agent", AGENT, "--out", "/nonexistent-dir/x.jsonl"], "No such file"),
    ],
)
def test_export_bad_input_is_one_line_and_exit_2(
    sent: Sent, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, printed, err = run(capsys, *argv, "--no-progress")
    assert (code, printed) == (2, "")
    assert err.startswith("grimoire export: ") and message in err
    assert "Traceback" not in err


def test_export_needs_an_agent(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["export"])
    assert exited.value.code == 2 and "--agent" in capsys.readouterr().err


# ---- import ------------------------------------------------------------------------


def test_import_sends_the_chunks_with_the_key_and_waits_for_them(
    sent: Sent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = export_file(tmp_path / "a.jsonl")
    code, printed, err = run(capsys, "import", str(path), "--api-key", "gmk_k.s")
    assert code == 0, err
    report = orjson.loads(printed)
    assert report["agent"] == AGENT and report["applied"] is True
    assert report["chunks"] == len(sent.commands) >= 1 and report["lines"] == len(LINES)
    assert sent.keys == ["gmk_k.s"]
    chunk = chunk_from_wire(sent.commands[0].import_chunk)
    assert chunk.import_id == report["import_id"] and chunk.agent_id == AGENT
    assert "import: send" in err and "import: applied" in err  # the progress bars


def test_import_not_applied_in_time_exits_1(
    sent: Sent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sent.apply = False
    path = export_file(tmp_path / "a.jsonl")
    code, printed, _ = run(capsys, "import", str(path), "--timeout", "0", "--no-progress")
    assert code == 1 and orjson.loads(printed)["applied"] is False


def test_import_no_wait_reports_without_waiting(
    sent: Sent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sent.apply = False
    path = export_file(tmp_path / "a.jsonl")
    code, printed, _ = run(capsys, "import", str(path), "--no-wait", "--no-progress")
    assert code == 0 and orjson.loads(printed)["applied"] is None


def _tampered(path: Path) -> Path:
    lines = path.read_bytes().splitlines()
    lines[1] = lines[1].replace(b"3", b"4")
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


@pytest.mark.parametrize(
    ("make", "extra", "message"),
    [
        (lambda p: p, [], "No such file"),
        (lambda p: (p.write_bytes(b"not json\n"), p)[1], [], "line 1"),
        (lambda p: _tampered(export_file(p)), [], "line"),
        (lambda p: export_file(p), ["--agent", HEIR], "--as-successor-of"),
        (lambda p: export_file(p), ["--agent", HEIR, "--as-successor-of", "x"], "not x's"),
        (
            lambda p: export_file(p),
            ["--agent", HEIR, "--as-successor-of", AGENT, "--inheritance-discount", "2"],
            "discount",
        ),
    ],
)
def test_import_bad_input_is_one_line_exit_2_and_sends_nothing(
    sent: Sent,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make: Any,
    extra: list[str],
    message: str,
) -> None:
    path = make(tmp_path / "a.jsonl")
    code, printed, err = run(capsys, "import", str(path), "--no-progress", *extra)
    assert (code, printed) == (2, ""), err
    assert err.startswith("grimoire import: ") and message in err
    assert "Traceback" not in err
    assert sent.commands == []


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> InMemoryApiKeyStore:
    monkeypatch.setenv("GRIMOIRE_AUTH_ENABLED", "true")
    return patch_opener(monkeypatch, common, "api_keys", InMemoryApiKeyStore())


async def _token(store: InMemoryApiKeyStore, scope: TenantScope) -> str:
    _, token = await store.create(scope, "test", now_ms=1)
    return token


@pytest.mark.parametrize("successor", [False, True])
async def test_import_with_a_key_of_another_tenant_is_refused_before_sending(
    sent: Sent,
    keys: InMemoryApiKeyStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    successor: bool,
) -> None:
    # The successor's key reaches the heir, not the predecessor it would read.
    other = await _token(keys, TenantScope(agent_ids=frozenset({HEIR, "rival"})))
    path = export_file(tmp_path / "a.jsonl")
    extra = ["--agent", HEIR, "--as-successor-of", AGENT] if successor else []
    argv = ["import", str(path), "--no-progress", "--api-key", other, *extra]
    code, printed, err = await _main_in_thread(capsys, argv)
    assert (code, printed) == (1, "")
    assert err.startswith("grimoire import: the key is refused for 'fleet-a/golem-1'")
    assert sent.commands == []
    fleet = await _token(keys, TenantScope(agent_prefix="fleet-a/"))
    argv = ["import", str(path), "--no-progress", "--no-wait", "--api-key", fleet, *extra]
    code, printed, err = await _main_in_thread(capsys, argv)
    assert code == 0, err
    # (A successor inherits memories only; this file has none, so it sends none.)
    assert sent.keys[-1] == fleet and orjson.loads(printed)["chunks"] == len(sent.commands)
    assert bool(sent.commands) is not successor


async def test_import_without_a_key_is_refused_where_keys_are_checked(
    sent: Sent, keys: InMemoryApiKeyStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = export_file(tmp_path / "a.jsonl")
    code, _, err = await _main_in_thread(capsys, ["import", str(path), "--no-progress"])
    assert code == 1 and "the key is refused" in err
    assert sent.commands == []


async def _main_in_thread(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> tuple[int, str, str]:
    # `cli.main` runs its own event loop; the key store was filled on this one.
    import asyncio

    code = await asyncio.to_thread(cli.main, argv)
    out, err = capsys.readouterr()
    return code, out, err
