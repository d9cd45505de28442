"""Names of clades and of the copies a clade's members hold, and the message that
carries a share, its withdrawal or credit (`grimoire.clade/1`), decoded.

A copy of an origin's memory at a sibling has an id derived from (sibling, origin,
origin's memory id), so every share of the same memory writes the same copy, and
a source event id, `clade:<origin>/<memory id>`, that says where it came from and
that a withdrawal retracts (the retraction cascade then takes what the sibling
derived from the copy too).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.inbound.events import UNSUPPORTED_SCHEMA, Rejection, decode_object
from grimoire.streams.inbound.validators import (
    INVALID_VALUE,
    MISSING_FIELD,
    WRONG_TYPE,
    Fields,
    InputLimits,
    plausible_agent_id,
)
from grimoire.streams.model.ids import memory_id

__all__ = [
    "CLADE_NAME",
    "CLADE_PROVENANCE",
    "CLADE_SCHEMA",
    "COPY_SOURCE_PREFIX",
    "ROUTE_FIELD",
    "CladeMessage",
    "CladeOp",
    "CladeRoute",
    "SharedEntry",
    "copy_id",
    "copy_source",
    "origin_of",
    "parse_clade_message",
    "parse_route",
    "route_to_wire",
    "valid_clade_name",
    "without_route",
]

CLADE_SCHEMA: Final = "grimoire.clade/1"
CLADE_PROVENANCE: Final = "clade"
COPY_SOURCE_PREFIX: Final = "clade:"
# A clade's name: letters, digits and `._-@+=`, starting with a letter or digit.
CLADE_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-@+=]{0,127}")


def valid_clade_name(name: str) -> bool:
    return CLADE_NAME.fullmatch(name) is not None


# Where a publish (or an auto-shared run's evidence) goes: per clade, its members
# but the publisher, as the sequencer found them in the registry and journaled them
# with the entry (`clade_route`), so the fold, and its replay, never read the
# registry. A producer's own `clade_route` is replaced (or dropped) there.
CladeRoute = tuple[tuple[str, tuple[str, ...]], ...]
ROUTE_FIELD: Final = "clade_route"


def parse_route(raw: Any, limits: InputLimits) -> CladeRoute:
    """A journaled route ({clade: [agent ids]}); () when there is none."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise InvalidEvent(WRONG_TYPE, f"'{ROUTE_FIELD}' must be an object", ROUTE_FIELD)
    route: list[tuple[str, tuple[str, ...]]] = []
    for clade, agents in sorted(raw.items()):
        if not isinstance(clade, str) or not valid_clade_name(clade):
            raise InvalidEvent(INVALID_VALUE, f"{clade!r} is not a clade name", ROUTE_FIELD)
        if not isinstance(agents, list) or not all(isinstance(a, str) for a in agents):
            raise InvalidEvent(WRONG_TYPE, "a route lists agent ids", ROUTE_FIELD)
        if any(plausible_agent_id({"agent_id": a}, limits) is None for a in agents):
            raise InvalidEvent(INVALID_VALUE, "a route lists agent ids", ROUTE_FIELD)
        route.append((clade, tuple(sorted(set(agents)))))
    return tuple(route)


def route_to_wire(route: CladeRoute) -> dict[str, list[str]]:
    return {clade: list(agents) for clade, agents in route}


def without_route(data: Mapping[str, Any]) -> dict[str, Any]:
    """The payload as its producer sent it (content ids are hashed over this)."""
    return {k: v for k, v in data.items() if k != ROUTE_FIELD}


def copy_source(origin_agent_id: str, origin_memory_id: str) -> str:
    return f"{COPY_SOURCE_PREFIX}{origin_agent_id}/{origin_memory_id}"


def origin_of(source_event_id: str) -> tuple[str, str] | None:
    """(origin agent, origin memory id) of a copy's source event id; None for any other."""
    if not source_event_id.startswith(COPY_SOURCE_PREFIX):
        return None
    agent, _, memory = source_event_id[len(COPY_SOURCE_PREFIX) :].rpartition("/")
    return (agent, memory) if agent and memory else None


