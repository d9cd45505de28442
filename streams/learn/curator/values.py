"""The curator's values: curated entries, its policy, and what a cycle decides.

Kept apart from the planning logic (`curator.py`) so storage and rendering can
import the shapes without the rules.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

import orjson

from grimoire.streams.learn.curator.distill import Polarity, Situation
from grimoire.streams.model.decay import DEFAULT_DECAY_POLICY, DecayPolicy
from grimoire.streams.model.records import Kind

logger = logging.getLogger(__name__)

CURATED_KINDS: Final = (Kind.INSIGHT, Kind.HEURISTIC, Kind.WARNING)
CURATOR_CYCLE_COMPLETE: Final = "CuratorCycleComplete"


class EntryStatus(StrEnum):
    PROPOSED = "proposed"  # candidate: retrievable, not yet trusted
    ACTIVE = "active"  # an insight (or warning) that passed the promotion threshold
    PLAYBOOK = "playbook"  # a heuristic compiled into PLAYBOOK.md
    DEMOTED = "demoted"  # fell below the active threshold; may be promoted again
    ARCHIVED = "archived"  # pruned: kept in storage, never recalled


class CuratorOp(StrEnum):
    ADD = "add"
    UPVOTE = "upvote"
    DOWNVOTE = "downvote"
    EDIT = "edit"
    PROMOTE = "promote"
    DEMOTE = "demote"
    ARCHIVE = "archive"
    RELEASE = "release"  # a quarantined memory let back into recall


@dataclass(frozen=True, slots=True)
class CuratedEntry:
    """An insight, heuristic or warning as the curator sees it.

    `confidence` is the stored value; decisions use it decayed from
    `last_accessed_ms` (see `effective`). `signature`/`situation` are empty for
    entries the curator did not distil (e.g. a warning from a predecessor).
    """

    memory_id: str
    kind: Kind
    text: str
    confidence: float
    last_accessed_ms: int
    ts_ms: int
    status: EntryStatus = EntryStatus.PROPOSED
    signature: str = ""
    situation: Situation | None = None
    polarity: Polarity | None = None
    provenance: str = "self"
    decay_class: str = ""
    quality: float = 0.5
    strength: float = 1.0
    consecutive_low: int = 0
    validated_count: int = 0
    contradicted_count: int = 0
    source_ids: tuple[str, ...] = ()
    pinned: bool = False  # an operator's pin: never archived (see `plan.transition`)

    @property
    def strategy(self) -> str:
        return self.situation.strategy if self.situation is not None else ""


@dataclass(frozen=True, slots=True)
class QuarantinedView:
    """A memory held back by the hallucination firewall, awaiting review."""

    memory_id: str
    kind: Kind
    ts_ms: int
    provenance: str = "self"
    validated_count: int = 0
    contradicted_count: int = 0
    pinned: bool = False  # an operator's pin: released by evidence, never archived


@dataclass(frozen=True, slots=True)
class CuratorPolicy:
    """Thresholds of docs/design.md §6; all compare the *effective* (decayed) confidence."""

    min_cluster: int = 3
    top_keys: int = 2  # situation keys per signature
    add_confidence: float = 0.5
    upvote: float = 0.1
    downvote: float = 0.15
    max_confidence: float = 1.0
    promote_insight: float = 0.6
    promote_heuristic: float = 0.7
    demote_below: float = 0.4
    prune_below: float = 0.1
    prune_after_cycles: int = 3
    # An active insight with at least this many supporting episodes yields a
    # heuristic: one lucky cluster is not enough to prescribe an action.
    heuristic_min_validated: int = 4
    exempt_kinds: frozenset[Kind] = frozenset({Kind.WARNING})
    exempt_provenances: frozenset[str] = frozenset({"bloodstain"})
    quarantine_max_age_ms: int = 7 * 24 * 3_600_000
    max_source_ids: int = 32
    decay: DecayPolicy = field(default_factory=lambda: DEFAULT_DECAY_POLICY)

    def exempt(self, entry: CuratedEntry) -> bool:
        return entry.kind in self.exempt_kinds or entry.provenance in self.exempt_provenances


DEFAULT_CURATOR_POLICY: Final = CuratorPolicy()


@dataclass(frozen=True, slots=True)
class Operation:
    """One line of the cycle's audit log."""

    op: CuratorOp
    memory_id: str
    kind: Kind
    before: float
    after: float


@dataclass(frozen=True, slots=True)
class EntryChange:
    """An entry's state after the cycle and which stored parts must be rewritten.

    `record_changed` covers the indexed memory hash (confidence, counts, text,
    archived); bookkeeping-only changes (status, low-cycle counter) stay out of
    it so RediSearch does not re-index the vectors for them.
    """

    entry: CuratedEntry
    new: bool = False
    record_changed: bool = False
    text_changed: bool = False


class QuarantineAction(StrEnum):
    RELEASE = "release"
    ARCHIVE = "archive"


@dataclass(frozen=True, slots=True)
class QuarantineDecision:
    memory_id: str
    action: QuarantineAction


@dataclass(frozen=True, slots=True)
class CuratorReport:
    agent_id: str
    cycle: int
    now_ms: int
    pruned: int = 0
    promoted: int = 0
    proposed: int = 0
    demoted: int = 0
    upvoted: int = 0
    downvoted: int = 0
    edited: int = 0
    released: int = 0
    episodes_seen: int = 0
    # The entries the cycle looked at (due, voted on, new): its work, which the
    # entries it did not need to look at leave unchanged.
    entries_seen: int = 0
    entries_decayed: int = 0
    avg_confidence_before: float = 0.0
    avg_confidence_after: float = 0.0

    def event_json(self) -> bytes:
        """The `CuratorCycleComplete` event body (docs/design.md §6)."""
        return orjson.dumps(
            {
                "type": CURATOR_CYCLE_COMPLETE,
                "agent_id": self.agent_id,
                "cycle": self.cycle,
                "ts": self.now_ms,
                "pruned": self.pruned,
                "promoted": self.promoted,
                "proposed": self.proposed,
                "demoted": self.demoted,
            }
        )

    def decay_event_json(self) -> bytes:
        """The `GrimoireDecay` event body for the same pass."""
        return orjson.dumps(
            {
                "type": "GrimoireDecay",
                "agent_id": self.agent_id,
                "cycle": self.cycle,
                "ts": self.now_ms,
                "entries_decayed": self.entries_decayed,
                "avg_before": round(self.avg_confidence_before, 6),
                "avg_after": round(self.avg_confidence_after, 6),
            }
        )


@dataclass(frozen=True, slots=True)
class CuratorSchedule:
    """What a cycle changes in the curator's indexes (`streams/learn/curator/schedule.py`).

    `due`: each entry the cycle looked at or created, with its next look (event
    time ms); `dropped`: archived entries, out of every index; `signed` /
    `unsigned`: signature-index members added / removed; `playbook` /
    `unplaybook`: heuristic ids now in / no longer in the playbook.
    """

    due: tuple[tuple[str, int], ...] = ()
    dropped: tuple[str, ...] = ()
    signed: tuple[str, ...] = ()
    unsigned: tuple[str, ...] = ()
    playbook: tuple[str, ...] = ()
    unplaybook: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CuratorPlan:
    changes: tuple[EntryChange, ...]
    quarantine: tuple[QuarantineDecision, ...]
    operations: tuple[Operation, ...]
    report: CuratorReport
    watermark_ms: int  # the newest episode considered (or the previous watermark)
    schedule: CuratorSchedule = CuratorSchedule()
