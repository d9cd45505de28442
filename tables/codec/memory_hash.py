"""Memory records ↔ Redis hash fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grimoire.streams.model.records import MemoryRecord
from grimoire.streams.model.text import gist
from grimoire.tables.codec.field_state import affect_to_json

RETURN_FIELDS = (
    "memory_id",
    "agent_id",
    "kind",
    "layer",
    "text",
    "ts",
    "source_event_id",
    "normalized_hash",
)


@dataclass(frozen=True, slots=True)
class StoredMemory:
    id: str
    agent_id: str
    kind: str
    layer: str
    text: str
    ts_ms: int
    source_event_id: str
    normalized_hash: str = ""


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


def stored_memory(doc: dict[str, Any]) -> StoredMemory:
    return StoredMemory(
        id=text_of(doc["memory_id"]),
        agent_id=text_of(doc["agent_id"]),
        kind=text_of(doc["kind"]),
        layer=text_of(doc["layer"]),
        text=text_of(doc.get("text", "")),
        ts_ms=int(float(text_of(doc["ts"]))),
        source_event_id=text_of(doc.get("source_event_id", "")),
        normalized_hash=text_of(doc.get("normalized_hash", "")),
    )


def hash_fields(record: MemoryRecord, recorded_at_ms: int) -> dict[str, Any]:
    """The full SPEC §3 record as a flat hash (absent optionals are omitted)."""
    cand = record.candidate
    prov = cand.provenance
    fields: dict[str, Any] = {
        "memory_id": cand.id,
        "agent_id": cand.agent_id,
        "kind": cand.kind.value,
        "layer": cand.layer.value,
        "text": cand.text,
        "gist": gist(cand.text),
        "ts": cand.ts_ms,
        "valid_from": cand.ts_ms,
        "last_accessed": cand.ts_ms,
        "importance": cand.importance,
        "confidence": record.confidence,
        "quality": record.quality,
        "strength": 1.0,
        "normalized_hash": cand.normalized_hash,
        "tags": "|".join(cand.tags),
        "nexus_keys": "|".join(cand.keys),
        "hyperedge_ids": cand.hyperedge.edge_id if cand.hyperedge else "",
        "hyperedge_role": cand.hyperedge.role.value if cand.hyperedge else "",
        "regime": cand.regime,
        "episode_type": cand.episode_type,
        "outcome": cand.outcome,
        "source_event_id": prov.source_event_id,
        "event_type": prov.event_type,
        "session_id": prov.session_id,
        "run_id": prov.run_id,
        "actor_id": prov.actor_id,
        "tool": prov.tool,
        "provenance": prov.provenance,
        "included_count_total": 0,
        "included_count_decay": 0,
        "validated_count": 0,
        "contradicted_count": 0,
        "reinforced_count": 0,
        "deleted": "0",
        "archived": "0",
        "quarantined": "1" if record.quarantined else "0",
        "off_topic": "1" if record.off_topic else "0",
        "admission": record.admission,
        # Transaction time: informational only, never an input to a decision.
        "recorded_at": recorded_at_ms,
        "canonical": record.canonical,
    }
    if record.aggregate_of:
        fields["aggregate_of"] = record.aggregate_of
    if record.eidolon:
        fields["eidolon"] = record.eidolon
    if cand.affect is not None:
        fields["affect"] = affect_to_json(cand.affect)
    for name, value in (("tick", cand.tick), ("block", cand.block)):
        if value is not None:
            fields[name] = value
    return fields
