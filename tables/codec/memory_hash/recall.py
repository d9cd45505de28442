"""Recall's record view and the walk's node view of a memory hash, decoded by position
from one HMGET row or search document."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np

from grimoire.streams.recall.ports import RecallRecord
from grimoire.streams.recall.walk.daimoi import NodeInfo
from grimoire.tables.codec.field_state import affect_from_json
from grimoire.tables.codec.hash_values import stored_list, stored_number, stored_text, text_of
from grimoire.tables.codec.walk_node import WALK_NODE_FIELDS, walk_node

__all__ = [
    "NODE_FIELDS",
    "RECORD_FIELDS",
    "decode_node",
    "decode_record",
    "decode_row",
    "with_usage",
]

# Read in this order; `decode_row` unpacks by position. The vector comes last.
# ---- recall's view (RecallRecord) --------------------------------------------


RECORD_FIELDS: Final = (
    "memory_id",
    "agent_id",
    "kind",
    "layer",
    "text",
    "gist",
    "ts",
    "confidence",
    "quality",
    "importance",
    "strength",
    "last_accessed",
    "decay_class",
    "provenance",
    "regime",
    "affect",
    "normalized_hash",
    "deleted",
    "quarantined",
    "archived",
    "replaced_by_summary_id",
    "session_id",
    "run_id",
    "actor_id",
    "event_type",
    "source_event_id",
    "hyperedge_ids",
    "nexus_keys",
    "validated_count",
    "contradicted_count",
    "causal_uplift",
    "latency_ms",
    "canonical",
)


def with_usage(doc: Mapping[str, Any], usage: Mapping[str, Any]) -> dict[str, Any]:
    """A record with its usage counters, which live in a hash of their own.

    The record's own `last_accessed` is its creation time; the usage hash only
    ever moves it forward."""
    merged = dict(doc)
    used = stored_number(usage.get("last_accessed"), -1.0)
    if used > stored_number(doc.get("last_accessed"), -1.0):
        merged["last_accessed"] = usage["last_accessed"]
    for name in ("included_count_total", "included_count_decay"):
        if usage.get(name) is not None:
            merged[name] = usage[name]
    return merged


def decode_record(doc: Mapping[str, Any], agent_id: str, dims: int) -> RecallRecord | None:
    """A stored hash as recall reads it; another agent's record reads as missing."""
    return decode_row([doc.get(name) for name in RECORD_FIELDS], None, agent_id, dims)


def decode_row(
    row: Sequence[Any], usage_last_accessed: Any, agent_id: str, dims: int
) -> RecallRecord | None:
    """`RECORD_FIELDS` values (None when unset) and the usage hash's
    `last_accessed`, as one record; another agent's record reads as missing."""
    *raw, blob = row
    if raw[0] is None or raw[1] is None:
        return None
    (
        memory_id, agent, kind, layer, text, gist, ts, confidence, quality, importance,
        strength, last_accessed, decay_class, provenance, regime, affect, normalized_hash,
        deleted, quarantined, archived, replaced_by, session_id, run_id, actor_id,
        event_type, source_event_id, hyperedge_ids, nexus_keys, validated, contradicted,
        uplift, latency,
    ) = [stored_text(value) for value in raw]  # fmt: skip
    if agent != agent_id:
        return None
    vector = None
    if isinstance(blob, bytes) and len(blob) == dims * 4:
        vector = np.frombuffer(blob, dtype=np.float32)
    accessed = max(stored_number(last_accessed, -1.0), stored_number(usage_last_accessed, -1.0))
    return RecallRecord(
        memory_id=memory_id,
        kind=kind,
        layer=layer,
        text=text,
        gist=gist,
        ts_ms=int(stored_number(ts, 0.0)),
        confidence=stored_number(confidence, 0.5),
        quality=stored_number(quality, 0.5),
        importance=stored_number(importance, 0.5),
        strength=stored_number(strength, 1.0),
        last_accessed_ms=int(accessed) if accessed >= 0 else None,
        decay_class=decay_class,
        provenance=provenance or "self",
        regime=regime,
        affect=affect_from_json(affect) if affect else None,
        normalized_hash=normalized_hash,
        deleted=deleted == "1",
        quarantined=quarantined == "1",
        archived=archived == "1",
        replaced_by=replaced_by,
        session_id=session_id,
        run_id=run_id,
        actor_id=actor_id,
        event_type=event_type,
        source_event_id=source_event_id,
        hyperedge_ids=stored_list(hyperedge_ids),
        nexus_keys=stored_list(nexus_keys),
        validated_count=int(stored_number(validated, 0.0)),
        contradicted_count=int(stored_number(contradicted, 0.0)),
        causal_uplift=stored_number(uplift, 0.0),
        latency_ms=stored_number(latency, 0.0) if latency else None,
        vector=vector,
    )


# What the walk reads of a memory hash (a store written before the node table).
# ---- the walk's node view (a store written before the node table) ------------


NODE_FIELDS: Final = ("memory_id", "agent_id", *WALK_NODE_FIELDS)


def decode_node(row: Sequence[Any], agent_id: str) -> NodeInfo | None:
    """NODE_FIELDS values read from a memory hash (a store written before the
    node table existed) as the walk's node; another agent's memory reads as None."""
    memory_id, agent, *fields = row
    if memory_id is None or agent is None or text_of(agent) != agent_id:
        return None
    return walk_node(text_of(memory_id), [stored_text(value) for value in fields])
