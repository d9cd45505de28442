"""What every `grimoire` command module shares: the connections to the services (a
started Kafka client, the memory Redis, the API key store), the checks that refuse
a bad argument with the same rules as the HTTP API, and one JSON object a line.

The connections are looked up through this module (`common.gateway(...)`), never
imported by name, so there is one place to open them and one place for a test to
replace them. Imports of the heavy clients stay inside the functions: `grimoire
--help` loads none of them."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import orjson

from grimoire.infra.settings import Settings

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from grimoire.tables.ports.trust import ApiKeyStore
    from grimoire.topics.client import GrimoireClient

__all__ = [
    "Handler",
    "Refused",
    "Subcommand",
    "Subparsers",
    "UsageError",
    "add_api_key",
    "agent_command",
    "api_key",
    "api_keys",
    "checked_agent",
    "checked_id",
    "checked_range",
    "event_id",
    "gateway",
    "memory_redis",
    "print_line",
]

#: A command: the settings and the parsed arguments in, the exit code out.
Handler: TypeAlias = Callable[[Settings, argparse.Namespace], int]
#: What `ArgumentParser.add_subparsers` returns; each command module adds to it.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


@dataclass(frozen=True)
class Subcommand:
    """One `grimoire` command: how its parser is added, and what runs it."""

    add_parser: Callable[[Subparsers], object]
    run: Handler


class Refused(Exception):
    """A command refused with a one-line reason: exit code 2 for bad arguments, 1
    for something asked for that does not exist (or could not be done)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class UsageError(Exception):
    """An argument argparse could not judge: `main` answers it as argparse does
    (the usage line, the message, exit code 2)."""


def api_key(args: argparse.Namespace) -> str | None:
    """The tenant key of `--api-key`, else `$GRIMOIRE_API_KEY`."""
    # The environment is the better place for a key (a flag shows in `ps`).
    return args.api_key or os.environ.get("GRIMOIRE_API_KEY") or None


def add_api_key(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help="the tenant key gmk_... sent with the request (default $GRIMOIRE_API_KEY; "
        "needed where the workers check keys)",
    )


def agent_command(
    sub: Subparsers, name: str, help: str, description: str | None = None
) -> argparse.ArgumentParser:
    """The parser of a command about one agent: ``--agent`` (required) comes first."""
    parser = sub.add_parser(name, help=help, description=description)
    parser.add_argument("--agent", required=True)
    return parser


@contextlib.asynccontextmanager
async def gateway(settings: Settings, api_key: str | None) -> AsyncIterator[GrimoireClient]:
    """A started client that puts `api_key` on every recall request and command."""
    async with settings.client(api_key) as client:
        yield client


@contextlib.asynccontextmanager
async def memory_redis(settings: Settings) -> AsyncIterator[Redis]:
    """The memory Redis (`GRIMOIRE_REDIS_URL`), closed on the way out."""
    from grimoire.tables.redis_client import create_redis

    redis = create_redis(settings.redis.url, 2)
    try:
        yield redis
    finally:
        await redis.aclose()


@contextlib.asynccontextmanager
async def api_keys(settings: Settings) -> AsyncIterator[ApiKeyStore]:
    """The deployment's API key store: in the key store's Redis, beside the journal
    keys (`GRIMOIRE_KEYSTORE_URL`, else the memory Redis)."""
    from grimoire.tables.redis_client import create_redis
    from grimoire.tables.trust.api_keys import RedisApiKeyStore

    redis = create_redis(settings.redis.keystore_url or settings.redis.url, 2)
    try:
        yield RedisApiKeyStore(redis, settings.broker.topic_prefix)
    finally:
        await redis.aclose()


def checked_agent(settings: Settings, agent_id: str) -> str:
    from grimoire.streams.inbound.validators import AGENT_ID_ALPHABET, is_agent_id

    limits = settings.input_limits
    if not is_agent_id(agent_id, limits):
        raise Refused(
            2,
            f"not an agent id: {agent_id!r} (1-{limits.max_id_chars} of {AGENT_ID_ALPHABET})",
        )
    return agent_id


def checked_id(name: str, value: str) -> str:
    if not value.strip():
        raise Refused(2, f"{name} must not be empty")
    return value


def checked_range(name: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise Refused(2, f"{name} must be within [{low}, {high}], got {value}")
    return value


def print_line(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS).decode() + "\n")


def event_id() -> str:
    import uuid

    # A fresh id per call: repeating a command is a new command (pin, unpin, pin).
    return f"cli-{uuid.uuid4().hex}"
