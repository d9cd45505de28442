"""Admission and scoring of one ingest batch: candidates in, a WriteBatch out.

Pure: vectors, the nearest stored memory of each candidate and the agents'
field states come in as arguments. Candidates are decided in order, and each
one also sees the memories admitted before it in the same batch, so batch
boundaries do not change what gets stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt
import orjson

from grimoire.streams.model.field_state import FieldState
from grimoire.streams.model.ids import memory_id
from grimoire.streams.model.records import Kind, MemoryCandidate, MemoryRecord
from grimoire.streams.write.admission import (
    Action,
    AdmissionCandidate,
    AdmissionDecision,
    AdmissionPolicy,
    NearMemory,
    decide,
)
from grimoire.streams.write.changes import (
    AggregateFold,
    Decision,
    Reinforcement,
    StatsDelta,
    WriteBatch,
)
from grimoire.streams.write.quality import QualityScore, score_quality

Vector = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class StoredNeighbour:
    neighbour: NearMemory
    kind: str


@dataclass(frozen=True, slots=True)
class PlanItem:
    candidate: MemoryCandidate
    canonical: Vector
    eidolon: Vector
    now_ms: int  # the agent's watermark once this event is counted
    stored: StoredNeighbour | None
    # Whether the aggregate standing for `stored`'s group exists in the store
    # already (a fold into it then creates nothing a later candidate could meet).
    stored_group_exists: bool = False


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    candidate: MemoryCandidate
    decision: AdmissionDecision
    quality: QualityScore | None
    memory_id: str | None  # the record written, or the one merged/aggregated into


@dataclass
class _Admitted:
    candidate_id: str
    vector: Vector
    confidence: float
    kind: str
    text: str


@dataclass
class _AgentTally:
    counters: dict[str, float] = field(default_factory=dict)
    # Fractional amounts, one per candidate in order: summed by the store one by one,
    # so the stored total is the same whatever the batch boundaries (a float sum
    # grouped by batch would differ in the last bits between a run and its replay).
    each: list[tuple[str, float]] = field(default_factory=list)

    def add(self, name: str, amount: float = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + amount

    def add_each(self, name: str, amount: float) -> None:
        self.each.append((name, amount))

    def entries(self) -> tuple[tuple[str, float], ...]:
        return (*sorted(self.counters.items()), *self.each)


def aggregate_id(agent_id: str, target_id: str) -> str:
    """The aggregate standing for a target's group: time-ordered at the target's time."""
    ts_ms = int(target_id.replace("-", "")[:12], 16)
    return memory_id(agent_id, f"aggregate:{target_id}", 0, ts_ms)


def neighbour_similarity(candidate: Vector, neighbour: Vector) -> float:
    """The cosine of two unit vectors, as admission reads it. A neighbour is found
    either in the store or earlier in the same batch, and which one depends on
    where the batch boundaries fell; both paths compute it here, bit for bit the
    same, so replaying the log decides the same (the index's own distance
    differs in the last bits)."""
    return float(np.dot(candidate, neighbour))


def closer(similarity: float, memory_id: str, than: NearMemory | None) -> bool:
    """The one order in which neighbours are ranked, in the store and in a batch
    alike: the higher cosine, then the smaller memory id. Identical texts give
    identical vectors, and a tie broken any other way would depend on where the
    batch boundaries fell."""
    if than is None:
        return True
    if similarity != than.similarity:
        return similarity > than.similarity
    return memory_id < than.memory_id


def _nearest(item: PlanItem, admitted: Sequence[_Admitted]) -> tuple[NearMemory | None, str]:
    best = item.stored.neighbour if item.stored else None
    kind = item.stored.kind if item.stored else ""
    for earlier in admitted:
        similarity = neighbour_similarity(item.canonical, earlier.vector)
        if closer(similarity, earlier.candidate_id, best):
            best = NearMemory(earlier.candidate_id, similarity, earlier.confidence, earlier.text)
            kind = earlier.kind
    return best, kind


def admission_json(decision: AdmissionDecision) -> str:
    return orjson.dumps(
        {
            "action": decision.action.value,
            "reason": decision.reason,
            **decision.breakdown(),
            "off_topic": decision.off_topic,
        }
    ).decode()


def plan_batch(
    items: Sequence[PlanItem],
    fields: Mapping[str, FieldState],
    *,
    policy: AdmissionPolicy | None = None,
) -> tuple[WriteBatch, list[WriteOutcome]]:
    policy = policy or AdmissionPolicy()
    records: list[MemoryRecord] = []
    folds: list[AggregateFold] = []
    reinforcements: list[Reinforcement] = []
    decisions: list[Decision] = []
    outcomes: list[WriteOutcome] = []
    admitted: dict[str, list[_Admitted]] = {}
    created: set[str] = set()  # aggregates this batch creates
    tallies: dict[str, _AgentTally] = {}

    for item in items:
        cand = item.candidate
        nearest, nearest_kind = _nearest(item, admitted.get(cand.agent_id, ()))
        decision = decide(
            AdmissionCandidate(
                kind=cand.kind,
                text=cand.text,
                ts_ms=cand.ts_ms,
                importance=cand.importance,
                episode_type=cand.episode_type or "observation",
                has_error=cand.has_error,
                key_count=len(cand.keys),
            ),
            nearest=nearest,
            now_ms=item.now_ms,
            policy=policy,
        )
        tally = tallies.setdefault(cand.agent_id, _AgentTally())
        tally.add("candidates")
        tally.add(decision.action.value)
        if decision.off_topic:
            tally.add("off_topic")
        decisions.append(Decision(cand.agent_id, cand.id, decision.action.value))
        quality: QualityScore | None = None
        written: str | None = decision.target_id

        if decision.action in (Action.ADMIT, Action.QUARANTINE):
            quality = score_quality(cand.text, novelty=decision.factors.novelty)
            tally.add_each("quality_sum", quality.total)
            records.append(
                MemoryRecord(
                    candidate=cand,
                    canonical=item.canonical.astype(np.float32).tobytes(),
                    eidolon=item.eidolon.astype(np.float32).tobytes(),
                    confidence=decision.confidence,
                    quality=quality.total,
                    quarantined=decision.action is Action.QUARANTINE,
                    off_topic=decision.off_topic,
                    admission=admission_json(decision),
                )
            )
            written = cand.id
            if decision.action is Action.ADMIT:
                admitted.setdefault(cand.agent_id, []).append(
                    _Admitted(cand.id, item.canonical, decision.confidence, cand.kind, cand.text)
                )
        elif decision.action is Action.AGGREGATE and decision.target_id is not None:
            target = decision.target_id
            group = (
                target if nearest_kind == Kind.AGGREGATE else aggregate_id(cand.agent_id, target)
            )
            seed = _aggregate_seed(cand, item, group, target, decision, policy)
            folds.append(
                AggregateFold(
                    cand.agent_id, group, target, cand.id, cand.ts_ms, seed, cand.hyperedge
                )
            )
            written = group
            stored_id = item.stored.neighbour.memory_id if item.stored else None
            existed = nearest_kind == Kind.AGGREGATE or (
                target == stored_id and item.stored_group_exists
            )
            if not existed and group not in created:
                # This fold creates the aggregate (the seed is what gets stored):
                # later candidates of the batch meet it, as they would in the store.
                created.add(group)
                admitted.setdefault(cand.agent_id, []).append(
                    _Admitted(group, item.canonical, seed.confidence, Kind.AGGREGATE, cand.text)
                )
        elif decision.action is Action.MERGE and decision.target_id is not None:
            reinforcements.append(
                Reinforcement(
                    cand.agent_id,
                    decision.target_id,
                    cand.id,
                    cand.ts_ms,
                    source_event_id=cand.provenance.source_event_id,
                    hyperedge=cand.hyperedge,
                )
            )
        outcomes.append(WriteOutcome(cand, decision, quality, written))

    latest_fields = tuple(fields[agent] for agent in sorted(fields))
    stats = tuple(StatsDelta(agent, tally.entries()) for agent, tally in sorted(tallies.items()))
    batch = WriteBatch(
        records=tuple(records),
        folds=tuple(folds),
        reinforcements=tuple(reinforcements),
        decisions=tuple(decisions),
        fields=latest_fields,
        stats=stats,
    )
    return batch, outcomes


def _aggregate_seed(
    cand: MemoryCandidate,
    item: PlanItem,
    group_id: str,
    target_id: str,
    decision: AdmissionDecision,
    policy: AdmissionPolicy,
) -> MemoryRecord:
    """What the aggregate record looks like if this fold is the one that creates it."""
    # A pin holds the memory it was published with, not the count of its repeats.
    seed_candidate = replace(cand, id=group_id, kind=Kind.AGGREGATE, hyperedge=None, pinned=False)
    return MemoryRecord(
        candidate=seed_candidate,
        canonical=item.canonical.astype(np.float32).tobytes(),
        eidolon=item.eidolon.astype(np.float32).tobytes(),
        confidence=policy.standard_confidence.for_kind(Kind.AGGREGATE),
        quality=0.5,
        admission=admission_json(decision),
        aggregate_of=target_id,
    )
