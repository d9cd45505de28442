"""The `grimoire` command line as one argparse parser, assembled from the command
modules: each module owns its commands' flags and handlers (a `Subcommand` each), and
this module only fixes the order `grimoire --help` lists them in."""

from __future__ import annotations

import argparse

from grimoire.infra.cli import (
    causal,
    clades,
    commands,
    common,
    events,
    exchange,
    keys,
    local,
    reads,
    upkeep,
    worker,
)

__all__ = ["COMMANDS", "DESCRIPTION", "ORDER", "build_parser"]

#: What `grimoire --help` says first.
DESCRIPTION = "The `grimoire` command: worker, local services, recall, demo."

#: Every command by name; each name is the `command` of the parsed arguments.
COMMANDS: dict[str, common.Subcommand] = {
    **worker.COMMANDS,
    **local.COMMANDS,
    **reads.COMMANDS,
    **causal.COMMANDS,
    **commands.COMMANDS,
    **events.COMMANDS,
    **upkeep.COMMANDS,
    **keys.COMMANDS,
    **exchange.COMMANDS,
    **clades.COMMANDS,
}

#: The order of `grimoire --help`: the processes, the reads and writes of the HTTP
#: API, the operator's commands, then the local stack.
ORDER = (
    "worker", "services", "recall",
    "agents", "search", "memory", "causal", "episodes",
    "config", "retract", "forget", "pin", "unpin", "publish", "unpublish", "events",
    "stats", "serve", "playbook", "maintain", "reindex", "digest", "audit",
    "keys", "clade", "replay", "export", "import",
    "up", "smoke", "demo", "mcp",
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grimoire", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ORDER:
        COMMANDS[name].add_parser(sub)
    return parser
