"""The `grimoire` command (`grimoire.infra.cli:main`, `python -m grimoire.infra.cli`).

A package of command modules, one per group of commands, each running the same
service functions as the HTTP API; `dispatch.main` only parses and dispatches. The
worker-side dependencies are checked here, first, so an agent-side install
(`grimoire[client]`) gets one line saying what to install, not a traceback."""

from __future__ import annotations

try:
    from grimoire.infra.settings import Settings
except ModuleNotFoundError as missing:  # an agent-side install: `grimoire[client]` only
    raise SystemExit(
        f"the grimoire command runs the worker side and needs {missing.name!r}: "
        "pip install 'grimoire[worker]'"
    ) from missing

from grimoire.infra.cli.dispatch import main

__all__ = ["Settings", "main"]
