"""The memory record shared by every stage (docs/design.md §3), as frozen values."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from grimoire.streams.model.field_state import Affect


class Kind(StrEnum):
    EPISODE = "episode"
    INSIGHT = "insight"
    HEURISTIC = "heuristic"
    WARNING = "warning"
    CAUSAL_LINK = "causal_link"
    STRATEGY_FRAGMENT = "strategy_fragment"
    SUMMARY = "summary"
    AGGREGATE = "aggregate"


class Layer(StrEnum):
    INPUT = "input"
    CONTEMPLATION = "contemplation"
    OUTPUT = "output"
    OBSERVATION = "observation"
    ACTION = "action"


class Role(StrEnum):
    """A memory's part in its hyperedge (an episode, run or transcript turn)."""

    TRIGGER = "trigger"
    CONTEXT = "context"
    ACTION = "action"
    OUTCOME = "outcome"


@dataclass(frozen=True, slots=True)
class HyperedgeRef:
    edge_id: str
    role: Role


class EventType(StrEnum):
    """Which input stream a memory came from; also its provenance `event_type`."""

    EPISODE = "episode"
    TOOL = "tool"
    TRANSCRIPT = "transcript"


# Where a memory's knowledge came from, as an agent may say on the wire
# (`Provenance.provenance`): its own experience, a clade peer's, a predecessor's
# (a bloodstain and a death reflection are what a dead one left), or a dream.
# `decay.LINEAGE_PROVENANCES` and `decay.DREAM_PROVENANCES` are subsets; Grimoire's
# own writers add theirs ("compaction"), which no event may claim.
PUBLISHED_PROVENANCES: Final = frozenset(
    {
        "self",
        "clade",
        "predecessor",
        "bloodstain",
        "death_reflection",
        "dream",
        "dream_validated",
    }
)


@dataclass(frozen=True, slots=True)
class Provenance:
    source_event_id: str
    event_type: str
    session_id: str = ""
    run_id: str = ""
    actor_id: str = ""
    tool: str = ""
    provenance: str = "self"


@dataclass(frozen=True, slots=True)
class MemoryCandidate:
    """A validated, normalized memory that has not been embedded or stored yet.

    `id` is derived from (agent, source event, part) so a redelivered or
    replayed event always maps onto the same record.
    """

    id: str
    agent_id: str
    kind: Kind
    layer: Layer
    text: str
    ts_ms: int
    provenance: Provenance
    normalized_hash: str
    tick: int | None = None
    block: int | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    importance: float = 0.5
    regime: str = ""
    keys: tuple[str, ...] = ()
    episode_type: str = ""
    outcome: str = ""
    has_error: bool = False
    affect: Affect | None = None
    hyperedge: HyperedgeRef | None = None
    # A `decay.DecayClass` value ("" = the kind's half-life); a string here
    # because the decay module builds on this one.
    decay_class: str = ""
    pinned: bool = False  # never compacted or archived, as the `pin` command sets
    latency_ms: float | None = None  # a tool call's latency (causal utility's cost term)


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """A candidate with its vectors, ready to be stored.

    Vectors are float32 bytes as Redis stores them: converting 384 floats per
    record to and from Python tuples cost more than the write itself.
    """

    candidate: MemoryCandidate
    canonical: bytes
    eidolon: bytes = b""
    confidence: float = 0.5
    quality: float = 0.5
    quarantined: bool = False
    off_topic: bool = False
    admission: str = ""  # the admission factor breakdown (JSON), kept for audit
    aggregate_of: str = ""  # for aggregates: the memory whose repeats it counts

    @property
    def id(self) -> str:
        return self.candidate.id

    @property
    def agent_id(self) -> str:
        return self.candidate.agent_id
