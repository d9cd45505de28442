"""Clades over HTTP (docs/clades.md): an agent publishing its memory to its clades
and withdrawing it, what it published, and the deployment's clades.

Membership is the deployment's, managed with an admin key and part of no agent's
journal: it decides where an entry goes at the moment it is published. Publishing
is the agent's own: `publish` and `unpublish` are commands through its journal
(202), checked here as the worker's command parser checks them. A clade's shared
entries may be read with an admin key or a key that reaches one of its members.

Order of checks on a membership route, as on an agent's route: the agent id (400),
the key (401; 403 when it is not an admin key), then the clade's name (400).
Every refusal is counted as on any route (`routing.refused`)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from grimoire.infra.http.commands import send_command
from grimoire.infra.http.errors import ApiError, json_response
from grimoire.infra.http.routing import (
    CHALLENGE,
    agent_endpoint,
    bearer_token,
    deps_of,
    endpoint,
    int_param,
    json_object,
    refused,
    unknown_fields,
)
from grimoire.streams.clade.copies import CLADE_PROVENANCE, origin_of, valid_clade_name
from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.inbound.validators import (
    AGENT_ID_ALPHABET,
    INVALID_VALUE,
    Fields,
    is_agent_id,
)
from grimoire.streams.trust.tenancy import AuthDecision, AuthOutcome
from grimoire.tables.memory.inspect import memory_detail, memory_exists
from grimoire.tables.ports.clade import Published, PublishedStore

__all__ = [
    "CLADE_NAME_RULE",
    "MemoryReader",
    "clade_origin",
    "published_json",
    "routes",
    "shared_entries",
]

#: How a refused clade name is explained (streams/clade/copies.py `CLADE_NAME`).
CLADE_NAME_RULE: Final = (
    "a clade's name is 1-128 ASCII letters, digits and . _ - @ + =, starting with a letter or digit"
)
DEFAULT_ENTRIES: Final = 200
MAX_ENTRIES: Final = 1000
# No agent can have this id (`~` is outside the agent-id alphabet): only an admin
# key's scope reaches it (as for the deployment's default configuration).
_DEPLOYMENT: Final = "~deployment"
# Memories read at once while gathering a clade's entries.
_READ_BATCH: Final = 64
_SKIPPED: Final = ("deleted", "retracted")

#: One memory of an agent with every stored field (`memory_detail`), None when absent.
MemoryReader = Callable[[str, str], Awaitable[dict[str, Any] | None]]


def clade_origin(memory: dict[str, Any]) -> dict[str, str] | None:
    """Where a clade copy came from, `{agent_id, memory_id}` of the original (from
    its source event id, `clade:<agent>/<memory id>`); None for any other memory."""
    if memory.get("provenance") != CLADE_PROVENANCE:
        return None
    found = origin_of(str(memory.get("source_event_id") or ""))
    return None if found is None else {"agent_id": found[0], "memory_id": found[1]}


def published_json(published: Published) -> dict[str, Any]:
    """One published memory: its clades, every agent given a copy, and who got it
    through which clade (`routes`)."""
    return {
        "memory_id": published.memory_id,
        "clades": list(published.clades),
        "recipients": list(published.recipients),
        "routes": {clade: list(agents) for clade, agents in published.routes},
    }


def _entry(agent_id: str, memory_id: str, memory: dict[str, Any]) -> dict[str, Any]:
    return {
        "agent_id": agent_id,
        "memory_id": memory_id,
        "kind": memory.get("kind"),
        "layer": memory.get("layer"),
        "text": memory.get("text") or memory.get("gist"),
        "confidence": memory.get("confidence"),
        "ts": memory.get("ts"),
    }


async def shared_entries(
    published: PublishedStore,
    read: MemoryReader,
    members: Sequence[str],
    clade: str,
    *,
    limit: int = DEFAULT_ENTRIES,
) -> tuple[list[dict[str, Any]], bool]:
    """The entries the clade's `members` published naming `clade`, member by member
    (each's in memory-id order), at most `limit`, deleted and retracted ones left
    out; and whether more were left out for the limit."""
    wanted = [
        (member, memory_id)
        for member in members
        for memory_id, entry in (await published.published(member)).items()
        if clade in entry.clades
    ]
    found: list[dict[str, Any]] = []
    for start in range(0, len(wanted), _READ_BATCH):
        batch = wanted[start : start + _READ_BATCH]
        read_back = await asyncio.gather(*(read(agent, memory) for agent, memory in batch))
        for (agent, memory_id), memory in zip(batch, read_back, strict=True):
            if memory is None or any(memory.get(flag) is True for flag in _SKIPPED):
                continue
            if len(found) == limit:
                return found, True
            found.append(_entry(agent, memory_id, memory))
    return found, False


# ---- the agent's own: publish, unpublish, what it published --------------------


async def _publishing(request: Request, agent_id: str, command: str) -> Response:
    deps = deps_of(request)
    body = await json_object(request)
    unknown_fields(body, frozenset({"memory_id", "clade"}))
    try:
        fields = Fields(body, deps.settings.input_limits)
        memory_id = fields.identifier("memory_id", required=True)
        clade = fields.identifier("clade") or None
    except InvalidEvent as bad:
        raise ApiError(400, bad.reason, bad.detail, field=bad.field) from None
    if clade is not None and not valid_clade_name(clade):
        raise ApiError(400, INVALID_VALUE, CLADE_NAME_RULE, field="clade")
    # A withdrawal needs no memory: what was published may be gone since.
    if command == "publish" and not await memory_exists(
        deps.redis, deps.prefix, agent_id, memory_id
    ):
        raise ApiError(404, "not_found", f"agent {agent_id!r} has no memory {memory_id!r}")
    event_id = await send_command(request, agent_id, command, memory_id=memory_id, clade=clade)
    return json_response(
        {
            "accepted": True,
            "command": command,
            "event_id": event_id,
            "memory_id": memory_id,
            "clade": clade,
        },
        202,
    )


@agent_endpoint
async def publish(request: Request, agent_id: str) -> Response:
    return await _publishing(request, agent_id, "publish")


@agent_endpoint
async def unpublish(request: Request, agent_id: str) -> Response:
    return await _publishing(request, agent_id, "unpublish")


@agent_endpoint
async def published(request: Request, agent_id: str) -> Response:
    found = await deps_of(request).published.published(agent_id)
    return json_response(
        {"agent_id": agent_id, "published": [published_json(p) for p in found.values()]}
    )


# ---- the deployment's: membership (admin), a clade's entries --------------------


async def _admin(request: Request, what: str) -> None:
    """An admin key, or 401 / 403 (counted)."""
    deps = deps_of(request)
    decision = await deps.authenticator.check(bearer_token(request), _DEPLOYMENT)
    if decision.ok:
        return
    await refused(request, decision)
    if decision.outcome is AuthOutcome.FORBIDDEN:
        raise ApiError(
            403,
            "forbidden",
            f"{what} needs an admin key: clade membership is the deployment's, not a tenant's",
        )
    raise ApiError(401, "unauthenticated", decision.detail, headers=CHALLENGE)


def _clade(request: Request) -> str:
    clade = str(request.path_params["clade"])
    if not valid_clade_name(clade):
        raise ApiError(400, INVALID_VALUE, CLADE_NAME_RULE, field="clade")
    return clade


async def _membership(request: Request) -> tuple[str, str]:
    agent_id = str(request.path_params["agent"])
    if not is_agent_id(agent_id, deps_of(request).settings.input_limits):
        raise ApiError(
            400, INVALID_VALUE, f"an agent id is 1-128 of {AGENT_ID_ALPHABET}", field="agent"
        )
    await _admin(request, f"changing the clades of agent {agent_id!r}")
    return _clade(request), agent_id


@endpoint
async def join(request: Request) -> Response:
    clade, agent_id = await _membership(request)
    added = await deps_of(request).clades.join(clade, agent_id)
    return json_response({"clade": clade, "agent_id": agent_id, "member": True, "changed": added})


@endpoint
async def leave(request: Request) -> Response:
    clade, agent_id = await _membership(request)
    removed = await deps_of(request).clades.leave(clade, agent_id)
    return json_response(
        {"clade": clade, "agent_id": agent_id, "member": False, "changed": removed}
    )


@endpoint
async def list_clades(request: Request) -> Response:
    await _admin(request, "listing the clades")
    return json_response({"clades": await deps_of(request).clades.names()})


@endpoint
async def clade_members(request: Request) -> Response:
    await _admin(request, "a clade's members")
    clade = _clade(request)
    return json_response({"clade": clade, "members": await deps_of(request).clades.members(clade)})


@endpoint
async def clade_entries(request: Request) -> Response:
    """For an admin key, or one that reaches at least one member of the clade."""
    deps = deps_of(request)
    identity = await deps.authenticator.identify(bearer_token(request))
    if identity.refused is not None:
        await refused(request, identity.refused)
        raise ApiError(401, "unauthenticated", identity.refused.detail, headers=CHALLENGE)
    clade = _clade(request)
    limit = int_param(request, "limit", DEFAULT_ENTRIES, 1, MAX_ENTRIES)
    members = await deps.clades.members(clade)
    if not identity.admin and not any(identity.scope.allows(member) for member in members):
        decision = AuthDecision(
            AuthOutcome.FORBIDDEN,
            identity.key_id,
            f"API key reaches no member of clade {clade!r}",
        )
        await refused(request, decision)
        raise ApiError(403, "forbidden", decision.detail)
    read = functools.partial(memory_detail, deps.redis, deps.prefix)
    entries, truncated = await shared_entries(deps.published, read, members, clade, limit=limit)
    return json_response({"clade": clade, "entries": entries, "truncated": truncated})


def routes() -> list[Route]:
    return [
        Route("/v1/agents/{agent:path}/publish", publish, methods=["POST"]),
        Route("/v1/agents/{agent:path}/unpublish", unpublish, methods=["POST"]),
        Route("/v1/agents/{agent:path}/published", published, methods=["GET"]),
        Route("/v1/clades", list_clades, methods=["GET"]),
        Route("/v1/clades/{clade}", clade_members, methods=["GET"]),
        Route("/v1/clades/{clade}/entries", clade_entries, methods=["GET"]),
        Route("/v1/clades/{clade}/members/{agent:path}", join, methods=["PUT"]),
        Route("/v1/clades/{clade}/members/{agent:path}", leave, methods=["DELETE"]),
    ]
