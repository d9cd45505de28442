"""Decoding an operator's command (retract, forget, pin, unpin, configure, import,
publish, unpublish): a
malformed one is dead-lettered, never applied.

Commands are journaled like any input, so what they change replays in place. Who
may send one is a question for tenant keys (a later concern); the command names
its agent, so it only ever acts on that agent's memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

import orjson

from grimoire.streams.clade.copies import (
    ROUTE_FIELD,
    CladeRoute,
    parse_route,
    valid_clade_name,
    without_route,
)
from grimoire.streams.config.agent_config import AgentConfig, apply_update
from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.exchange.chunks import ImportChunk, chunk_from_wire
from grimoire.streams.exchange.format import ExchangeError
from grimoire.streams.inbound.events import UNSUPPORTED_SCHEMA, Rejection, decode_object
from grimoire.streams.inbound.validators import (
    INVALID_VALUE,
    MISSING_FIELD,
    Fields,
    InputLimits,
    plausible_agent_id,
)
from grimoire.streams.model.ids import content_event_id

__all__ = ["COMMAND_SCHEMA", "Command", "CommandKind", "parse_command"]

COMMAND_SCHEMA: Final = "grimoire.command/1"


class CommandKind(StrEnum):
    RETRACT = "retract"  # a source event and everything derived from it
    FORGET = "forget"  # the whole agent, and its journal's readability
    PIN = "pin"  # a memory: exempt from compaction and archiving
    UNPIN = "unpin"
    CONFIGURE = "configure"  # the agent's runtime configuration: a partial update
    IMPORT = "import"  # one chunk of an export, written verbatim (streams/exchange)
    PUBLISH = "publish"  # a memory: a copy to every sibling of the agent's clades
    UNPUBLISH = "unpublish"  # a published memory: its copies withdrawn


_TARGET: Final = {
    CommandKind.RETRACT: "source_event_id",
    CommandKind.PIN: "memory_id",
    CommandKind.UNPIN: "memory_id",
    CommandKind.PUBLISH: "memory_id",
    CommandKind.UNPUBLISH: "memory_id",
}


@dataclass(frozen=True, slots=True)
class Command:
    command_id: str  # the event id, or a hash of the payload
    agent_id: str
    kind: CommandKind
    target: str = ""  # source event id (retract) or memory id (pin, unpin)
    ts_ms: int | None = None
    config: Mapping[str, Any] | None = None  # configure: the settings it changes
    chunk: ImportChunk | None = None  # import: the lines it writes
    clade: str = ""  # publish, unpublish: to (from) this clade; "": every clade of the agent
    route: CladeRoute = ()  # publish: where it goes, as the sequencer journaled it


def parse_command(raw: bytes, limits: InputLimits) -> Command | Rejection:
    agent_id: str | None = None
    try:
        data = Fields(decode_object(raw), limits)
        agent_id = plausible_agent_id(data.data, limits)
        schema = data.text("schema")
        if schema and schema != COMMAND_SCHEMA:
            raise InvalidEvent(UNSUPPORTED_SCHEMA, f"expected {COMMAND_SCHEMA}", "schema")
        name = data.identifier("command", required=True)
        try:
            kind = CommandKind(name)
        except ValueError:
            known = ", ".join(k.value for k in CommandKind)
            raise InvalidEvent(
                INVALID_VALUE, f"'command' must be one of {known}", "command"
            ) from None
        target = ""
        field = _TARGET.get(kind)
        if field is not None:
            target = data.identifier(field)
            if not target:
                raise InvalidEvent(MISSING_FIELD, f"'{kind.value}' needs '{field}'", field)
        config: Mapping[str, Any] | None = None
        if kind is CommandKind.CONFIGURE:
            config = data.data.get("config")
            if config is None:
                raise InvalidEvent(MISSING_FIELD, "'configure' needs 'config'", "config")
            apply_update(AgentConfig(), config)  # refused here, never at its place
        chunk: ImportChunk | None = None
        if kind is CommandKind.IMPORT:
            chunk = _import_chunk(data.data.get("import_chunk"), data.agent_id())
        clade = ""
        route: CladeRoute = ()
        if kind is CommandKind.PUBLISH:
            route = parse_route(data.data.get(ROUTE_FIELD), limits)
        if kind in (CommandKind.PUBLISH, CommandKind.UNPUBLISH):
            clade = data.identifier("clade")
            if clade and not valid_clade_name(clade):
                raise InvalidEvent(INVALID_VALUE, "'clade' is not a clade name", "clade")
        ts_ms = data.timestamp_ms("ts") if data.data.get("ts") is not None else None
        event_id = data.identifier("event_id")
        return Command(
            command_id=event_id
            or content_event_id(
                orjson.dumps(without_route(data.data), option=orjson.OPT_SORT_KEYS)
            ),
            agent_id=data.agent_id(),
            kind=kind,
            target=target,
            ts_ms=ts_ms,
            config=config,
            chunk=chunk,
            clade=clade,
            route=route,
        )
    except InvalidEvent as exc:
        return Rejection(exc.reason, exc.detail, exc.field, agent_id)


def _import_chunk(raw: Any, agent_id: str) -> ImportChunk:
    if raw is None:
        raise InvalidEvent(MISSING_FIELD, "'import' needs 'import_chunk'", "import_chunk")
    try:
        chunk = chunk_from_wire(raw)
    except ExchangeError as exc:
        raise InvalidEvent(INVALID_VALUE, f"import_chunk: {exc}", "import_chunk") from None
    if chunk.agent_id != agent_id:
        raise InvalidEvent(INVALID_VALUE, "the chunk names another agent", "import_chunk")
    return chunk
