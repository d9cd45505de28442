"""TODO"""

from __future__ import annotations

from typing import Any


def text_of(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def stored_text(value: Any) -> str:
    """A hash field as text; an unset field reads as ""."""
    return "" if value is None else text_of(value)


def stored_number(value: Any, default: float) -> float:
    """A hash field as a number; unset or unreadable reads as `default`."""
    if value is None:
        return default
    try:
        return float(text_of(value))
    except ValueError:
        return default


def stored_list(value: Any) -> tuple[str, ...]:
    """A `|`-joined hash field; empty parts are dropped."""
    return tuple(filter(None, stored_text(value).split("|")))
