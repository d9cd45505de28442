"""The retraction cascade as a pure plan (docs/design.md §10 "Retraction").

Retracting a source (an input event, or a memory) retracts what was derived from
it. What derives from what is the derivation index, a set of edges
`derived ← source (role, weight)` that every writer keeps beside what it writes:

  record     a memory ← the input event it was written from
  fold       an aggregate ← an input event folded into it (one share of `count`)
  origin     an aggregate ← the memory its group started from (one share of `count`)
  reinforce  a memory ← an input event that reinforced it (one share of `reinforced_count`)
  compacted  a compaction summary ← a memory it replaced
  evidence   a curated entry ← an episode it was distilled from (or, for a
             heuristic, the insight it was derived from)

Every role but `reinforce` sustains the derived memory: it exists because of its
sources, and a memory left without any is retracted. `reinforce` is a share of a
counter only: losing it lowers the counter, never the memory, and a memory
reinforced by nothing but retracted events stands on its own sources as before.
What a reinforcement wrote is `reinforced_count` + 1 and `last_seen` moved up to
its event time. The edge's weight counts the reinforcements by its event, one
each, so exactly their share of the counter is taken back. `last_seen` is a
maximum over every event that touched the memory and the index keeps no times,
so the value before cannot be told: it stays (an event time that no ranking,
decay or decision reads). A reinforcement never touches `strength` (outcomes do).

An aggregate shows the text, keys, tags and time of its seed: the fold that
created it, whose event its hash names (`DerivedNode.source_event_id`). While
the seed's fold stands, that event is what its text stands on; once the seed is
retracted the text is re-derived from its origin (the group's original memory,
the only member whose text is stored: folded events keep none), and from then
on the origin is what it stands on. When the member its text stands on is lost
and no readable member is left, the aggregate is retracted whatever shares it
keeps: those shares have no text of their own to show. An aggregate read
without its seed's event cannot tell which fold gave its text and keeps it.

The planner walks the affected memories in dependency order (a memory after
every affected memory it derives from; ties by id), so each decision sees the
fate of all its sources, and decides per memory:

  retract   no sustaining source is left: `retracted` + `deleted`, out of the
            nexus index, the walk's node table and the term counts; it is itself
            a lost source for what derives from it (recursively)
  reduce    an aggregate keeps some shares: `count` less the lost shares
  rebuild   a summary keeps sources: text, keys, tags, time and `source_ids`
            re-derived from the sources left with the compaction functions
            (`compaction_summary`); a summary of it is rebuilt in turn.
            An aggregate whose text stood on a lost member: text, keys, tags
            and time taken from the member left, `source_ids` naming it (see
            above)
  demote    a curated entry keeps some evidence: see `demoted`
  (reinforcement) a lost `reinforce` share lowers `reinforced_count`

Nothing reads a clock or the store: the graph, the affected memories and the key
degrees come in as values, so the same inputs plan the same steps in the same
order on every replay.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Final

from grimoire.streams.learn.curator.values import (
    CURATED_KINDS,
    DEFAULT_CURATOR_POLICY,
    CuratedEntry,
    CuratorPolicy,
    EntryStatus,
)
from grimoire.streams.maintenance.compaction import DEFAULT_COMPACTION_POLICY, CompactionPolicy
from grimoire.streams.maintenance.compaction_summary import (
    SummarySource,
    rolled_up_keys,
    rolled_up_tags,
    summary_text,
)
from grimoire.streams.model.records import Kind

__all__ = [
    "DEFAULT_RETRACTION_POLICY",
    "SHARE_ROLES",
    "SUSTAINING_ROLES",
    "DerivationRole",
    "DerivationView",
    "DerivedNode",
    "Edge",
    "RebuiltSummary",
    "RetractionOp",
    "RetractionPlan",
    "RetractionPolicy",
    "Step",
    "SummaryShape",
    "demoted",
    "plan_retraction",
]

logger = logging.getLogger(__name__)

_CURATED: Final = frozenset(kind.value for kind in CURATED_KINDS)


class DerivationRole(StrEnum):
    """Why a derived memory depends on a source (see the module docstring)."""

    RECORD = "record"
    FOLD = "fold"
    ORIGIN = "origin"
    REINFORCE = "reinforce"
    COMPACTED = "compacted"
    EVIDENCE = "evidence"


SUSTAINING_ROLES: Final = frozenset(
    {
        DerivationRole.RECORD,
        DerivationRole.FOLD,
        DerivationRole.ORIGIN,
        DerivationRole.COMPACTED,
        DerivationRole.EVIDENCE,
    }
)
# Roles whose weight counts shares (a writer adds to it); the others are set-like.
SHARE_ROLES: Final = frozenset({DerivationRole.FOLD, DerivationRole.REINFORCE})


@dataclass(frozen=True, slots=True, order=True)
class Edge:
    """`derived_id` derives from `source_id` (an input event id or a memory id)."""

    derived_id: str
    source_id: str
    role: DerivationRole
    weight: int = 1


@dataclass(frozen=True, slots=True)
class SummaryShape:
    """What a compaction summary was built around: its cluster's centre key and
    time bucket (`cluster_id` = centre@bucket), and its level."""

    centre_key: str
    bucket_start_ms: int
    level: int = 1


@dataclass(frozen=True, slots=True)
class DerivedNode:
    """A stored memory as the planner sees it.

    `content` is what a summary keeps of it as a source; `summary` is set for a
    compaction summary, `entry` for a curated entry (with its bookkeeping).
    `source_event_id` is the input event its hash names: for an aggregate, its
    seed's (empty when the store did not read it)."""

    memory_id: str
    kind: str
    retracted: bool = False
    count: int = 0
    reinforced_count: int = 0
    content: SummarySource | None = None
    summary: SummaryShape | None = None
    entry: CuratedEntry | None = None
    source_event_id: str = ""


