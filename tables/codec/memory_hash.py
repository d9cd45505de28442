"""The memory hash (`Keyspace.memory`): the one stored shape every memory has, and
the only module that writes or reads its fields.

A memory is written whole by `hash_fields` (observed events), and through it for
what maintenance creates (`curated_fields` for distilled entries, `summary_fields`
for compaction summaries). Readers decode only the fields their view needs, each
from one HMGET row or search document, by position where a request reads hundreds
(recall records, walk nodes), so a field's name, default and parse are written once
here: recall and the decay pass read confidence, strength and the last access the
same way, which the decay snapshot relies on.

Sections: writing; recall's record view; the decay view; the walk's node view; the
curator's views; compaction's candidate view and summaries; pins and retraction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from grimoire.streams.learn.curator.distill import EpisodeView, outcome_success
from grimoire.streams.learn.curator.values import (
    CURATED_KINDS,
    CuratedEntry,
    EntryStatus,
    QuarantinedView,
)
from grimoire.streams.maintenance.compaction import (
    DAY_MS,
    ClusterPlan,
    CompactionCandidate,
    CompactionPlan,
)
from grimoire.streams.maintenance.compaction_summary import SummarySource
from grimoire.streams.maintenance.decay_pass import DecayEntry
from grimoire.streams.model.records import Kind, Layer, MemoryCandidate, MemoryRecord, Provenance
from grimoire.streams.model.text import gist, normalized_hash
from grimoire.streams.recall.ports import RecallRecord
from grimoire.streams.recall.walk.daimoi import NodeInfo
from grimoire.streams.trust.retraction import DerivedNode, RebuiltSummary, SummaryShape
from grimoire.tables.codec.curator_state import Bookkeeping
from grimoire.tables.codec.field_state import affect_from_json, affect_to_json
from grimoire.tables.codec.hash_values import stored_list, stored_number, stored_text, text_of
from grimoire.tables.codec.walk_node import WALK_NODE_FIELDS, walk_node
from grimoire.tables.exceptions import StorageError

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


# ---- the decay pass's view: read exactly as recall reads the same fields -----


DECAY_FIELDS: Final = (
    "memory_id",
    "agent_id",
    "kind",
    "ts",
    "confidence",
    "quality",
    "strength",
    "last_accessed",
    "decay_class",
    "provenance",
    "deleted",
    "archived",
    "replaced_by_summary_id",
)


@dataclass(frozen=True, slots=True)
class StoredDecayState:
    agent_id: str
    entry: DecayEntry
    live: bool  # False: deleted, compacted into a summary, or archived


def decode_state(
    doc: Mapping[str, Any], usage_last_accessed: Any, snapshot_effective: Any
) -> StoredDecayState | None:
    """None for a missing memory hash; `doc` may also be a `hash_fields` mapping."""
    if doc.get("memory_id") is None:
        return None
    last = stored_number(doc.get("last_accessed"), -1.0)
    used = stored_number(usage_last_accessed, -1.0)
    last = max(last, used)
    origin = int(last) if last >= 0 else int(stored_number(doc.get("ts"), 0.0))
    snapshot = stored_number(snapshot_effective, -1.0)
    entry = DecayEntry(
        memory_id=text_of(doc["memory_id"]),
        confidence=stored_number(doc.get("confidence"), 0.5),
        last_accessed_ms=origin,
        kind=stored_text(doc.get("kind")),
        decay_class=stored_text(doc.get("decay_class")) or None,
        provenance=stored_text(doc.get("provenance")) or "self",
        quality=stored_number(doc.get("quality"), 0.5),
        strength=stored_number(doc.get("strength"), 1.0),
        stored_effective=snapshot if snapshot >= 0 else None,
    )
    live = not (
        stored_text(doc.get("deleted")) == "1"
        or stored_text(doc.get("archived")) == "1"
        or bool(stored_text(doc.get("replaced_by_summary_id")))
    )
    return StoredDecayState(agent_id=stored_text(doc.get("agent_id")), entry=entry, live=live)


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


# ---- compaction's candidate view and the summaries it writes -----------------


CANDIDATE_FIELDS: Final = (
    "memory_id", "kind", "text", "ts", "nexus_keys", "tags", "quality", "pinned", "locked",
    "off_topic", "summary_level", "deleted", "archived", "quarantined",
)  # fmt: skip


def candidate_of(row: Mapping[str, Any], usage: Sequence[Any]) -> CompactionCandidate:
    """A candidate from its memory fields (`CANDIDATE_FIELDS`, raw) and its usage
    values (`USAGE_FIELDS` order, None where absent)."""

    def text(name: str) -> str:
        value = row.get(name)
        return "" if value is None else text_of(value)

    def split(name: str) -> tuple[str, ...]:
        return tuple(part for part in text(name).split("|") if part)

    decay, last = usage
    return CompactionCandidate(
        memory_id=text("memory_id"),
        kind=text("kind"),
        text=text("text"),
        ts_ms=int(float(text("ts") or 0)),
        keys=split("nexus_keys"),
        tags=split("tags"),
        quality=float(text("quality") or 0.5),
        included_count_decay=float(text_of(decay)) if decay is not None else 0.0,
        last_accessed_ms=int(float(text_of(last))) if last is not None else None,
        summary_level=int(text("summary_level") or 0),
        pinned=text("pinned") == "1",
        locked=text("locked") == "1",
        deleted=text("deleted") == "1",
        archived=text("archived") == "1",
        quarantined=text("quarantined") == "1",
        off_topic=text("off_topic") == "1",
    )


def summary_record(agent_id: str, cluster: ClusterPlan, vector: bytes, dims: int) -> MemoryRecord:
    """The cluster's summary as a memory record (its vector in both lanes)."""
    if len(vector) != dims * 4:
        raise StorageError(f"embedder gave {len(vector) // 4} dims, expected {dims}")
    candidate = MemoryCandidate(
        id=cluster.summary_id,
        agent_id=agent_id,
        kind=Kind.SUMMARY,
        layer=Layer.CONTEMPLATION,
        text=cluster.text,
        ts_ms=cluster.ts_ms,
        provenance=Provenance(
            source_event_id=f"compaction:{cluster.summary_id}",
            event_type="compaction",
            provenance="compaction",
        ),
        normalized_hash=normalized_hash(cluster.text),
        tags=cluster.tags,
        keys=cluster.keys,
    )
    return MemoryRecord(candidate=candidate, canonical=vector, eidolon=vector)


