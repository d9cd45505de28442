"""An agent's state vector as stored: a hash of the digest text it embeds and the
float32 vector (`Keyspace.state_vector`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from grimoire.streams.write.changes import StateVector
from grimoire.tables.codec.hash_values import text_of

__all__ = ["DIGEST_FIELD", "VECTOR_FIELD", "state_vector_fields", "state_vector_from_hash"]

DIGEST_FIELD: Final = "digest"
VECTOR_FIELD: Final = "vector"


def state_vector_fields(state: StateVector) -> dict[str, str | bytes]:
    return {DIGEST_FIELD: state.digest, VECTOR_FIELD: state.vector}


def state_vector_from_hash(agent_id: str, raw: Mapping[Any, Any] | None) -> StateVector | None:
    """None for a missing or partial hash (a reader then embeds the digest itself)."""
    if not raw:
        return None
    fields = {text_of(name): value for name, value in raw.items()}
    digest, vector = fields.get(DIGEST_FIELD), fields.get(VECTOR_FIELD)
    if digest is None or not isinstance(vector, bytes | bytearray) or not vector:
        return None
    return StateVector(agent_id, text_of(digest), bytes(vector))
