"""``MemoryCandidate`` / ``MemoryRecord`` builders with the defaults most tests want.

A candidate's id is the real one, ``memory_id(agent, event, 0, ts)``, unless given; its
provenance is the source event as an episode and its hash the real ``normalized_hash`` of
its text. Every other ``MemoryCandidate`` field passes through as a keyword.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grimoire.streams.model.ids import memory_id
from grimoire.streams.model.records import (
    EventType,
    Kind,
    Layer,
    MemoryCandidate,
    MemoryRecord,
    Provenance,
)
from grimoire.streams.model.text import normalized_hash

from .vectors import Vector


def memory_candidate(
    agent: str,
    event: str,
    text: str,
    *,
    ts: int,
    kind: Kind = Kind.EPISODE,
    layer: Layer = Layer.OBSERVATION,
    provenance: Provenance | None = None,
    session_id: str = "",
    tool: str = "",
    **fields: Any,
) -> MemoryCandidate:
    """The candidate of part 0 of episode ``event`` (of ``session_id``, from ``tool``,
    unless ``provenance`` says otherwise); ``fields`` are further candidate fields (``id``
    and ``normalized_hash`` included, to override the computed ones)."""
    fields.setdefault("id", memory_id(agent, event, 0, ts))
    fields.setdefault("normalized_hash", normalized_hash(text))
    return MemoryCandidate(
        agent_id=agent,
        kind=kind,
        layer=layer,
        text=text,
        ts_ms=ts,
        provenance=provenance
        or Provenance(event, EventType.EPISODE.value, session_id=session_id, tool=tool),
        **fields,
    )


def memory_record(
    candidate: MemoryCandidate,
    canonical: Vector | bytes,
    *,
    eidolon: Vector | bytes | None = None,
    **fields: Any,
) -> MemoryRecord:
    """``candidate`` with its vectors as float32 bytes; the eidolon lane is the canonical
    vector unless given (``b""`` for none). ``fields`` are further record fields."""
    canonical_bytes = _as_bytes(canonical)
    eidolon_bytes = canonical_bytes if eidolon is None else _as_bytes(eidolon)
    return MemoryRecord(candidate, canonical=canonical_bytes, eidolon=eidolon_bytes, **fields)


def _as_bytes(vector: Vector | bytes) -> bytes:
    if isinstance(vector, bytes):
        return vector
    return np.asarray(vector, dtype=np.float32).tobytes()
