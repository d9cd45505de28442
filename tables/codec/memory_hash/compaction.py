"""Compaction's candidate view of a memory hash, and the fields of the summaries it
writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from grimoire.streams.maintenance.compaction import (
    ClusterPlan,
    CompactionCandidate,
    CompactionPlan,
)
from grimoire.streams.model.lexicon import lexical_form
from grimoire.streams.model.records import Kind, Layer, MemoryCandidate, MemoryRecord, Provenance
from grimoire.streams.model.text import gist, normalized_hash
from grimoire.streams.trust.retraction import RebuiltSummary
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.memory_hash.writing import hash_fields
from grimoire.tables.exceptions import StorageError

__all__ = [
    "CANDIDATE_FIELDS",
    "candidate_of",
    "rebuilt_summary_fields",
    "summary_fields",
    "summary_record",
]

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


def rebuilt_summary_fields(summary: RebuiltSummary, vector: bytes, dims: int) -> dict[str, Any]:
    """A summary rebuilt from the sources a retraction left it (its vector in both lanes)."""
    if len(vector) != dims * 4:
        raise StorageError(f"embedder gave {len(vector) // 4} dims, expected {dims}")
    return {
        "text": summary.text,
        "lexical": lexical_form(summary.text, summary.ts_ms).text,
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