@dataclass(frozen=True, slots=True)
class DerivationView:
    """The part of the derivation graph a retraction touches.

    `edges`: every edge out of the retracted source and out of each memory that
    (transitively) derives from it, and every edge into those memories.
    `nodes`: those memories (and the sources their summaries keep) by id; an id
    without a node is an input event, or a memory that is gone.
    `degrees`: nexus-key degrees, for the keys a rebuilt summary rolls up."""

    edges: tuple[Edge, ...]
    nodes: Mapping[str, DerivedNode]
    degrees: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RetractionPolicy:
    compaction: CompactionPolicy = DEFAULT_COMPACTION_POLICY
    curator: CuratorPolicy = DEFAULT_CURATOR_POLICY


DEFAULT_RETRACTION_POLICY: Final = RetractionPolicy()


class RetractionOp(StrEnum):
    """A step's operation, as the witness records it. `REBUILD` re-derives a
    summary or an aggregate (the step's `kind` says which); its value predates
    aggregates and stays, as witnessed records and the stores key on it."""

    RETRACT = "retract.memory"
    REDUCE = "retract.aggregate_share"
    REBUILD = "retract.summary_rebuilt"
    DEMOTE = "retract.insight_demoted"
    UNREINFORCE = "retract.reinforcement"


@dataclass(frozen=True, slots=True)
class RebuiltSummary:
    text: str
    ts_ms: int
    keys: tuple[str, ...]
    tags: tuple[str, ...]
    source_ids: tuple[str, ...]
    summary_of: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Step:
    """One change to one memory.

    `lost`/`kept`: its sustaining sources lost in this retraction and left.
    `count` (reduce) and `reinforced_count` (reinforcement) are the values after;
    `summary` is the rebuilt summary; `entry` the curated entry after (demote) or
    before (retract of a curated entry). `uncount_terms`: the memory was counted
    in the agent's term counts (written by the ingest path), so a retraction
    takes it out of them."""

    op: RetractionOp
    memory_id: str
    kind: str
    lost: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    count: int | None = None
    reinforced_count: int | None = None
    summary: RebuiltSummary | None = None
    entry: CuratedEntry | None = None
    uncount_terms: bool = False

    @property
    def curated(self) -> bool:
        return self.kind in _CURATED

    def details(self) -> dict[str, object]:
        """What the witness records of the step (ids and values, no text)."""
        found: dict[str, object] = {
            "kind": self.kind,
            "lost": list(self.lost),
            "kept": list(self.kept),
        }
        if self.count is not None:
            found["count"] = self.count
        if self.reinforced_count is not None:
            found["reinforced_count"] = self.reinforced_count
        if self.summary is not None:
            found["source_ids"] = list(self.summary.source_ids)
            found["ts"] = self.summary.ts_ms
        if self.op is RetractionOp.DEMOTE and self.entry is not None:
            found["confidence"] = self.entry.confidence
            found["status"] = self.entry.status.value
        return found


