"""Inbound payloads: built from a base with fields changed or dropped (``payload``,
``DROP``), and put through the worker's normalizer (streams/inbound/events.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from grimoire.streams.inbound.events import Accepted, normalize_event
from grimoire.streams.inbound.validators import InputLimits
from grimoire.streams.model.records import EventType


def accept(event_type: EventType, raw: bytes, limits: InputLimits | None = None) -> Accepted:
    """What the normalizer makes of ``raw`` under ``limits`` (the defaults unless given),
    which must be accepted: a rejection fails the test with its reason."""
    outcome = normalize_event(event_type, raw, InputLimits() if limits is None else limits)
    assert isinstance(outcome, Accepted), outcome
    return outcome


#: An override value that leaves the field out of the payload altogether.
DROP: Any = object()


def payload(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> bytes:
    """``base`` as JSON with ``overrides`` applied: each a new value, or ``DROP``."""
    data = dict(base)
    for key, value in overrides.items():
        if value is DROP:
            data.pop(key, None)
        else:
            data[key] = value
    return orjson.dumps(data)
