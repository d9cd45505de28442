"""The writes through the journal: `config get|set`, `retract`, `forget`, `pin` and
`unpin`, each a Kafka command (`CommandV1`) as its HTTP route sends it
(infra/http/commands.py, config.py).

Each is checked first with the worker's own rules (`apply_update` against the
configuration stored now, the event-id field rules, the memory's existence), so
what the worker would refuse never reaches the journal. Each carries a fresh event
id: repeating a command is a new command."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import orjson

from grimoire.infra.cli import common
from grimoire.infra.cli.ops import operation
from grimoire.infra.settings import Settings

if TYPE_CHECKING:
    from grimoire.streams.config.agent_config import AgentConfig
    from grimoire.tables.ports.config import ConfigStore
    from grimoire.topics.schemas import CommandV1

__all__ = ["COMMANDS"]


@contextlib.asynccontextmanager
async def _config_store(settings: Settings) -> AsyncIterator[ConfigStore]:
    from grimoire.tables.config.store import RedisConfigStore

    async with common.memory_redis(settings) as redis:
        yield RedisConfigStore(redis, settings.broker.topic_prefix)


async def _load_config(settings: Settings, agent_id: str) -> AgentConfig:
    async with _config_store(settings) as store:
        return (await store.load([agent_id]))[agent_id]


async def _memory_exists(settings: Settings, agent_id: str, memory_id: str) -> bool:
    from grimoire.tables.memory.inspect import memory_exists

    async with common.memory_redis(settings) as redis:
        return await memory_exists(redis, settings.broker.topic_prefix, agent_id, memory_id)


async def _send_command(settings: Settings, api_key: str | None, command: CommandV1) -> None:
    async with common.gateway(settings, api_key) as client:
        await client.send_command(command)


def _send(settings: Settings, args: argparse.Namespace, command: str, **target: Any) -> int:
    from grimoire.topics.schemas import CommandV1

    event_id = common.event_id()
    asyncio.run(
        _send_command(
            settings,
            common.api_key(args),
            CommandV1(agent_id=args.agent, command=command, event_id=event_id, **target),
        )
    )
    common.print_line(
        {"accepted": True, "command": command, "agent_id": args.agent, "event_id": event_id}
        | target
    )
    return 0


def _config_update(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs as a partial configuration: a value is JSON when it parses
    (`true`, `5`, `["observation"]`, `null` to reset), else the text as it is."""
    update: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise common.Refused(2, f"expected key=value, got {pair!r}")
        if key in update:
            raise common.Refused(2, f"{key!r} is given twice")
        try:
            update[key] = orjson.loads(raw)
        except orjson.JSONDecodeError:
            update[key] = raw
    return update


def _run_config(settings: Settings, args: argparse.Namespace) -> int:
    from grimoire.streams.config.agent_config import apply_update
    from grimoire.streams.exceptions import InvalidEvent
    from grimoire.topics.schemas import CommandV1

    if args.config == "get":
        config = asyncio.run(_load_config(settings, args.agent))
        common.print_line({"agent_id": args.agent, "config": config.to_wire()})
        return 0
    update = _config_update(args.pairs)
    # Validated as the worker will, merged into the configuration stored now, so a
    # bad value never reaches the journal (as PUT …/config).
    current = asyncio.run(_load_config(settings, args.agent))
    try:
        expected = apply_update(current, update)
    except InvalidEvent as bad:
        where = f"{bad.field}: " if bad.field else ""
        raise common.Refused(2, f"{where}{bad.detail} ({bad.reason})") from None
    event_id = common.event_id()
    asyncio.run(
        _send_command(
            settings,
            common.api_key(args),
            CommandV1(agent_id=args.agent, command="configure", config=update, event_id=event_id),
        )
    )
    # `config`: the configuration once applied, unless another change lands first.
    common.print_line(
        {
            "accepted": True,
            "command": "configure",
            "agent_id": args.agent,
            "event_id": event_id,
            "config": expected.to_wire(),
        }
    )
    return 0


