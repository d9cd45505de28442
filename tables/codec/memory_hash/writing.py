"""Writing a memory hash whole (`hash_fields`, for observed events), the plain stored
view, and the fields of pins and retraction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from grimoire.streams.model.lexicon import LexicalForm, lexical_form
from grimoire.streams.model.records import MemoryRecord
from grimoire.streams.model.text import gist
from grimoire.tables.codec.field_state import affect_to_json
from grimoire.tables.codec.hash_values import stored_text, text_of

__all__ = [
    "RETRACTED_DROPPED",
    "RETURN_FIELDS",
    "StoredMemory",
    "hash_fields",
    "is_pinned",
    "is_retracted",
    "lexical_form_of",
    "pinned_fields",
    "retracted_fields",
    "stored_memory",
]

# ---- writing, and the plain stored view --------------------------------------


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


def lexical_form_of(text: Any, ts: Any) -> LexicalForm:
    """The lexical form of a stored memory's raw `text` and `ts` values (a hash
    read back, an export's line): what `hash_fields` wrote, or would have."""
    return lexical_form(text_of(text or b""), int(float(text_of(ts))) if ts else None)


def hash_fields(record: MemoryRecord, recorded_at_ms: int) -> dict[str, Any]:
    """The full docs/design.md §3 record as a flat hash (absent optionals are omitted)."""
    cand = record.candidate
    prov = cand.provenance
    fields: dict[str, Any] = {
        "memory_id": cand.id,
        "agent_id": cand.agent_id,
        "kind": cand.kind.value,
        "layer": cand.layer.value,
        "text": cand.text,
        "lexical": lexical_form(cand.text, cand.ts_ms).text,
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
    # Written only when set, so a record without them stores (and digests) as
    # it did before they could come from the wire; readers default them.
    if cand.decay_class:
        fields["decay_class"] = cand.decay_class
    if cand.latency_ms is not None:
        fields["latency_ms"] = cand.latency_ms
    if cand.pinned:
        fields.update(pinned_fields(True))
    if record.eidolon:
        fields["eidolon"] = record.eidolon
    if cand.affect is not None:
        fields["affect"] = affect_to_json(cand.affect)
    for name, value in (("tick", cand.tick), ("block", cand.block)):
        if value is not None:
            fields[name] = value
    return fields


# ---- pins and retraction ------------------------------------------------------
# `pinned` ("1"/"0", absent = not pinned): an operator's pin; compaction never
# folds a pinned memory (`candidate_of`) and the curator never archives one
# (`curated_entry`, `quarantined_view`). `retracted` ("1", absent = not): the
# memory was retracted with a source it derives from; it is also `deleted`, so
# every lane's filter drops it, and stands for nothing (no summary link).


RETRACTED_DROPPED: Final = ("replaced_by_summary_id", "compaction_pending")


def pinned_fields(pinned: bool) -> dict[str, str]:
    return {"pinned": "1" if pinned else "0"}


def is_pinned(doc: Mapping[str, Any]) -> bool:
    return stored_text(doc.get("pinned")) == "1"


def retracted_fields(at_ms: int) -> dict[str, Any]:
    """Set on a retracted memory; `RETRACTED_DROPPED` are removed with them.
    `retracted_at` is the retraction's event time (a replay writes the same)."""
    return {"retracted": "1", "deleted": "1", "retracted_at": at_ms}


def is_retracted(doc: Mapping[str, Any]) -> bool:
    return stored_text(doc.get("retracted")) == "1"
