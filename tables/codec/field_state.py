"""An agent's field state as stored (one JSON value per agent in `Keyspace.field_states`),
and the affect it holds, which memory hashes store in the same shape."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import orjson

from grimoire.streams.model.field_state import Affect, FieldState

__all__ = ["affect_from_json", "affect_to_json", "field_from_json", "field_to_json"]


def field_to_json(state: FieldState) -> bytes:
    return orjson.dumps(asdict(state))


def field_from_json(agent_id: str, raw: bytes | str | None) -> FieldState:
    if not raw:
        return FieldState(agent_id=agent_id)
    data = orjson.loads(raw)
    return FieldState(
        agent_id=agent_id,
        watermark_ms=int(data.get("watermark_ms", 0)),
        tick=data.get("tick"),
        block=data.get("block"),
        regime=data.get("regime", ""),
        affect=_affect(data.get("affect") or {}),
        focus=tuple((str(k), float(w)) for k, w in data.get("focus", ())),
    )


def affect_to_json(affect: Affect) -> bytes:
    return orjson.dumps(asdict(affect))


def affect_from_json(raw: str | bytes) -> Affect | None:
    """A memory's stored affect; None when it does not parse (never fails a read)."""
    try:
        data = orjson.loads(raw)
        return _affect(data)
    except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError):
        return None


def _affect(data: Mapping[str, Any]) -> Affect:
    return Affect(
        pleasure=float(data.get("pleasure", 0.0)),
        arousal=float(data.get("arousal", 0.0)),
        dominance=float(data.get("dominance", 0.0)),
        drives=tuple((str(n), float(v)) for n, v in data.get("drives", ())),
    )
