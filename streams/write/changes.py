"""What one ingest batch changes in memory, as values.

The planner (pure) produces a WriteBatch; a MemoryStore applies it in one
round trip. Keeping the changes as data lets unit tests inspect every decision
without a database and lets the Redis store pipeline everything together.
"""

from __future__ import annotations

from dataclasses import dataclass

from grimoire.streams.model.field_state import FieldState
from grimoire.streams.model.records import HyperedgeRef, MemoryRecord


@dataclass(frozen=True, slots=True)
class AggregateFold:
    """A near-exact repeat folded into the aggregate that stands for its group.

    The aggregate is created from `seed` the first time (its id is derived from
    the group's target); later folds only bump `count` and `last_seen`.
    """

    agent_id: str
    aggregate_id: str
    target_id: str
    member_id: str
    ts_ms: int
    seed: MemoryRecord
    # The folded candidate's hyperedge (its run): the aggregate joins it, so the
    # run still has a member in that role (unless it has one there already).
    hyperedge: HyperedgeRef | None = None


@dataclass(frozen=True, slots=True)
class Reinforcement:
    """A near-duplicate that strengthens the existing memory instead of adding one.

    `source_event_id` is the input event of the reinforcing candidate: the
    derivation index records the target as reinforced by it, so retracting that
    event takes back the share of `reinforced_count` it added. The planner always
    sets it; a reinforcement built without one is recorded under `member_id`.

    `hyperedge` is the candidate's (its run): the target joins it in the
    candidate's role, unless it is a member there already, so a run whose action
    repeated an earlier one still has its action (what a run's end learns from)."""

    agent_id: str
    target_id: str
    member_id: str
    ts_ms: int
    source_event_id: str = ""
    hyperedge: HyperedgeRef | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    agent_id: str
    candidate_id: str
    action: str


@dataclass(frozen=True, slots=True)
class StatsDelta:
    agent_id: str
    counters: tuple[tuple[str, float], ...]


@dataclass(frozen=True, slots=True)
class StateVector:
    """An agent's state vector (`grimoire.streams.model.eidolon.state_vector`) as
    the write path composed it for the eidolon lane, kept so a recall conditioned
    on the same state reuses it instead of composing it again."""

    agent_id: str
    key: str  # `state_key` of the state's parts: which state this is the vector of
    vector: bytes  # float32, the embedder's dimensions


@dataclass(frozen=True, slots=True)
class WriteBatch:
    records: tuple[MemoryRecord, ...] = ()
    folds: tuple[AggregateFold, ...] = ()
    reinforcements: tuple[Reinforcement, ...] = ()
    decisions: tuple[Decision, ...] = ()
    fields: tuple[FieldState, ...] = ()
    stats: tuple[StatsDelta, ...] = ()
    metrics: tuple[tuple[str, float], ...] = ()  # deployment-wide counters (not per agent)
    state_vectors: tuple[StateVector, ...] = ()  # each agent's latest state vector

    def is_empty(self) -> bool:
        return not (self.records or self.folds or self.reinforcements or self.decisions)