@dataclass(frozen=True, slots=True)
class RetractionPlan:
    source_id: str
    steps: tuple[Step, ...]
    dropped: tuple[Edge, ...]  # edges that no longer hold, sorted

    @property
    def empty(self) -> bool:
        return not self.steps and not self.dropped

    @property
    def curated_changed(self) -> bool:
        """A curated entry was demoted or retracted: PLAYBOOK.md is regenerated."""
        return any(
            step.curated and step.op in (RetractionOp.RETRACT, RetractionOp.DEMOTE)
            for step in self.steps
        )

    def of(self, op: RetractionOp) -> tuple[Step, ...]:
        return tuple(step for step in self.steps if step.op is op)


def demoted(
    entry: CuratedEntry,
    kept_weight: int,
    total_weight: int,
    gone: Iterable[str],
    policy: CuratorPolicy = DEFAULT_CURATOR_POLICY,
) -> CuratedEntry:
    """A curated entry that lost part of its evidence.

    Confidence scales with the evidence left: `confidence x kept / total` (the
    evidence edges' weights before the retraction), never below the decay floor.
    An entry whose status rests on its confidence (active insight or warning,
    playbook heuristic) is demoted when the lowered confidence is under its
    kind's promotion threshold: it must earn the status again. The lost ids
    leave `source_ids`, so a later curator cycle cannot restore their edges."""
    if total_weight <= 0:
        return entry
    gone_ids = set(gone)
    scaled = entry.confidence * kept_weight / total_weight
    confidence = round(min(entry.confidence, max(policy.decay.floor, scaled)), 9)
    threshold = policy.promote_heuristic if entry.kind is Kind.HEURISTIC else policy.promote_insight
    status = entry.status
    if status in (EntryStatus.ACTIVE, EntryStatus.PLAYBOOK) and confidence < threshold:
        status = EntryStatus.DEMOTED
    return replace(
        entry,
        confidence=confidence,
        status=status,
        source_ids=tuple(i for i in entry.source_ids if i not in gone_ids),
    )


def _affected(source_id: str, outgoing: Mapping[str, Sequence[Edge]]) -> set[str]:
    """Every id reachable from the source along derivation edges."""
    seen: set[str] = set()
    frontier = [source_id]
    while frontier:
        following = []
        for current in frontier:
            for edge in outgoing.get(current, ()):
                if edge.derived_id not in seen and edge.derived_id != source_id:
                    seen.add(edge.derived_id)
                    following.append(edge.derived_id)
        frontier = sorted(following)
    return seen


def _dependency_order(affected: set[str], incoming: Mapping[str, Sequence[Edge]]) -> list[str]:
    """Affected ids, each after every affected id it derives from; ties by id.
    The index is acyclic (a memory derives only from what existed before it);
    should a cycle appear anyway, its members follow in id order."""
    waiting = {
        node: {e.source_id for e in incoming.get(node, ()) if e.source_id in affected} - {node}
        for node in affected
    }
    users: dict[str, set[str]] = {}
    for node, sources in waiting.items():
        for source in sources:
            users.setdefault(source, set()).add(node)
    ready = [node for node, sources in waiting.items() if not sources]
    heapq.heapify(ready)
    order: list[str] = []
    placed: set[str] = set()
    while len(order) < len(affected):
        if not ready:  # a cycle: release its smallest member
            heapq.heappush(ready, min(node for node in affected if node not in placed))
        node = heapq.heappop(ready)
        if node in placed:
            continue
        placed.add(node)
        order.append(node)
        for user in sorted(users.get(node, ())):
            waiting[user].discard(node)
            if not waiting[user] and user not in placed:
                heapq.heappush(ready, user)
    return order


