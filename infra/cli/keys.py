"""`grimoire keys create|revoke|list`: the deployment's tenant API keys.

Keys are an operator's business, not a tenant's, so there is no HTTP route for
them: these commands are the only writer of the key store (`common.api_keys`).
A token is printed once, when it is created; only its digest is stored."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import TYPE_CHECKING, Any

import orjson

from grimoire.infra.cli import common
from grimoire.infra.settings import Settings

if TYPE_CHECKING:
    from grimoire.streams.trust.tenancy import ApiKeyRecord, TenantScope

__all__ = ["COMMANDS"]


def _key_listing(record: ApiKeyRecord) -> dict[str, Any]:
    """A key as `keys list` shows it: never its secret, nor its digest."""
    return {
        "key_id": record.key_id,
        "label": record.label,
        "scope": {
            "agent_ids": sorted(record.scope.agent_ids),
            "agent_prefix": record.scope.agent_prefix,
            "admin": record.scope.admin,
        },
        "created_ms": record.created_ms,
        "revoked": record.revoked,
    }


def _key_scope(args: argparse.Namespace) -> TenantScope | str:
    """The scope `keys create` asks for, or why it is not one."""
    from grimoire.streams.inbound.validators import AGENT_ID_ALPHABET, InputLimits, is_agent_id
    from grimoire.streams.trust.tenancy import TenantScope

    limits = InputLimits()
    if args.admin:
        return TenantScope(admin=True)
    if args.prefix is not None:
        # A prefix is the head of an agent id: the same alphabet, never empty.
        if not is_agent_id(args.prefix, limits):
            return f"--prefix must be 1-{limits.max_id_chars} of {AGENT_ID_ALPHABET}"
        return TenantScope(agent_prefix=args.prefix)
    bad = [agent for agent in args.agents if not is_agent_id(agent, limits)]
    if bad:
        return f"not an agent id: {bad[0]!r} (agent ids hold only {AGENT_ID_ALPHABET})"
    return TenantScope(agent_ids=frozenset(args.agents))


async def _keys_create(settings: Settings, scope: TenantScope, label: str) -> dict[str, Any]:
    async with common.api_keys(settings) as store:
        record, token = await store.create(scope, label, now_ms=int(time.time() * 1000))
    return {**_key_listing(record), "token": token}


async def _keys_revoke(settings: Settings, key_id: str) -> bool:
    async with common.api_keys(settings) as store:
        return await store.revoke(key_id)


async def _keys_list(settings: Settings) -> list[dict[str, Any]]:
    async with common.api_keys(settings) as store:
        return [_key_listing(record) for record in await store.list()]


def _run_keys(settings: Settings, args: argparse.Namespace) -> int:
    if args.keys == "create":
        scope = _key_scope(args)
        if isinstance(scope, str):
            sys.stderr.write(f"grimoire keys create: {scope}\n")
            return 2
        created = asyncio.run(_keys_create(settings, scope, args.label))
        sys.stdout.write(orjson.dumps(created).decode() + "\n")
        sys.stderr.write(
            f"API key {created['key_id']} created. Keep its token now: only its digest "
            "is stored, it cannot be shown again.\n"
        )
        return 0
    if args.keys == "revoke":
        if not asyncio.run(_keys_revoke(settings, args.key_id)):
            sys.stderr.write(f"grimoire keys revoke: no API key {args.key_id!r}\n")
            return 1
        sys.stdout.write(orjson.dumps({"key_id": args.key_id, "revoked": True}).decode() + "\n")
        return 0
    for listed in asyncio.run(_keys_list(settings)):
        sys.stdout.write(orjson.dumps(listed).decode() + "\n")
    return 0


def _add_keys(sub: common.Subparsers) -> None:
    keys = sub.add_parser("keys", help="tenant API keys: create | revoke | list")
    keys_kind = keys.add_subparsers(dest="keys", required=True)
    keys_create = keys_kind.add_parser(
        "create", help="a new key for agents, a prefix or all (JSON; its token shown once)"
    )
    scope = keys_create.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--agent",
        dest="agents",
        metavar="AGENT",
        action="append",
        help="an agent id it reaches (repeatable)",
    )
    scope.add_argument("--prefix", default=None, help="every agent id starting with this")
    scope.add_argument("--admin", action="store_true", help="every agent (the operator's key)")
    keys_create.add_argument("--label", default="", help="a note for listings (who holds it)")
    keys_revoke = keys_kind.add_parser(
        "revoke", help="revoke a key by id (refused everywhere within seconds)"
    )
    keys_revoke.add_argument("key_id")
    keys_kind.add_parser("list", help="every key, one JSON line each (never a secret)")


COMMANDS: dict[str, common.Subcommand] = {
    "keys": common.Subcommand(_add_keys, _run_keys),
}
