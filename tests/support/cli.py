"""The `grimoire` command in tests: ``patch_opener`` swaps one of the async context
managers a command module opens (``common.api_keys``, ``common.memory_redis``, a
module's own store opener) for one that yields a given fake; ``run_json`` runs a
command that prints JSON lines; ``exit_status`` and ``assert_help`` check what
argparse does before any command runs."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

import orjson
import pytest

from grimoire.infra import cli

__all__ = ["assert_help", "exit_status", "patch_opener", "run_json"]

T = TypeVar("T")


def patch_opener(monkeypatch: pytest.MonkeyPatch, module: object, name: str, value: T) -> T:
    """``module.name`` opens ``value`` from now on, whatever it is called with (the
    settings, a key); returns ``value``."""

    @contextlib.asynccontextmanager
    async def opened(*args: object) -> AsyncIterator[T]:
        yield value

    monkeypatch.setattr(module, name, opened)
    return value


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[Any], str]:
    """`grimoire argv…`: its exit code, each line it printed as JSON, its stderr."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, [orjson.loads(line) for line in out.splitlines()], err


def exit_status(argv: Sequence[str]) -> Any:
    """The status argparse exits with on `argv` (0 after --help, 2 for what it cannot
    parse); what it printed stays for `capsys`."""
    with pytest.raises(SystemExit) as exited:
        cli.main(list(argv))
    return exited.value.code


def assert_help(capsys: pytest.CaptureFixture[str], argv: Sequence[str]) -> None:
    """`grimoire argv… --help` prints that command's usage and exits 0."""
    assert exit_status([*argv, "--help"]) == 0
    assert f"usage: grimoire {' '.join(argv)}" in capsys.readouterr().out
