"""Inbound payloads through the worker's normalizer (streams/inbound/events.py)."""

from __future__ import annotations

from grimoire.streams.inbound.events import Accepted, normalize_event
from grimoire.streams.inbound.validators import InputLimits
from grimoire.streams.model.records import EventType


def accept(event_type: EventType, raw: bytes, limits: InputLimits | None = None) -> Accepted:
    """What the normalizer makes of ``raw`` under ``limits`` (the defaults unless given),
    which must be accepted: a rejection fails the test with its reason."""
    outcome = normalize_event(event_type, raw, InputLimits() if limits is None else limits)
    assert isinstance(outcome, Accepted), outcome
    return outcome