def copy_id(recipient: str, origin_agent_id: str, origin_memory_id: str) -> str:
    """The copy's id at the recipient: the same for every share of the same memory."""
    return memory_id(recipient, copy_source(origin_agent_id, origin_memory_id), 0, 0)


class CladeOp(StrEnum):
    SHARE = "share"
    WITHDRAW = "withdraw"
    CREDIT = "credit"


@dataclass(frozen=True, slots=True)
class SharedEntry:
    """What a share carries of the origin's memory (as it was when shared)."""

    kind: str
    text: str
    confidence: float
    validated: int
    contradicted: int
    keys: tuple[str, ...]
    event_type: str
    situation_edge: str  # an evidence entry's situation ("" for any other memory)
    ts_ms: int

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "text": self.text,
            "confidence": self.confidence,
            "validated": self.validated,
            "contradicted": self.contradicted,
            "keys": list(self.keys),
            "event_type": self.event_type,
            "situation_edge": self.situation_edge,
            "ts": self.ts_ms,
        }


@dataclass(frozen=True, slots=True)
class CladeMessage:
    recipient: str
    op: CladeOp
    origin_agent_id: str
    origin_memory_id: str
    clade: str
    ts_ms: int
    event_id: str
    entry: SharedEntry | None = None
    success: bool | None = None

    @property
    def copy_id(self) -> str:
        return copy_id(self.recipient, self.origin_agent_id, self.origin_memory_id)

    @property
    def copy_source(self) -> str:
        return copy_source(self.origin_agent_id, self.origin_memory_id)


def _entry(raw: Any, limits: InputLimits) -> SharedEntry:
    if not isinstance(raw, Mapping):
        raise InvalidEvent(MISSING_FIELD, "'share' needs 'entry'", "entry")
    fields = Fields(dict(raw), limits)
    keys = fields.string_list("keys")
    confidence = fields.unit_float("confidence", 0.5)
    counts = [fields.integer(name) or 0 for name in ("validated", "contradicted")]
    return SharedEntry(
        kind=fields.identifier("kind", required=True),
        text=fields.text("text", required=True),
        confidence=confidence,
        validated=counts[0],
        contradicted=counts[1],
        keys=tuple(sorted(set(keys))),
        event_type=fields.identifier("event_type"),
        situation_edge=fields.identifier("situation_edge"),
        ts_ms=fields.timestamp_ms("ts"),
    )


def _event_time(data: Fields) -> int:
    """The cause's event time (a command sent without one carries 0): any
    non-negative integer, unlike a producer's `ts`, since the workers wrote it."""
    value = data.data.get("ts")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidEvent(WRONG_TYPE, "'ts' must be a non-negative integer", "ts")
    return value


def parse_clade_message(raw: bytes, limits: InputLimits) -> CladeMessage | Rejection:
    agent_id: str | None = None
    try:
        data = Fields(decode_object(raw), limits)
        agent_id = plausible_agent_id(data.data, limits)
        schema = data.text("schema")
        if schema and schema != CLADE_SCHEMA:
            raise InvalidEvent(UNSUPPORTED_SCHEMA, f"expected {CLADE_SCHEMA}", "schema")
        try:
            op = CladeOp(data.identifier("op", required=True))
        except ValueError:
            detail = "'op' must be share, withdraw or credit"
            raise InvalidEvent(INVALID_VALUE, detail, "op") from None
        clade = data.identifier("clade", required=True)
        if not valid_clade_name(clade):
            raise InvalidEvent(INVALID_VALUE, "'clade' is not a clade name", "clade")
        success = data.data.get("success")
        if op is CladeOp.CREDIT and not isinstance(success, bool):
            raise InvalidEvent(WRONG_TYPE, "'credit' needs 'success' true or false", "success")
        return CladeMessage(
            recipient=data.agent_id(),
            op=op,
            origin_agent_id=data.agent_id("origin_agent_id"),
            origin_memory_id=data.identifier("origin_memory_id", required=True),
            clade=clade,
            ts_ms=_event_time(data),
            event_id=data.identifier("event_id", required=True),
            entry=_entry(data.data.get("entry"), limits) if op is CladeOp.SHARE else None,
            success=success if isinstance(success, bool) else None,
        )
    except InvalidEvent as exc:
        return Rejection(exc.reason, exc.detail, exc.field, agent_id)