@dataclass(slots=True)
class _Cascade:
    """Mutable scratch state of one planning call; never escapes `plan_retraction`."""

    view: DerivationView
    policy: RetractionPolicy
    incoming: dict[str, list[Edge]]
    gone: set[str]
    rebuilt: dict[str, SummarySource] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    dropped: set[Edge] = field(default_factory=set)

    def decide(self, memory_id: str) -> None:
        edges = self.incoming.get(memory_id, [])
        sustaining = [e for e in edges if e.role in SUSTAINING_ROLES]
        lost = [e for e in sustaining if e.source_id in self.gone]
        kept = [e for e in sustaining if e.source_id not in self.gone]
        reinforcements = [
            e for e in edges if e.role is DerivationRole.REINFORCE and e.source_id in self.gone
        ]
        changed = [e for e in kept if e.source_id in self.rebuilt]
        self.dropped.update(e for e in edges if e.source_id in self.gone)
        node = self.view.nodes.get(memory_id)
        if node is None or node.retracted:
            # Gone already (or never stored): nothing to change, and whatever
            # derives from it has lost it as a source.
            self.gone.add(memory_id)
            self.dropped.update(edges)
            return
        if lost and not kept:
            self._retract(node, lost, edges)
            return
        if (lost or changed) and not self._keep(node, lost, kept, changed):
            return  # retracted after all: its counters go with it
        if reinforcements:
            weight = sum(e.weight for e in reinforcements)
            self.steps.append(
                Step(
                    RetractionOp.UNREINFORCE,
                    memory_id,
                    node.kind,
                    lost=_ids(reinforcements),
                    reinforced_count=max(0, node.reinforced_count - weight),
                )
            )

    def _retract(self, node: DerivedNode, lost: Sequence[Edge], edges: Sequence[Edge]) -> None:
        self.gone.add(node.memory_id)
        self.dropped.update(edges)
        self.steps.append(
            Step(
                RetractionOp.RETRACT,
                node.memory_id,
                node.kind,
                lost=_ids(lost),
                entry=node.entry,
                uncount_terms=any(e.role is DerivationRole.RECORD for e in lost),
            )
        )

    def _keep(
        self,
        node: DerivedNode,
        lost: Sequence[Edge],
        kept: Sequence[Edge],
        changed: Sequence[Edge],
    ) -> bool:
        """A memory that keeps some sources: what it keeps depends on its kind.
        False when it is retracted after all (nothing readable is left of it)."""
        lost_ids, kept_ids = _ids(lost), _ids(kept)
        if node.summary is not None and node.kind == Kind.SUMMARY.value:
            summary = self._rebuilt(node, node.summary, kept)
            if summary is None:  # none of the sources left is readable
                self._retract(node, lost, self.incoming.get(node.memory_id, []))
                return False
            self._rebuild(node, summary, lost_ids, kept_ids)
        elif node.kind == Kind.AGGREGATE.value:
            return self._aggregate(node, lost, kept)
        elif not lost:
            return True  # only a source's content changed: nothing else to redo
        elif node.entry is not None and node.kind in _CURATED:
            total = sum(e.weight for e in (*lost, *kept))
            entry = demoted(
                node.entry,
                sum(e.weight for e in kept),
                total,
                self.gone,
                self.policy.curator,
            )
            self.steps.append(
                Step(
                    RetractionOp.DEMOTE, node.memory_id, node.kind, lost_ids, kept_ids, entry=entry
                )
            )
        # Any other memory that keeps a sustaining source stands as it is.
        return True

    def _rebuild(
        self,
        node: DerivedNode,
        rebuilt: RebuiltSummary,
        lost_ids: tuple[str, ...],
        kept_ids: tuple[str, ...],
    ) -> None:
        self.steps.append(
            Step(
                RetractionOp.REBUILD, node.memory_id, node.kind, lost_ids, kept_ids, summary=rebuilt
            )
        )
        # What derives from it (a summary of it) reads its new content.
        self.rebuilt[node.memory_id] = SummarySource(
            node.memory_id, rebuilt.text, rebuilt.ts_ms, rebuilt.keys, rebuilt.tags
        )

    def _aggregate(self, node: DerivedNode, lost: Sequence[Edge], kept: Sequence[Edge]) -> bool:
        """An aggregate that keeps some shares: `count` less the lost ones, and its
        text re-derived when the member it stands on is lost or was rebuilt
        (see the module docstring); retracted when no readable member is left
        to take it from. False when retracted."""
        lost_ids, kept_ids = _ids(lost), _ids(kept)
        shown = self._shown_member(node)
        if shown is not None and shown in lost_ids:
            member = self._readable_member(kept)
            if member is None:
                self._retract(node, lost, self.incoming.get(node.memory_id, []))
                return False
        elif shown is not None and shown in self.rebuilt:
            member = self.rebuilt[shown]
        else:
            member = None
        if lost:
            shares = sum(e.weight for e in lost)
            count = max(node.count - shares, sum(e.weight for e in kept), 1)
            self.steps.append(
                Step(
                    RetractionOp.REDUCE, node.memory_id, node.kind, lost_ids, kept_ids, count=count
                )
            )
        if member is not None:
            rebuilt = RebuiltSummary(
                text=member.text,
                ts_ms=member.ts_ms,
                keys=member.keys,
                tags=member.tags,
                source_ids=(member.memory_id,),
                summary_of=(),
            )
            self._rebuild(node, rebuilt, lost_ids, kept_ids)
        return True

    def _shown_member(self, node: DerivedNode) -> str | None:
        """The member an aggregate's text stands on: its seed's event while the
        seed's fold stands, else its origin (a retraction re-derived the text
        from it); None when the seed is not known or no origin is left."""
        seed = node.source_event_id
        if not seed:
            return None
        edges = self.incoming.get(node.memory_id, [])
        if any(e.role is DerivationRole.FOLD and e.source_id == seed for e in edges):
            return seed
        origins = sorted(e.source_id for e in edges if e.role is DerivationRole.ORIGIN)
        return origins[0] if origins else None

    def _readable_member(self, kept: Sequence[Edge]) -> SummarySource | None:
        """The earliest kept member whose text is stored (folded events keep none)."""
        found = []
        for edge in kept:
            content = self.rebuilt.get(edge.source_id)
            if content is None:
                source = self.view.nodes.get(edge.source_id)
                if source is not None and not source.retracted:
                    content = source.content
            if content is not None:
                found.append(content)
        return min(found, key=lambda c: (c.ts_ms, c.memory_id), default=None)

    def _rebuilt(
        self, node: DerivedNode, shape: SummaryShape, kept: Sequence[Edge]
    ) -> RebuiltSummary | None:
        sources = []
        for edge in kept:
            if edge.role is not DerivationRole.COMPACTED:
                continue
            content = self.rebuilt.get(edge.source_id)
            if content is None:
                source = self.view.nodes.get(edge.source_id)
                content = source.content if source is not None else None
            if content is not None:
                sources.append(content)
        if not sources:
            return None
        sources.sort(key=lambda s: (s.ts_ms, s.memory_id))
        compaction = self.policy.compaction
        source_ids = tuple(sorted({s.memory_id for s in sources}))
        return RebuiltSummary(
            text=summary_text(
                sources,
                centre=shape.centre_key,
                bucket_start_ms=shape.bucket_start_ms,
                max_tokens=compaction.max_summary_tokens,
            ),
            ts_ms=max(s.ts_ms for s in sources),
            keys=rolled_up_keys(
                sources,
                self.view.degrees,
                centre=shape.centre_key,
                limit=compaction.max_rolled_keys,
                weights=compaction.key_weights,
            ),
            tags=rolled_up_tags(
                sources, limit=compaction.max_rolled_tags, weights=compaction.key_weights
            ),
            source_ids=source_ids,
            summary_of=source_ids if shape.level > 1 else (),
        )


