"""Typed accessors over a decoded JSON object that fail with machine-readable reasons."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.model.field_state import Affect
from grimoire.streams.model.text import has_control_characters, normalize_text

MISSING_FIELD = "missing_field"
WRONG_TYPE = "wrong_type"
INVALID_VALUE = "invalid_value"
OVERSIZE = "oversize"
CONTROL_CHARACTERS = "control_characters"
TIMESTAMP_OUT_OF_RANGE = "timestamp_out_of_range"
# A recall request or command whose tenant key is missing, wrong, revoked or does
# not reach its agent (grimoire.streams.trust.tenancy).
UNAUTHORIZED = "unauthorized"

_PAD = frozenset({"pleasure", "arousal", "dominance"})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS_2000 = 946_684_800_000
_MS_2100 = 4_102_444_800_000

# An agent id is a tenant boundary, matched exactly everywhere: in the RediSearch
# TAG (case-sensitive, separator `|`), in Redis keys (`{prefix}:nexus:{agent}:{key}`
# and `{prefix}:curator:{agent}:entries` are told apart by `:`), in Kafka keys and
# in SCAN patterns. So the alphabet is ASCII letters, digits and `. _ - @ + = /`:
# no `:` (key structure), no `,` `|` (tag separators), no `{` `}` (tag syntax and
# Redis Cluster hash tags), no `*` `?` `[` `]` (glob), no whitespace or control
# characters, and nothing non-ASCII (case folding and NFKC would make two ids that
# differ in bytes look alike to a reader; `TENV1` and `tenV1` are two agents).
AGENT_ID_ALPHABET = "ASCII letters, digits and . _ - @ + = /"
_AGENT_ID = re.compile(r"[A-Za-z0-9._@+=/-]+")


@dataclass(frozen=True, slots=True)
class InputLimits:
    """Bounds on what an input event may carry.

    The timestamp window is absolute rather than relative to the wall clock, so
    replaying an old log accepts exactly what the first run accepted.
    """

    max_text_chars: int = 16_000  # counted after NFKC normalisation, as stored
    max_id_chars: int = 128
    max_list_items: int = 64
    # Memories one event may become (a transcript line's content blocks); an event
    # with more is dead-lettered, never cut short.
    max_parts_per_event: int = 64
    min_ts_ms: int = _MS_2000
    max_ts_ms: int = _MS_2100


def _type_name(value: object) -> str:
    return type(value).__name__


@dataclass(frozen=True, slots=True)
class Fields:
    """One JSON object under validation, with the limits to validate it against."""

    data: Mapping[str, Any]
    limits: InputLimits

    def _get(self, name: str, required: bool) -> Any:
        value = self.data.get(name)
        if value is None and required:
            raise InvalidEvent(MISSING_FIELD, f"field {name!r} is required", name)
        return value

    def text(self, name: str, *, required: bool = False, max_chars: int | None = None) -> str:
        value = self._get(name, required)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise InvalidEvent(
                WRONG_TYPE, f"{name!r} must be a string, got {_type_name(value)}", name
            )
        limit = self.limits.max_text_chars if max_chars is None else max_chars
        if len(value) > limit:
            raise InvalidEvent(OVERSIZE, f"{name!r} has {len(value)} chars, limit {limit}", name)
        check_normalized_length(value, limit, name)
        if has_control_characters(value):
            raise InvalidEvent(CONTROL_CHARACTERS, f"{name!r} contains control characters", name)
        if required and not value.strip():
            raise InvalidEvent(MISSING_FIELD, f"field {name!r} is empty", name)
        return value

    def identifier(self, name: str, *, required: bool = False) -> str:
        value = self.text(name, required=required, max_chars=self.limits.max_id_chars)
        if value and (value != value.strip() or any(ch.isspace() for ch in value)):
            raise InvalidEvent(INVALID_VALUE, f"{name!r} must not contain whitespace", name)
        return value

    def agent_id(self, name: str = "agent_id") -> str:
        """A required agent id in the agent-id alphabet (see AGENT_ID_ALPHABET)."""
        value = self.identifier(name, required=True)
        if not is_agent_id(value, self.limits):
            raise InvalidEvent(INVALID_VALUE, f"{name!r} may hold only {AGENT_ID_ALPHABET}", name)
        return value

    def integer(self, name: str, *, required: bool = False, minimum: int = 0) -> int | None:
        value = self._get(name, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidEvent(
                WRONG_TYPE, f"{name!r} must be an integer, got {_type_name(value)}", name
            )
        if value < minimum:
            raise InvalidEvent(INVALID_VALUE, f"{name!r} must be >= {minimum}", name)
        return value

    def unit_float(self, name: str, default: float) -> float:
        value = self._get(name, False)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidEvent(
                WRONG_TYPE, f"{name!r} must be a number, got {_type_name(value)}", name
            )
        if not 0.0 <= float(value) <= 1.0:
            raise InvalidEvent(INVALID_VALUE, f"{name!r} must be within [0, 1]", name)
        return float(value)

    def number(self, name: str) -> float | None:
        value = self._get(name, False)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidEvent(
                WRONG_TYPE, f"{name!r} must be a number, got {_type_name(value)}", name
            )
        return float(value)

    def boolean(self, name: str) -> bool | None:
        """A JSON true/false; 0, 1 and "true" are refused rather than guessed at."""
        value = self._get(name, False)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise InvalidEvent(
                WRONG_TYPE, f"{name!r} must be true or false, got {_type_name(value)}", name
            )
        return value

    def string_list(self, name: str) -> tuple[str, ...]:
        value = self._get(name, False)
        if value is None:
            return ()
        if not isinstance(value, list):
            raise InvalidEvent(
                WRONG_TYPE, f"{name!r} must be a list, got {_type_name(value)}", name
            )
        if len(value) > self.limits.max_list_items:
            raise InvalidEvent(OVERSIZE, f"{name!r} has {len(value)} items", name)
        items: list[str] = []
        for item in value:
            if not isinstance(item, str):
                raise InvalidEvent(WRONG_TYPE, f"{name!r} items must be strings", name)
            if len(item) > self.limits.max_text_chars or has_control_characters(item):
                raise InvalidEvent(INVALID_VALUE, f"{name!r} holds an invalid item", name)
            check_normalized_length(item, self.limits.max_text_chars, name)
            items.append(item)
        return tuple(items)

    def mapping(self, name: str, *, required: bool = False) -> Mapping[str, Any] | None:
        value = self._get(name, required)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise InvalidEvent(
                WRONG_TYPE, f"{name!r} must be an object, got {_type_name(value)}", name
            )
        return value

    def affect(self, name: str = "affect") -> Affect | None:
        """PAD floats in [-1, 1] (`pleasure`, `arousal`, `dominance`) and any other
        entries as named drives in [0, 1], e.g. {"SEEKING": 0.6, "CARE": 0.8}."""
        raw = self.mapping(name)
        if raw is None:
            return None
        pad: dict[str, float] = {}
        drives: list[tuple[str, float]] = []
        for key in sorted(raw):
            value = raw[key]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidEvent(WRONG_TYPE, f"'{name}.{key}' must be a number", name)
            if key in _PAD:
                if not -1.0 <= value <= 1.0:
                    raise InvalidEvent(INVALID_VALUE, f"'{name}.{key}' must be in [-1, 1]", name)
                pad[key] = float(value)
            elif not 0.0 <= value <= 1.0 or len(key) > self.limits.max_id_chars:
                raise InvalidEvent(INVALID_VALUE, f"drive '{name}.{key}' must be in [0, 1]", name)
            else:
                drives.append((key, float(value)))
        return Affect(drives=tuple(drives), **pad)

    def timestamp_ms(self, name: str = "ts") -> int:
        """Event time as epoch milliseconds; accepts int/float ms or ISO-8601 with offset."""
        value = self._get(name, True)
        if isinstance(value, bool):
            raise InvalidEvent(WRONG_TYPE, f"{name!r} must be epoch ms or ISO-8601", name)
        if isinstance(value, int | float):
            ts_ms = int(value)
        elif isinstance(value, str):
            ts_ms = parse_iso_ms(value, name)
        else:
            raise InvalidEvent(WRONG_TYPE, f"{name!r} must be epoch ms or ISO-8601", name)
        if not self.limits.min_ts_ms <= ts_ms <= self.limits.max_ts_ms:
            raise InvalidEvent(TIMESTAMP_OUT_OF_RANGE, f"{name!r}={value!r} is out of range", name)
        return ts_ms


def check_normalized_length(value: str, limit: int, name: str) -> None:
    """Raise `oversize` when the stored (NFKC-normalised) form of `value` is over `limit`.

    NFKC can grow a text up to 18-fold (U+FDFA is 18 characters), so a raw length
    within the limit says nothing about what is stored. ASCII is its own NFKC form.
    """
    if value.isascii():
        return
    size = len(normalize_text(value))
    if size > limit:
        raise InvalidEvent(
            OVERSIZE, f"{name!r} has {size} chars after normalisation, limit {limit}", name
        )


def is_agent_id(value: str, limits: InputLimits) -> bool:
    return 0 < len(value) <= limits.max_id_chars and _AGENT_ID.fullmatch(value) is not None


def plausible_agent_id(data: Mapping[str, Any], limits: InputLimits) -> str | None:
    """The payload's agent id if it is a valid one (to key its dead letter), else None."""
    value = data.get("agent_id")
    if not isinstance(value, str) or not is_agent_id(value, limits):
        return None
    return value


def parse_iso_ms(value: str, name: str = "ts") -> int:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidEvent(INVALID_VALUE, f"{name!r} is not ISO-8601: {exc}", name) from exc
    if parsed.tzinfo is None:
        raise InvalidEvent(INVALID_VALUE, f"{name!r} needs a timezone offset", name)
    # Integer arithmetic on the timedelta: float seconds lose a millisecond after 2038.
    return (parsed - _EPOCH) // timedelta(milliseconds=1)