def _run_retract(settings: Settings, args: argparse.Namespace) -> int:
    from grimoire.streams.exceptions import InvalidEvent
    from grimoire.streams.inbound.validators import Fields

    try:
        source = Fields(
            {"source_event_id": args.source_event_id}, settings.input_limits
        ).identifier("source_event_id", required=True)
    except InvalidEvent as bad:
        raise common.Refused(2, f"--source-event-id: {bad.detail} ({bad.reason})") from None
    return _send(settings, args, "retract", source_event_id=source)


def _run_forget(settings: Settings, args: argparse.Namespace) -> int:
    if not args.yes:
        raise common.Refused(
            2,
            f"refusing to forget agent {args.agent!r} without --yes: it erases all of its "
            "memory and makes its journal entries unreadable, for good",
        )
    return _send(settings, args, "forget")


def _run_pin(settings: Settings, args: argparse.Namespace) -> int:
    memory_id = common.checked_id("MEMORY_ID", args.memory_id)
    if not asyncio.run(_memory_exists(settings, args.agent, memory_id)):
        raise common.Refused(1, f"agent {args.agent!r} has no memory {memory_id!r}")
    return _send(settings, args, args.command, memory_id=memory_id)


def _add_config(sub: common.Subparsers) -> None:
    config = sub.add_parser(
        "config", help="an agent's runtime configuration: get | set key=value ..."
    )
    config_kind = config.add_subparsers(dest="config", required=True)
    common.agent_command(config_kind, "get", help="the agent's configuration, every setting (JSON)")
    config_set = common.agent_command(
        config_kind,
        "set",
        help="change settings: a configure command through the journal (effective from "
        "the agent's next event)",
        description="Change part of the agent's configuration: memory_enabled, "
        "ingest_enabled, retrieval_enabled, top_k, time_window_ms, layers, lane_weights. "
        "Each value is JSON when it parses, else text; key=null resets a setting. "
        "Checked against the stored configuration first (exit 2 naming the field), then "
        "sent as a configure command. Examples: ingest_enabled=false top_k=8 "
        "'layers=[\"observation\"]' 'lane_weights={\"bm25\": 2}' time_window_ms=null",
    )
    common.add_api_key(config_set)
    config_set.add_argument("pairs", nargs="+", metavar="key=value")


def _add_retract(sub: common.Subparsers) -> None:
    retract = common.agent_command(
        sub,
        "retract",
        help="retract a source event and what was derived from it (a command; JSON)",
    )
    retract.add_argument(
        "--source-event-id", required=True, help="the event_id the memory came from"
    )
    common.add_api_key(retract)


def _add_forget(sub: common.Subparsers) -> None:
    forget = common.agent_command(
        sub,
        "forget",
        help="erase an agent: all of its memory, its journal made unreadable (needs --yes)",
    )
    forget.add_argument("--yes", action="store_true", help="yes, erase it (there is no undo)")
    common.add_api_key(forget)


def _pinning(action: str, what: str) -> common.Subcommand:
    """`pin` or `unpin`: the same arguments, the same checks, another command."""

    def add(sub: common.Subparsers) -> None:
        pinning = common.agent_command(sub, action, help=f"{what} (a command; exit 1 if absent)")
        common.add_api_key(pinning)
        pinning.add_argument("memory_id", metavar="MEMORY_ID")

    return common.Subcommand(add, operation(_run_pin))


COMMANDS: dict[str, common.Subcommand] = {
    "config": common.Subcommand(_add_config, operation(_run_config)),
    "retract": common.Subcommand(_add_retract, operation(_run_retract)),
    "forget": common.Subcommand(_add_forget, operation(_run_forget)),
    "pin": _pinning("pin", "pin a memory: never compacted or archived"),
    "unpin": _pinning("unpin", "unpin a memory (compaction and archiving may take it again)"),
}
