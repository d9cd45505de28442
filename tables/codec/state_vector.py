"""An agent's state vector as stored: a hash of the key of the state it is the
vector of (`grimoire.streams.model.eidolon.state_key`) and the float32 vector
(`Keyspace.state_vector`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from grimoire.streams.write.changes import StateVector
from grimoire.tables.codec.hash_values import text_of

__all__ = ["KEY_FIELD", "VECTOR_FIELD", "state_vector_fields", "state_vector_from_hash"]

KEY_FIELD: Final = "key"
VECTOR_FIELD: Final = "vector"


def state_vector_fields(state: StateVector) -> dict[str, str | bytes]:
    return {KEY_FIELD: state.key, VECTOR_FIELD: state.vector}


def state_vector_from_hash(agent_id: str, raw: Mapping[Any, Any] | None) -> StateVector | None:
    """None for a missing or partial hash, or one written before states were keyed by
    their parts (a reader then composes the state's vector itself)."""
    if not raw:
        return None
    fields = {text_of(name): value for name, value in raw.items()}
    key, vector = fields.get(KEY_FIELD), fields.get(VECTOR_FIELD)
    if key is None or not isinstance(vector, bytes | bytearray) or not vector:
        return None
    return StateVector(agent_id, text_of(key), bytes(vector))
