"""Clades (docs/clades.md): `clade join|leave|list|members|entries`, the
deployment's membership and a clade's shared entries, and `publish` / `unpublish`,
an agent's commands that share one of its memories with its clades or withdraw it.

Membership is an operator's business, as tenant keys are: `clade join` and `clade
leave` write the registry in the memory Redis directly (over HTTP they need an
admin key) and are part of no agent's journal. `publish` and `unpublish` are
commands through the agent's journal, sent as their HTTP routes send them
(infra/http/clades.py), after the same checks; `clade entries` reads what the
members published with the route's own `shared_entries`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grimoire.infra.cli import common
from grimoire.infra.cli.ops import operation
from grimoire.infra.settings import Settings

if TYPE_CHECKING:
    from grimoire.infra.http.clades import MemoryReader
    from grimoire.tables.ports.clade import CladeRegistry, PublishedStore

__all__ = ["COMMANDS", "CladeStores"]

_DEFAULT_ENTRIES = 200  # as GET /v1/clades/{clade}/entries?limit
_MAX_ENTRIES = 1000


@dataclass(frozen=True)
class CladeStores:
    """What the commands read and write: the membership registry, what each agent
    published, and one memory of an agent with every stored field."""

    registry: CladeRegistry
    published: PublishedStore
    read: MemoryReader


@contextlib.asynccontextmanager
async def _stores(settings: Settings) -> AsyncIterator[CladeStores]:
    """The registry in the key store's Redis (where the sequencer reads it), what
    agents published in the memory Redis."""
    import functools

    from grimoire.tables.clade.store import RedisCladeRegistry, RedisPublishedStore
    from grimoire.tables.memory.inspect import memory_detail
    from grimoire.tables.redis_client import create_redis

    prefix = settings.broker.topic_prefix
    async with common.memory_redis(settings) as redis:
        keys = (
            create_redis(settings.redis.keystore_url, 2) if settings.redis.keystore_url else redis
        )
        try:
            yield CladeStores(
                RedisCladeRegistry(keys, prefix),
                RedisPublishedStore(redis, prefix),
                functools.partial(memory_detail, redis, prefix),
            )
        finally:
            if keys is not redis:
                await keys.aclose()


def _checked_clade(name: str) -> str:
    from grimoire.infra.http.clades import CLADE_NAME_RULE
    from grimoire.streams.clade.copies import valid_clade_name

    if not valid_clade_name(name):
        raise common.Refused(2, f"not a clade name: {name!r} ({CLADE_NAME_RULE})")
    return name


# ---- membership and entries -------------------------------------------------------


async def _membership(settings: Settings, join: bool, clade: str, agent_id: str) -> bool:
    async with _stores(settings) as stores:
        if join:
            return await stores.registry.join(clade, agent_id)
        return await stores.registry.leave(clade, agent_id)


async def _listing(settings: Settings) -> list[dict[str, Any]]:
    async with _stores(settings) as stores:
        return [
            {"clade": name, "members": len(await stores.registry.members(name))}
            for name in await stores.registry.names()
        ]


async def _members(settings: Settings, clade: str) -> list[str]:
    async with _stores(settings) as stores:
        return await stores.registry.members(clade)


async def _entries(settings: Settings, clade: str, limit: int) -> tuple[list[dict[str, Any]], bool]:
    from grimoire.infra.http.clades import shared_entries

    async with _stores(settings) as stores:
        members = await stores.registry.members(clade)
        return await shared_entries(stores.published, stores.read, members, clade, limit=limit)


def _run_clade(settings: Settings, args: argparse.Namespace) -> int:
    action = args.clade
    if action == "list":
        for line in asyncio.run(_listing(settings)):
            common.print_line(line)
        return 0
    clade = _checked_clade(args.name)
    if action in ("join", "leave"):
        changed = asyncio.run(_membership(settings, action == "join", clade, args.agent))
        common.print_line(
            {"clade": clade, "agent_id": args.agent, "member": action == "join", "changed": changed}
        )
        return 0
    if action == "members":
        common.print_line({"clade": clade, "members": asyncio.run(_members(settings, clade))})
        return 0
    limit = common.checked_range("--limit", args.limit, 1, _MAX_ENTRIES)
    entries, truncated = asyncio.run(_entries(settings, clade, limit))
    for entry in entries:
        common.print_line(entry)
    if truncated:
        sys.stderr.write(f"grimoire clade entries: more than {limit}; raise --limit to see more\n")
    return 0


# ---- publish and unpublish: the agent's commands --------------------------------------


async def _exists(settings: Settings, agent_id: str, memory_id: str) -> bool:
    async with _stores(settings) as stores:
        return await stores.read(agent_id, memory_id) is not None


async def _send(settings: Settings, api_key: str | None, command: Any) -> None:
    async with common.gateway(settings, api_key) as client:
        await client.send_command(command)


def _run_publishing(settings: Settings, args: argparse.Namespace) -> int:
    from grimoire.topics.client import clade_command

    memory_id = common.checked_id("MEMORY_ID", args.memory_id)
    if any(ch.isspace() for ch in memory_id):
        raise common.Refused(2, f"MEMORY_ID must not contain whitespace, got {memory_id!r}")
    clade = _checked_clade(args.clade) if args.clade is not None else None
    # A withdrawal needs no memory: what was published may be gone since.
    if args.command == "publish" and not asyncio.run(_exists(settings, args.agent, memory_id)):
        raise common.Refused(1, f"agent {args.agent!r} has no memory {memory_id!r}")
    command = clade_command(
        args.command, args.agent, memory_id, clade=clade, event_id=common.event_id()
    )
    asyncio.run(_send(settings, common.api_key(args), command))
    common.print_line(
        {
            "accepted": True,
            "command": args.command,
            "agent_id": args.agent,
            "event_id": command.event_id,
            "memory_id": memory_id,
            "clade": clade,
        }
    )
    return 0


# ---- the parsers ---------------------------------------------------------------------


def _add_clade(sub: common.Subparsers) -> None:
    clade = sub.add_parser(
        "clade",
        help="clades: join | leave | list | members | entries (membership is the operator's)",
        description="A clade is a named set of agents that share what they publish. "
        "Membership is the deployment's (written here, or over HTTP with an admin key), "
        "never part of an agent's journal.",
    )
    action = clade.add_subparsers(dest="clade", required=True)
    for name, what in (("join", "add AGENT to CLADE"), ("leave", "remove AGENT from CLADE")):
        change = action.add_parser(name, help=f"{what} (JSON; `changed`: whether it changed)")
        change.add_argument("name", metavar="CLADE")
        change.add_argument("agent", metavar="AGENT")
    action.add_parser("list", help="every clade with a member, one JSON line each")
    members = action.add_parser("members", help="the clade's members (JSON)")
    members.add_argument("name", metavar="CLADE")
    entries = action.add_parser(
        "entries", help="what the clade's members published to it, one JSON line each"
    )
    entries.add_argument("name", metavar="CLADE")
    entries.add_argument(
        "--limit", type=int, default=_DEFAULT_ENTRIES, help=f"at most (1-{_MAX_ENTRIES})"
    )


def _publishing(action: str, what: str) -> common.Subcommand:
    """`publish` or `unpublish`: the same arguments, another command."""

    def add(sub: common.Subparsers) -> None:
        parser = sub.add_parser(action, help=f"{what} (a command through the journal; JSON)")
        parser.add_argument("agent", metavar="AGENT")
        parser.add_argument("memory_id", metavar="MEMORY_ID")
        parser.add_argument(
            "--clade", default=None, help="only this clade (default: every clade of AGENT)"
        )
        common.add_api_key(parser)

    return common.Subcommand(add, operation(_run_publishing))


COMMANDS: dict[str, common.Subcommand] = {
    "clade": common.Subcommand(_add_clade, operation(_run_clade)),
    "publish": _publishing(
        "publish", "share a memory with the agent's clades (exit 1 if the agent has no such memory)"
    ),
    "unpublish": _publishing("unpublish", "withdraw a published memory from the agent's clades"),
}
