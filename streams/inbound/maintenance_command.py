"""Decoding a maintenance command: a malformed one is dead-lettered, never run."""

from __future__ import annotations

from dataclasses import dataclass

from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.inbound.events import UNSUPPORTED_SCHEMA, Rejection, decode_object
from grimoire.streams.inbound.validators import (
    INVALID_VALUE,
    Fields,
    InputLimits,
    plausible_agent_id,
)
from grimoire.streams.maintenance.schedule import Pressure

MAINTENANCE_COMMAND_SCHEMA = "grimoire.maintenance_command/1"
REASONS = frozenset({"block", "manual"})


@dataclass(frozen=True, slots=True)
class MaintenanceCommand:
    agent_id: str
    reason: str = "block"
    force_compaction: bool = False
    pressure: Pressure = Pressure.NORMAL


def parse_maintenance_command(raw: bytes, limits: InputLimits) -> MaintenanceCommand | Rejection:
    agent_id: str | None = None
    try:
        data = Fields(decode_object(raw), limits)
        agent_id = plausible_agent_id(data.data, limits)
        schema = data.text("schema")
        if schema and schema != MAINTENANCE_COMMAND_SCHEMA:
            raise InvalidEvent(
                UNSUPPORTED_SCHEMA, f"expected {MAINTENANCE_COMMAND_SCHEMA}", "schema"
            )
        reason = data.identifier("reason") or "block"
        if reason not in REASONS:
            raise InvalidEvent(INVALID_VALUE, "'reason' must be block or manual", "reason")
        force = data.data.get("force_compaction")
        if force is not None and not isinstance(force, bool):
            raise InvalidEvent(
                INVALID_VALUE, "'force_compaction' must be a boolean", "force_compaction"
            )
        pressure_text = data.identifier("pressure") or Pressure.NORMAL.value
        try:
            pressure = Pressure(pressure_text)
        except ValueError:
            known = ", ".join(p.value for p in Pressure)
            raise InvalidEvent(
                INVALID_VALUE, f"'pressure' must be one of {known}", "pressure"
            ) from None
        return MaintenanceCommand(
            agent_id=data.agent_id(),
            reason=reason,
            force_compaction=bool(force),
            pressure=pressure,
        )
    except InvalidEvent as exc:
        return Rejection(exc.reason, exc.detail, exc.field, agent_id)
