"""What recall reads: one agent's records, lanes and graph, as values.

The records, lane hits and anchors a `RecallSource` answers with live here; the
port itself (`RecallSource`, bound to one agent when it is made, so tenancy is
decided once, in the storage layer's query builders, and nothing in the recall
flow can ask for another agent's memories) is declared in
`grimoire.streams.ports.recall`, with `GraphView` and `KeyLinks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from grimoire.streams.model.decay import DEFAULT_DECAY_POLICY, DecayPolicy, effective_confidence
from grimoire.streams.model.field_state import Affect
from grimoire.streams.recall.options import ProvenanceFilters
from grimoire.streams.recall.walk.daimoi import NodeInfo

Vector = npt.NDArray[np.float32]

# The ports themselves (`RecallSource`, `GraphView`, `KeyLinks`) are declared in
# `grimoire.streams.ports.recall` and re-exported here for older importers.
__all__ = [
    "Anchor",
    "LaneHit",
    "RecallRecord",
    "Vector",
    "adjacent_members",
]


@dataclass(frozen=True, slots=True)
class LaneHit:
    memory_id: str
    score: float  # larger is better in every lane


@dataclass(frozen=True, slots=True)
class Anchor:
    """A memory placed on one of its nexus keys (a ZSET ordered by event time)."""

    memory_id: str
    key: str
    ts_ms: int


def adjacent_members(members: Mapping[str, int], anchor: Anchor) -> tuple[str, ...]:
    """The members just before and just after `anchor` in (event time, id) order,
    as a sorted set on the key answers it: the reference for every source."""
    order = sorted(members.items(), key=lambda item: (item[1], item[0]))
    after = next((m for m, ts in order if ts >= anchor.ts_ms and m != anchor.memory_id), None)
    before = next(
        (m for m, ts in reversed(order) if ts <= anchor.ts_ms and m != anchor.memory_id), None
    )
    return tuple(dict.fromkeys(n for n in (before, after) if n))


@dataclass(frozen=True, slots=True)
class RecallRecord:
    """The fields of a stored memory that ranking, filtering and packing read."""

    memory_id: str
    kind: str
    layer: str
    text: str
    ts_ms: int
    gist: str = ""
    confidence: float = 0.5
    quality: float = 0.5
    importance: float = 0.5
    strength: float = 1.0
    last_accessed_ms: int | None = None
    decay_class: str = ""
    provenance: str = "self"
    regime: str = ""
    affect: Affect | None = None
    normalized_hash: str = ""
    deleted: bool = False
    quarantined: bool = False
    archived: bool = False  # the curator retired it: kept for audit, never recalled
    replaced_by: str = ""
    session_id: str = ""
    run_id: str = ""
    actor_id: str = ""
    event_type: str = ""
    source_event_id: str = ""
    hyperedge_ids: tuple[str, ...] = ()
    nexus_keys: tuple[str, ...] = ()
    validated_count: int = 0  # runs it took part in (or was recalled for) that succeeded
    contradicted_count: int = 0  # ... that failed
    causal_uplift: float = 0.0  # what its out-edges in the causal graph say, in [-1, 1]
    latency_ms: float | None = None  # a tool call's latency
    vector: Vector | None = field(default=None, compare=False, repr=False)

    @property
    def live(self) -> bool:
        return not (self.deleted or self.quarantined or self.archived)

    def admitted_by(self, filters: ProvenanceFilters) -> bool:
        return filters.admits(
            ts_ms=self.ts_ms,
            session_id=self.session_id,
            run_id=self.run_id,
            actor_id=self.actor_id,
            event_type=self.event_type,
            kind=self.kind,
            layer=self.layer,
        )

    def effective_confidence(
        self, now_ms: int, policy: DecayPolicy = DEFAULT_DECAY_POLICY
    ) -> float:
        """Confidence decayed to `now_ms` (docs/design.md §6), from the last access or, never
        accessed, from the event time: what recall ranks on and the decay pass
        schedules against."""
        return effective_confidence(
            self.confidence,
            self.last_accessed_ms if self.last_accessed_ms is not None else self.ts_ms,
            now_ms,
            kind=self.kind,
            decay_class=self.decay_class or None,
            provenance=self.provenance,
            quality=self.quality,
            strength=self.strength,
            policy=policy,
        )

    def node(self) -> NodeInfo:
        """The walk's view. A compacted source stays walkable through its summary
        link; whether it may be returned is decided later, by `live`."""
        return NodeInfo(
            memory_id=self.memory_id,
            kind=self.kind,
            keys=self.nexus_keys,
            ts_ms=self.ts_ms,
            utility=self.importance,
            deleted=(self.deleted and not self.replaced_by) or self.quarantined or self.archived,
            replaced_by=self.replaced_by,
            actor=self.actor_id,
        )