def _ids(edges: Iterable[Edge]) -> tuple[str, ...]:
    return tuple(sorted({e.source_id for e in edges}))


def plan_retraction(
    source_id: str,
    view: DerivationView,
    policy: RetractionPolicy = DEFAULT_RETRACTION_POLICY,
) -> RetractionPlan:
    """Everything retracting `source_id` changes, as data; the store applies it.

    When the source is itself a live memory in `view.nodes`, it is retracted
    first (a memory named as the source of a retraction)."""
    outgoing: dict[str, list[Edge]] = {}
    incoming: dict[str, list[Edge]] = {}
    for edge in sorted(set(view.edges)):
        outgoing.setdefault(edge.source_id, []).append(edge)
        incoming.setdefault(edge.derived_id, []).append(edge)
    cascade = _Cascade(view, policy, incoming, gone={source_id})
    root = view.nodes.get(source_id)
    if root is not None and not root.retracted:
        cascade.dropped.update(incoming.get(source_id, []))
        cascade.steps.append(
            Step(
                RetractionOp.RETRACT,
                source_id,
                root.kind,
                entry=root.entry,
                uncount_terms=any(
                    e.role is DerivationRole.RECORD for e in incoming.get(source_id, [])
                ),
            )
        )
    for memory_id in _dependency_order(_affected(source_id, outgoing), incoming):
        cascade.decide(memory_id)
    plan = RetractionPlan(source_id, tuple(cascade.steps), tuple(sorted(cascade.dropped)))
    logger.debug("retraction of %s: %d steps", source_id, len(plan.steps))
    return plan
