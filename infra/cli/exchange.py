"""Moving an agent's state: `export` and `import` (docs/export-format.md) and
`replay` (the journal folded into an empty store or a new prefix).

`export` and `import` run `grimoire.infra.exchange`, the same code as the HTTP
routes of infra/http/exchange.py; an import still goes through the agent's journal.
Where the workers check keys, an import's key is checked here first against every
agent it touches."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import orjson

from grimoire.infra.cli import common
from grimoire.infra.settings import Settings
from grimoire.streams.exchange.inherit import DEFAULT_INHERITANCE_DISCOUNT

__all__ = ["COMMANDS"]


def _import_key_check(
    settings: Settings, api_key: str | None
) -> Callable[[Sequence[str]], Awaitable[None]] | None:
    """Where the workers check keys, an import's key must reach every agent it
    touches (the target; a successor's predecessor too): refused here, before a
    chunk is sent, rather than dead-lettered chunk by chunk while the CLI waits."""
    if not settings.worker.auth_enabled:
        return None

    async def check(agents: Sequence[str]) -> None:
        from grimoire.tables.trust.api_keys import Authenticator

        async with common.api_keys(settings) as store:
            authenticator = Authenticator(store, enabled=True, ttl_s=0.0)
            for agent in agents:
                decision = await authenticator.check(api_key, agent)
                if not decision.ok:
                    raise common.Refused(1, f"the key is refused for {agent!r}: {decision.detail}")

    return check


def _run_exchange(settings: Settings, args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from grimoire.infra.exchange import export_agent, import_file
    from grimoire.streams.exchange.format import ExchangeError
    from grimoire.streams.exchange.inherit import InheritanceOptions

    try:
        if args.command == "export":
            agent = common.checked_agent(settings, args.agent)
            if args.out:
                with open(args.out, "wb") as out:
                    done = asyncio.run(
                        export_agent(settings, agent, out, vectors=args.vectors,
                                     progress=not args.no_progress, out_name=args.out)
                    )  # fmt: skip
                sys.stderr.write(orjson.dumps(asdict(done)).decode() + "\n")
            else:
                done = asyncio.run(
                    export_agent(settings, agent, sys.stdout.buffer, vectors=args.vectors,
                                 progress=not args.no_progress)
                )  # fmt: skip
            return 0
        if args.prefix:
            settings = settings.with_values(topic_prefix=args.prefix)
        report = asyncio.run(
            import_file(
                settings,
                Path(args.file),
                agent_id=args.agent,
                successor_of=args.successor_of,
                options=InheritanceOptions(args.inheritance_discount),
                api_key=common.api_key(args),
                wait=not args.no_wait,
                timeout_s=args.timeout,
                progress=not args.no_progress,
                check_key=_import_key_check(settings, common.api_key(args)),
            )
        )
    except common.Refused as refused:
        sys.stderr.write(f"grimoire {args.command}: {refused.message}\n")
        return refused.code
    except (ExchangeError, ValueError, OSError) as exc:
        sys.stderr.write(f"grimoire {args.command}: {exc}\n")
        return 2
    sys.stdout.write(orjson.dumps(asdict(report)).decode() + "\n")
    return 0 if report.applied is not False else 1


def _run_replay(settings: Settings, args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from grimoire.infra.replay import replay

    replayed = asyncio.run(
        replay(
            settings,
            into_prefix=args.into_prefix,
            wipe=args.wipe,
            progress=not args.no_progress,
        )
    )
    sys.stdout.write(orjson.dumps(asdict(replayed), option=orjson.OPT_NON_STR_KEYS).decode() + "\n")
    return 0


def _add_replay(sub: common.Subparsers) -> None:
    replay_cmd = sub.add_parser(
        "replay", help="fold the journal into an empty store or a new prefix (JSON report)"
    )
    replay_cmd.add_argument(
        "--into-prefix", default=None, help="a new prefix to build (default: the deployment's)"
    )
    replay_cmd.add_argument(
        "--wipe", action="store_true", help="first delete the target's memory state (not keys)"
    )
    replay_cmd.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_export(sub: common.Subparsers) -> None:
    export = common.agent_command(
        sub, "export", help="write an agent's state as a JSON Lines file (docs/export-format.md)"
    )
    export.add_argument("--out", default=None, help="the file (default: stdout)")
    export.add_argument(
        "--vectors",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="carry the memories' vectors (without: the importing worker re-embeds)",
    )
    export.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_import(sub: common.Subparsers) -> None:
    importing = sub.add_parser(
        "import", help="write an export into an agent through its journal (JSON report)"
    )
    importing.add_argument("file")
    importing.add_argument("--agent", default=None, help="the agent written (default: the file's)")
    importing.add_argument(
        "--as-successor-of",
        dest="successor_of",
        default=None,
        metavar="AGENT",
        help="--agent inherits the file's agent's memories (provenance predecessor)",
    )
    importing.add_argument(
        "--inheritance-discount",
        type=float,
        default=DEFAULT_INHERITANCE_DISCOUNT,
        help="a successor's confidence (its memories', facts' and causal edges') = the "
        f"predecessor's x this (default {DEFAULT_INHERITANCE_DISCOUNT})",
    )
    importing.add_argument("--prefix", default=None, help="the deployment (default: settings)")
    importing.add_argument(
        "--no-wait", action="store_true", help="return once sent, before it is applied"
    )
    importing.add_argument("--timeout", type=float, default=600.0, help="seconds to wait")
    importing.add_argument("--no-progress", action="store_true", help="no progress bar")
    common.add_api_key(importing)


COMMANDS: dict[str, common.Subcommand] = {
    "replay": common.Subcommand(_add_replay, _run_replay),
    "export": common.Subcommand(_add_export, _run_exchange),
    "import": common.Subcommand(_add_import, _run_exchange),
}
