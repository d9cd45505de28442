"""The `grimoire` command stays a package of small command modules: no module grows
back into a monolith, `main` only parses and dispatches, and every command the
parser lists has a module that runs it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

from grimoire.infra import cli
from grimoire.infra.cli import dispatch, parser

PACKAGE = Path(cli.__file__).parent
MODULES = sorted(PACKAGE.glob("*.py"))
MAX_MODULE_LINES = 320
MAX_MAIN_LINES = 60


def test_the_package_holds_its_command_modules() -> None:
    names = {path.stem for path in MODULES}
    assert {"__init__", "__main__", "dispatch", "parser", "common"} <= names
    assert len(names) > 8


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.name)
def test_every_module_is_small(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines < MAX_MODULE_LINES, f"{path.name} has {lines} lines"


@pytest.mark.parametrize(
    "name", [info.name for info in pkgutil.iter_modules([str(PACKAGE)]) if info.name != "__main__"]
)
def test_every_module_says_why_and_what_it_exports(name: str) -> None:
    module = importlib.import_module(f"grimoire.infra.cli.{name}")
    assert (module.__doc__ or "").strip()
    assert isinstance(module.__all__, list)


def test_main_only_parses_and_dispatches() -> None:
    lines = inspect.getsource(dispatch.main).splitlines()
    assert len(lines) < MAX_MAIN_LINES
    assert cli.main is dispatch.main


def test_every_listed_command_has_a_module_that_runs_it() -> None:
    assert sorted(parser.ORDER) == sorted(parser.COMMANDS)
    assert len(set(parser.ORDER)) == len(parser.ORDER)
    listed = parser.build_parser()._subparsers
    assert listed is not None
    (choices,) = [action.choices for action in listed._group_actions]
    assert isinstance(choices, dict)
    assert list(choices) == list(parser.ORDER)
