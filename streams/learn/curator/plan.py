"""One curator cycle as a pure plan (docs/design.md §6 "Curator"): distil, vote, promote,
demote, prune, review quarantine.

Rules, in order:

1. DISTIL. New episodes are clustered by situation (`distill.py`). A cluster of
   at least `min_cluster` episodes with a majority verdict and no insight yet
   ADDs one at 0.5 whose polarity is that verdict ("works"/"fails"). For an
   insight or heuristic that exists, the cycle's episodes are evidence: more
   agreeing than disagreeing → one UPVOTE (+0.1), the reverse → one DOWNVOTE
   (-0.15); each vote starts from the decayed confidence and restarts the decay
   clock. When the disagreeing total outgrows the agreeing one the entry was
   wrong about the direction: it is EDITed to the opposite polarity.
2. PROMOTE / DEMOTE on effective confidence: insight or warning ≥ 0.6 → active,
   heuristic ≥ 0.7 → playbook; active/playbook < 0.4 → demoted.
3. DERIVE: an active insight with ≥ `heuristic_min_validated` supporting
   episodes and no heuristic gets one (0.5, proposed), never straight into the
   playbook: it must earn its own upvotes. A clade sibling's insight (provenance
   `clade`) never does, and a sibling's heuristic never enters the playbook: the
   agent's own runs must distil and validate its own.
4. PRUNE: effective confidence < 0.1 in 3 consecutive cycles → archived, except
   warnings, bloodstains and pinned entries.
5. QUARANTINE: more validations than contradictions → released; more
   contradictions, or older than `quarantine_max_age_ms` → archived, except
   what is pinned (or exempt), which waits for evidence.

A cycle looks at `entries` (rules 1-4): the ones due by its time, the ones its
episodes' situations name, and new ones (`schedule.py` says why the others
would come out unchanged). `context` entries are read, never changed: the
signature mates a vote or a derivation needs and the playbook's heuristics,
which PLAYBOOK.md lists. Passing every live entry as `entries` plans the cycle
that looks at everything, with the same decisions.

Nothing reads a clock: `now_ms` is the caller's event time, so replaying a
cycle plans the same operations.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from grimoire.streams.clade.copies import CLADE_PROVENANCE
from grimoire.streams.learn.curator.distill import (
    EpisodeCluster,
    EpisodeView,
    ExtractiveDistiller,
    Polarity,
    Situation,
    cluster_episodes,
)
from grimoire.streams.learn.curator.playbook import in_playbook
from grimoire.streams.learn.curator.schedule import (
    LOOK_NOW,
    effective,
    next_look_ms,
    signature_member,
)
from grimoire.streams.learn.curator.values import (
    CURATED_KINDS,
    DEFAULT_CURATOR_POLICY,
    CuratedEntry,
    CuratorOp,
    CuratorPlan,
    CuratorPolicy,
    CuratorReport,
    CuratorSchedule,
    EntryChange,
    EntryStatus,
    Operation,
    QuarantineAction,
    QuarantineDecision,
    QuarantinedView,
)
from grimoire.streams.model.ids import memory_id as make_memory_id
from grimoire.streams.model.records import Kind
from grimoire.streams.ports.learn import Distiller

logger = logging.getLogger(__name__)


def curated_id(agent_id: str, kind: Kind, signature: str, ts_ms: int) -> str:
    """Same agent, kind, situation and event time → same id, on every replay."""
    return make_memory_id(agent_id, f"curator/{kind.value}/{signature}", 0, ts_ms)


def heuristic_text(situation: Situation, polarity: Polarity) -> str:
    verb = "Prefer" if polarity is Polarity.WORKS else "Avoid"
    why = "it tends to work" if polarity is Polarity.WORKS else "it tends to fail"
    return f"{verb} {situation.describe()}: {why}."


def _flipped(polarity: Polarity) -> Polarity:
    return Polarity.FAILS if polarity is Polarity.WORKS else Polarity.WORKS


@dataclass(slots=True)
class _Cycle:
    """Mutable scratch state of one planning call; never escapes `plan_cycle`."""

    agent_id: str
    now_ms: int
    policy: CuratorPolicy
    distiller: Distiller
    entries: dict[str, CuratedEntry]
    new_ids: set[str]
    record_ids: set[str]
    text_ids: set[str]
    ops: list[Operation]
    looked: set[str]  # what the cycle decides on; the rest is context

    def log(self, op: CuratorOp, before: CuratedEntry, after: CuratedEntry) -> None:
        self.ops.append(
            Operation(op, after.memory_id, after.kind, before.confidence, after.confidence)
        )

    def by_signature(self, kind: Kind) -> dict[str, CuratedEntry]:
        return {
            e.signature: e
            for e in sorted(self.entries.values(), key=lambda e: e.memory_id)
            if e.kind is kind and e.signature and e.status is not EntryStatus.ARCHIVED
        }

    def sources(self, old: tuple[str, ...], new: tuple[str, ...]) -> tuple[str, ...]:
        merged = tuple(dict.fromkeys((*old, *new)))
        return merged[-self.policy.max_source_ids :]

    def add_insight(self, cluster: EpisodeCluster, polarity: Polarity) -> None:
        first = cluster.episodes[0]
        agree = cluster.successes if polarity is Polarity.WORKS else cluster.failures
        entry = CuratedEntry(
            memory_id=curated_id(self.agent_id, Kind.INSIGHT, cluster.signature, first.ts_ms),
            kind=Kind.INSIGHT,
            text=self.distiller.distil(cluster, polarity),
            confidence=self.policy.add_confidence,
            last_accessed_ms=self.now_ms,
            ts_ms=cluster.episodes[-1].ts_ms,
            signature=cluster.signature,
            situation=cluster.situation,
            polarity=polarity,
            validated_count=agree,
            contradicted_count=cluster.successes + cluster.failures - agree,
            source_ids=self.sources((), cluster.source_ids),
        )
        self._create(entry)

    def _create(self, entry: CuratedEntry) -> None:
        self.entries[entry.memory_id] = entry
        self.new_ids.add(entry.memory_id)
        self.record_ids.add(entry.memory_id)
        self.text_ids.add(entry.memory_id)
        self.ops.append(
            Operation(CuratorOp.ADD, entry.memory_id, entry.kind, 0.0, entry.confidence)
        )

    def vote(self, entry: CuratedEntry, cluster: EpisodeCluster) -> None:
        if entry.polarity is None:
            return
        works = entry.polarity is Polarity.WORKS
        agree = cluster.successes if works else cluster.failures
        disagree = cluster.failures if works else cluster.successes
        if agree == disagree == 0:
            return
        self.looked.add(entry.memory_id)
        base = effective(entry, self.now_ms, self.policy)
        delta = self.policy.upvote if agree > disagree else 0.0
        delta = -self.policy.downvote if disagree > agree else delta
        confidence = min(self.policy.max_confidence, max(self.policy.decay.floor, base + delta))
        after = replace(
            entry,
            confidence=round(confidence, 9),
            last_accessed_ms=max(entry.last_accessed_ms, self.now_ms),
            validated_count=entry.validated_count + agree,
            contradicted_count=entry.contradicted_count + disagree,
            source_ids=self.sources(entry.source_ids, cluster.source_ids),
        )
        if delta:
            self.log(CuratorOp.UPVOTE if delta > 0 else CuratorOp.DOWNVOTE, entry, after)
        if after.contradicted_count > after.validated_count:
            after = self._edit(after, cluster)
        self.entries[entry.memory_id] = after
        self.record_ids.add(entry.memory_id)

    def _edit(self, entry: CuratedEntry, cluster: EpisodeCluster) -> CuratedEntry:
        """Reconsolidation: the evidence says the opposite, so the entry says it."""
        assert entry.polarity is not None and entry.situation is not None
        polarity = _flipped(entry.polarity)
        if entry.kind is Kind.HEURISTIC:
            text = heuristic_text(entry.situation, polarity)
        else:
            text = self.distiller.distil(cluster, polarity)
        after = replace(
            entry,
            text=text,
            polarity=polarity,
            validated_count=entry.contradicted_count,
            contradicted_count=entry.validated_count,
        )
        self.text_ids.add(entry.memory_id)
        self.log(CuratorOp.EDIT, entry, after)
        return after

    def distil(self, episodes: Sequence[EpisodeView]) -> None:
        insights = self.by_signature(Kind.INSIGHT)
        heuristics = self.by_signature(Kind.HEURISTIC)
        for cluster in cluster_episodes(episodes, self.policy.top_keys):
            insight = insights.get(cluster.signature)
            if insight is None:
                majority = cluster.majority
                if len(cluster.episodes) >= self.policy.min_cluster and majority is not None:
                    self.add_insight(cluster, majority)
                continue
            self.vote(insight, cluster)
            heuristic = heuristics.get(cluster.signature)
            if heuristic is not None:
                self.vote(heuristic, cluster)

    def transition(self, entry: CuratedEntry) -> CuratedEntry:
        """Promotion, demotion and the low-confidence counter, on decayed confidence."""
        policy = self.policy
        level = effective(entry, self.now_ms, policy)
        after = entry
        if entry.kind is Kind.HEURISTIC:
            target, threshold = EntryStatus.PLAYBOOK, policy.promote_heuristic
        else:
            target, threshold = EntryStatus.ACTIVE, policy.promote_insight
        # A sibling's heuristic never enters this agent's playbook: inherited
        # knowledge is promoted only by the agent's own runs (seed 001).
        inherited = entry.kind is Kind.HEURISTIC and entry.provenance == CLADE_PROVENANCE
        if entry.status is not target and level >= threshold and not inherited:
            after = replace(after, status=target)
            self.log(CuratorOp.PROMOTE, entry, after)
        elif (
            entry.status in (EntryStatus.ACTIVE, EntryStatus.PLAYBOOK)
            and level < policy.demote_below
        ):
            after = replace(after, status=EntryStatus.DEMOTED)
            self.log(CuratorOp.DEMOTE, entry, after)
        low = entry.consecutive_low + 1 if level < policy.prune_below else 0
        after = replace(after, consecutive_low=low)
        if low >= policy.prune_after_cycles and not policy.exempt(entry) and not entry.pinned:
            after = replace(after, status=EntryStatus.ARCHIVED)
            self.record_ids.add(entry.memory_id)
            self.log(CuratorOp.ARCHIVE, entry, after)
        return after

    def derive(self) -> None:
        heuristics = self.by_signature(Kind.HEURISTIC)
        for insight in sorted(self.entries.values(), key=lambda e: e.memory_id):
            if (
                insight.kind is not Kind.INSIGHT
                or insight.provenance == CLADE_PROVENANCE  # a sibling's: validate locally
                or insight.status is not EntryStatus.ACTIVE
                or insight.situation is None
                or insight.polarity is None
                or insight.signature in heuristics
                or insight.validated_count < self.policy.heuristic_min_validated
            ):
                continue
            heuristic = CuratedEntry(
                memory_id=curated_id(self.agent_id, Kind.HEURISTIC, insight.signature, self.now_ms),
                kind=Kind.HEURISTIC,
                text=heuristic_text(insight.situation, insight.polarity),
                confidence=self.policy.add_confidence,
                last_accessed_ms=self.now_ms,
                ts_ms=self.now_ms,
                signature=insight.signature,
                situation=insight.situation,
                polarity=insight.polarity,
                source_ids=(insight.memory_id,),
            )
            self._create(heuristic)
            heuristics[insight.signature] = heuristic


def review_quarantine(
    quarantined: Sequence[QuarantinedView], now_ms: int, policy: CuratorPolicy
) -> list[QuarantineDecision]:
    decisions = []
    for view in sorted(quarantined, key=lambda v: v.memory_id):
        exempt = view.kind in policy.exempt_kinds or view.provenance in policy.exempt_provenances
        if view.validated_count > view.contradicted_count:
            decisions.append(QuarantineDecision(view.memory_id, QuarantineAction.RELEASE))
        elif exempt or view.pinned:
            continue  # safety knowledge, or a pin, waits for evidence rather than being dropped
        elif (
            view.contradicted_count > view.validated_count
            or now_ms - view.ts_ms >= policy.quarantine_max_age_ms
        ):
            decisions.append(QuarantineDecision(view.memory_id, QuarantineAction.ARCHIVE))
    return decisions


def plan_cycle(
    agent_id: str,
    cycle: int,
    now_ms: int,
    episodes: Sequence[EpisodeView],
    entries: Sequence[CuratedEntry],
    quarantined: Sequence[QuarantinedView] = (),
    *,
    context: Sequence[CuratedEntry] = (),
    watermark_ms: int = 0,
    policy: CuratorPolicy = DEFAULT_CURATOR_POLICY,
    distiller: Distiller | None = None,
) -> CuratorPlan:
    """Everything one curator cycle changes, as data; the store applies it."""
    looked = {e.memory_id: e for e in entries if e.status is not EntryStatus.ARCHIVED}
    live = {e.memory_id: e for e in context if e.status is not EntryStatus.ARCHIVED}
    if overlap := sorted(set(live) & set(looked)):
        raise ValueError(f"entries {overlap} passed both as looked at and as context")
    live.update(looked)
    work = _Cycle(
        agent_id, now_ms, policy, distiller or ExtractiveDistiller(), dict(live),
        set(), set(), set(), [], set(looked),
    )  # fmt: skip
    before = [e.confidence for e in looked.values()]
    after_decay = [effective(e, now_ms, policy) for e in looked.values()]
    work.distil(episodes)
    for memory_id in sorted(work.looked | work.new_ids):
        work.entries[memory_id] = work.transition(work.entries[memory_id])
    work.derive()
    quarantine = review_quarantine(quarantined, now_ms, policy)

    changes = []
    for memory_id in sorted(work.entries):
        entry = work.entries[memory_id]
        if memory_id in work.new_ids or entry != live.get(memory_id):
            changes.append(
                EntryChange(
                    entry,
                    new=memory_id in work.new_ids,
                    record_changed=memory_id in work.record_ids,
                    text_changed=memory_id in work.text_ids,
                )
            )
    counts = {op: sum(1 for o in work.ops if o.op is op) for op in CuratorOp}
    archived_q = sum(1 for d in quarantine if d.action is QuarantineAction.ARCHIVE)
    report = CuratorReport(
        agent_id=agent_id,
        cycle=cycle,
        now_ms=now_ms,
        pruned=counts[CuratorOp.ARCHIVE] + archived_q,
        promoted=counts[CuratorOp.PROMOTE],
        proposed=counts[CuratorOp.ADD],
        demoted=counts[CuratorOp.DEMOTE],
        upvoted=counts[CuratorOp.UPVOTE],
        downvoted=counts[CuratorOp.DOWNVOTE],
        edited=counts[CuratorOp.EDIT],
        released=len(quarantine) - archived_q,
        episodes_seen=len(episodes),
        entries_seen=len(work.looked | work.new_ids),
        entries_decayed=sum(1 for b, a in zip(before, after_decay, strict=True) if a < b),
        avg_confidence_before=sum(before) / len(before) if before else 0.0,
        avg_confidence_after=sum(after_decay) / len(after_decay) if after_decay else 0.0,
    )
    newest = max((ep.ts_ms for ep in episodes), default=watermark_ms)
    logger.debug("curator cycle %d for %s: %s", cycle, agent_id, report)
    return CuratorPlan(
        changes=tuple(changes),
        quarantine=tuple(quarantine),
        operations=tuple(work.ops),
        report=report,
        watermark_ms=max(watermark_ms, newest),
        schedule=_schedule(work, quarantined, quarantine),
    )


def _schedule(
    work: _Cycle,
    quarantined: Sequence[QuarantinedView],
    decisions: Sequence[QuarantineDecision],
) -> CuratorSchedule:
    """The indexes after the cycle, for every entry it looked at or created (the
    context's stay as they are)."""
    due: list[tuple[str, int]] = []
    dropped: list[str] = []
    signed: list[str] = []
    unsigned: list[str] = []
    playbook: list[str] = []
    unplaybook: list[str] = []
    for memory_id in sorted(work.looked | work.new_ids):
        entry = work.entries[memory_id]
        member = signature_member(entry)
        (playbook if in_playbook(entry) else unplaybook).append(memory_id)
        if entry.status is EntryStatus.ARCHIVED:
            dropped.append(memory_id)
            if member is not None:
                unsigned.append(member)
            continue
        due.append((memory_id, next_look_ms(entry, work.now_ms, work.policy)))
        if member is not None:  # idempotent: a seeding cycle indexes what it finds
            signed.append(member)
    # A released curated entry is live again: the next cycle looks at it.
    curated = {view.memory_id for view in quarantined if view.kind in CURATED_KINDS}
    for decision in decisions:
        if decision.action is QuarantineAction.RELEASE and decision.memory_id in curated:
            due.append((decision.memory_id, LOOK_NOW))
    return CuratorSchedule(
        due=tuple(due),
        dropped=tuple(dropped),
        signed=tuple(signed),
        unsigned=tuple(unsigned),
        playbook=tuple(playbook),
        unplaybook=tuple(unplaybook),
    )
