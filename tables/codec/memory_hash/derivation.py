"""The derivation view of a memory hash, which a retraction walks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from grimoire.streams.learn.curator.values import (
    CURATED_KINDS,
)
from grimoire.streams.maintenance.compaction import (
    DAY_MS,
)
from grimoire.streams.maintenance.compaction_summary import SummarySource
from grimoire.streams.model.records import Kind
from grimoire.streams.trust.retraction import DerivedNode, SummaryShape
from grimoire.tables.codec.curator_state import Bookkeeping
from grimoire.tables.codec.hash_values import stored_list, stored_number, stored_text, text_of
from grimoire.tables.codec.memory_hash.curator import ENTRY_FIELDS, curated_entry
from grimoire.tables.codec.memory_hash.writing import is_retracted

__all__ = [
    "DERIVATION_FIELDS",
    "derived_node",
]

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
