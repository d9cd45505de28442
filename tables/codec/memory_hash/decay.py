"""The decay pass's view of a memory hash: confidence, strength and the last access,
read the same way recall reads them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from grimoire.streams.maintenance.decay_pass import DecayEntry
from grimoire.tables.codec.hash_values import stored_number, stored_text, text_of

__all__ = [
    "DECAY_FIELDS",
    "StoredDecayState",
    "decode_state",
]

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