def summary_fields(
    agent_id: str, plan: CompactionPlan, cluster: ClusterPlan, vector: bytes, dims: int
) -> dict[Any, Any]:
    """The summary as a memory hash in the record codec's format, born HIDDEN."""
    record = summary_record(agent_id, cluster, vector, dims)
    fields = hash_fields(record, plan.now_ms)
    fields.update(
        {
            "deleted": "1",
            "compaction_pending": plan.plan_id,
            "compaction_plan": plan.plan_id,
            "source_ids": "|".join(cluster.source_ids),
            "summary_of": "|".join(cluster.summary_of),
            "summary_level": cluster.summary_level,
            "cluster_id": f"{cluster.centre_key}@{cluster.bucket_start_ms}",
        }
    )
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


DERIVATION_FIELDS: Final = tuple(
    dict.fromkeys(
        (
            "memory_id", "agent_id", "kind", "text", "ts", "nexus_keys", "tags", "count",
            "reinforced_count", "retracted", "cluster_id", "summary_level", "source_event_id",
            *ENTRY_FIELDS,
        )
    )
)  # fmt: skip


def derived_node(
    doc: Mapping[str, Any], usage_accessed: Any, book: Bookkeeping | None
) -> DerivedNode:
    """A memory as the retraction planner reads it (`DERIVATION_FIELDS`, raw);
    `book` is the curator's bookkeeping of a curated entry (None for others)."""
    memory_id = text_of(doc["memory_id"])
    kind = stored_text(doc.get("kind"))
    ts_ms = int(stored_number(doc.get("ts"), 0.0))
    keys = stored_list(doc.get("nexus_keys"))
    shape = None
    if kind == Kind.SUMMARY.value:
        # `cluster_id` is centre@bucket; a summary without one (written by hand)
        # reads as centred on its first key, in its day.
        centre, _, bucket = stored_text(doc.get("cluster_id")).rpartition("@")
        level = int(stored_number(doc.get("summary_level"), 1.0))
        if not centre:
            centre, bucket = (keys[0] if keys else ""), str(ts_ms - ts_ms % DAY_MS)
        shape = SummaryShape(centre, int(stored_number(bucket, 0.0)), level)
    entry = None
    if book is not None and kind in {k.value for k in CURATED_KINDS}:
        # An HMGET row holds None for an unset field, which a search reply omits.
        present = {name: value for name, value in doc.items() if value is not None}
        entry = curated_entry(present, usage_accessed, book)
    return DerivedNode(
        memory_id=memory_id,
        kind=kind,
        retracted=is_retracted(doc),
        count=int(stored_number(doc.get("count"), 0.0)),
        reinforced_count=int(stored_number(doc.get("reinforced_count"), 0.0)),
        content=SummarySource(
            memory_id, stored_text(doc.get("text")), ts_ms, keys, stored_list(doc.get("tags"))
        ),
        summary=shape,
        entry=entry,
        # For an aggregate: the event whose fold created it, whose text it holds.
        source_event_id=stored_text(doc.get("source_event_id")),
    )


def rebuilt_summary_fields(summary: RebuiltSummary, vector: bytes, dims: int) -> dict[str, Any]:
    """A summary rebuilt from the sources a retraction left it (its vector in both lanes)."""
    if len(vector) != dims * 4:
        raise StorageError(f"embedder gave {len(vector) // 4} dims, expected {dims}")
    return {
        "text": summary.text,
        "gist": gist(summary.text),
        "normalized_hash": normalized_hash(summary.text),
        "ts": summary.ts_ms,
        "valid_from": summary.ts_ms,
        "tags": "|".join(summary.tags),
        "nexus_keys": "|".join(summary.keys),
        "source_ids": "|".join(summary.source_ids),
        "summary_of": "|".join(summary.summary_of),
        "canonical": vector,
        "eidolon": vector,
    }
