"""The curator's views of a memory hash (episodes, quarantined entries, curated
entries) and the fields of the entries it distils."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from grimoire.streams.learn.curator.distill import EpisodeView, outcome_success
from grimoire.streams.learn.curator.playbook import EvidenceRow
from grimoire.streams.learn.curator.values import (
    CuratedEntry,
    EntryStatus,
    QuarantinedView,
)
from grimoire.streams.learn.evidence import action_of
from grimoire.streams.model.records import Kind, Layer, MemoryCandidate, MemoryRecord, Provenance
from grimoire.streams.model.text import gist, normalized_hash
from grimoire.tables.codec.curator_state import Bookkeeping
from grimoire.tables.codec.hash_values import stored_list, text_of
from grimoire.tables.codec.memory_hash.writing import hash_fields, is_pinned

__all__ = [
    "CURATOR_EVENT_TYPE",
    "ENTRY_FIELDS",
    "EPISODE_FIELDS",
    "EVIDENCE_FIELDS",
    "QUARANTINE_FIELDS",
    "changed_curated_fields",
    "curated_entry",
    "curated_fields",
    "episode_view",
    "evidence_row",
    "quarantined_view",
]

# ---- the curator's views and the entries it writes ---------------------------


CURATOR_EVENT_TYPE: Final = "curator"


EPISODE_FIELDS: Final = (
    "memory_id",
    "text",
    "tool",
    "nexus_keys",
    "regime",
    "outcome",
    "ts",
    "tick",
)


ENTRY_FIELDS: Final = (
    "memory_id", "kind", "text", "confidence", "ts", "last_accessed", "provenance",
    "decay_class", "quality", "strength", "validated_count", "contradicted_count", "pinned",
)  # fmt: skip


EVIDENCE_FIELDS: Final = ("memory_id", "nexus_keys", "validated_count", "contradicted_count",
                          "provenance")  # fmt: skip


def evidence_row(doc: Mapping[str, Any], clade_weight: float) -> EvidenceRow:
    """An evidence entry (or a clade sibling's copy of one) as PLAYBOOK.md shows it."""
    keys = stored_list(doc.get("nexus_keys"))
    action = action_of(keys)
    return EvidenceRow(
        situation=tuple(sorted(k for k in keys if not k.startswith("tool:"))),
        action=action,
        successes=int(_num(doc, "validated_count", 0)),
        failures=int(_num(doc, "contradicted_count", 0)),
        shared=text_of(doc.get("provenance", "self")) == "clade",
        weight=clade_weight,
    )


QUARANTINE_FIELDS: Final = (
    "memory_id", "kind", "ts", "provenance", "validated_count", "contradicted_count", "pinned",
)  # fmt: skip


def _num(doc: Mapping[str, Any], name: str, default: float) -> float:
    value = doc.get(name)
    if value is None or text_of(value) == "":
        return default
    return float(text_of(value))


def episode_view(doc: Mapping[str, Any]) -> EpisodeView:
    keys = stored_list(doc.get("nexus_keys"))
    tick = doc.get("tick")
    return EpisodeView(
        memory_id=text_of(doc["memory_id"]),
        text=text_of(doc.get("text", "")),
        tool=text_of(doc.get("tool", "")),
        nexus_keys=keys,
        regime=text_of(doc.get("regime", "")),
        success=outcome_success(text_of(doc.get("outcome", "")), keys),
        ts_ms=int(_num(doc, "ts", 0)),
        tick=int(float(text_of(tick))) if tick not in (None, b"", "") else None,
    )


def quarantined_view(doc: Mapping[str, Any]) -> QuarantinedView:
    return QuarantinedView(
        memory_id=text_of(doc["memory_id"]),
        kind=Kind(text_of(doc["kind"])),
        ts_ms=int(_num(doc, "ts", 0)),
        provenance=text_of(doc.get("provenance", "self")),
        validated_count=int(_num(doc, "validated_count", 0)),
        contradicted_count=int(_num(doc, "contradicted_count", 0)),
        pinned=is_pinned(doc),
    )


def curated_entry(doc: Mapping[str, Any], usage_accessed: Any, book: Bookkeeping) -> CuratedEntry:
    """A stored insight/heuristic/warning with its bookkeeping; the decay origin is
    the later of the record's and the usage hash's `last_accessed` (recall moves
    the latter)."""
    origin = max(
        _num(doc, "last_accessed", _num(doc, "ts", 0)), float(text_of(usage_accessed or 0))
    )
    return CuratedEntry(
        memory_id=text_of(doc["memory_id"]),
        kind=Kind(text_of(doc["kind"])),
        text=text_of(doc.get("text", "")),
        confidence=_num(doc, "confidence", 0.5),
        last_accessed_ms=int(origin),
        ts_ms=int(_num(doc, "ts", 0)),
        status=book.status,
        signature=book.signature,
        situation=book.situation,
        polarity=book.polarity,
        provenance=text_of(doc.get("provenance", "self")) or "self",
        decay_class=text_of(doc.get("decay_class", "")),
        quality=_num(doc, "quality", 0.5),
        strength=_num(doc, "strength", 1.0),
        consecutive_low=book.consecutive_low,
        validated_count=int(_num(doc, "validated_count", 0)),
        contradicted_count=int(_num(doc, "contradicted_count", 0)),
        source_ids=book.source_ids,
        pinned=is_pinned(doc),
    )


def _keys(entry: CuratedEntry) -> tuple[str, ...]:
    situation = entry.situation
    if situation is None:
        return ()
    keys = list(situation.keys)
    if situation.tool:
        keys.append(f"tool:{situation.tool}")
    if situation.strategy:
        keys.append(f"tag:strategy/{situation.strategy}")
    return tuple(sorted(keys))


def curated_fields(agent_id: str, entry: CuratedEntry, vector: bytes) -> dict[str, Any]:
    """The full record of a newly distilled entry, findable by recall like any memory."""
    situation = entry.situation
    candidate = MemoryCandidate(
        id=entry.memory_id,
        agent_id=agent_id,
        kind=entry.kind,
        layer=Layer.CONTEMPLATION,
        text=entry.text,
        ts_ms=entry.ts_ms,
        provenance=Provenance(
            source_event_id=f"curator/{entry.kind.value}/{entry.signature}",
            event_type=CURATOR_EVENT_TYPE,
            tool=situation.tool if situation else "",
            provenance=entry.provenance,
        ),
        normalized_hash=normalized_hash(entry.text),
        tags=("curator",),
        regime=situation.regime if situation else "",
        keys=_keys(entry),
    )
    record = MemoryRecord(candidate, canonical=vector, confidence=entry.confidence)
    # Transaction time is informational only; the event time keeps replays identical.
    fields = hash_fields(record, recorded_at_ms=entry.last_accessed_ms)
    fields.update(changed_curated_fields(entry, vector))
    return fields


def changed_curated_fields(entry: CuratedEntry, vector: bytes | None) -> dict[str, Any]:
    """The indexed-hash fields a cycle may change; text only with a new vector."""
    fields: dict[str, Any] = {
        "confidence": repr(entry.confidence),
        "validated_count": entry.validated_count,
        "contradicted_count": entry.contradicted_count,
        "last_accessed": entry.last_accessed_ms,
        "source_ids": "|".join(entry.source_ids),
        "archived": "1" if entry.status is EntryStatus.ARCHIVED else "0",
    }
    if vector is not None:
        fields.update(
            text=entry.text,
            gist=gist(entry.text),
            normalized_hash=normalized_hash(entry.text),
            canonical=vector,
        )
    return fields
