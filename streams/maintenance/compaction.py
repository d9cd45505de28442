"""Compaction planning (docs/design.md §6): which old, rarely used memories fold into which
summaries. Pure: candidates, key degrees and the event time come in as values,
the plan goes out as a value, so replaying a maintenance command plans the same.

Clusters are key-centred: inside one day/week bucket the hottest eligible key
(summed candidate score x type weight) gathers its memories, highest score
first, up to a size and token cap; its members leave the pool and the next key
is chosen. Keys whose degree reaches `hub_degree` never centre a cluster: a
hub joins everything, so a cluster around it would be arbitrary, and the hub's
neighbour lists keep every source anyway (sources are never unlinked).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from grimoire.streams.maintenance.compaction_summary import (
    SummarySource,
    rolled_up_keys,
    rolled_up_tags,
    safe_type_weight,
    summary_id,
    summary_text,
)
from grimoire.streams.model.ids import stable_digest
from grimoire.streams.model.nexus_keys import DEFAULT_WEIGHTS, KeyWeights
from grimoire.streams.model.records import Kind
from grimoire.streams.recall.packing import estimate_tokens

logger = logging.getLogger(__name__)

DAY_MS: Final = 86_400_000
WINDOW_MS: Final = {"day": DAY_MS, "week": 7 * DAY_MS}
# Signals (docs/design.md §6 / seed triggers) under which compaction must not add deletes.
DEFAULT_PAUSE_TAGS: Final = ("ops/outbox-critical", "ops/pressure-discord-flood")
NEVER_COMPACTED: Final = frozenset({Kind.AGGREGATE.value})


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    min_age_ms: int = 7 * DAY_MS
    window: Literal["day", "week"] = "day"
    min_cluster_size: int = 3
    max_cluster_size: int = 24
    max_cluster_tokens: int = 2_000
    max_summary_tokens: int = 400
    hub_degree: int = 500
    max_rolled_keys: int = 32
    max_rolled_tags: int = 16
    # Score weights: per day of age, per (decayed) inclusion, for spam.
    age_weight: float = 1.0
    usage_weight: float = 2.0
    spam_weight: float = 3.0
    usage_decay_per_day: float = 0.95
    spam_quality: float = 0.3  # quality below this reads as spam/low value
    min_score: float = 0.0  # at or below it a memory is used too much to fold away
    # 0 compacts ordinary memories; n >= 1 folds level-n summaries (and only them)
    # into a level n+1 summary, so summaries never blur into one another by default.
    summary_level: int = 0
    key_weights: KeyWeights = DEFAULT_WEIGHTS
    pause_tags: tuple[str, ...] = DEFAULT_PAUSE_TAGS

    def __post_init__(self) -> None:
        if self.min_cluster_size < 2 or self.max_cluster_size < self.min_cluster_size:
            raise ValueError("need 2 <= min_cluster_size <= max_cluster_size")
        if self.max_rolled_keys < 1 or self.max_rolled_tags < len(("topic/gc", "src/system")):
            raise ValueError("rolled-up caps too small")
        if self.summary_level < 0 or self.min_age_ms < 0 or self.hub_degree < 1:
            raise ValueError("summary_level, min_age_ms must be >= 0 and hub_degree >= 1")

    @property
    def window_ms(self) -> int:
        return WINDOW_MS[self.window]


DEFAULT_COMPACTION_POLICY: Final = CompactionPolicy()


@dataclass(frozen=True, slots=True)
class CompactionBudget:
    """How much one maintenance pass may do."""

    max_clusters: int = 4
    max_sources: int = 200


DEFAULT_COMPACTION_BUDGET: Final = CompactionBudget()


@dataclass(frozen=True, slots=True)
class CompactionCandidate:
    """A stored memory as the planner sees it (usage counters already merged in)."""

    memory_id: str
    kind: str
    text: str
    ts_ms: int
    keys: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    quality: float = 0.5
    included_count_decay: float = 0.0
    last_accessed_ms: int | None = None
    summary_level: int = 0  # 1 for a summary of memories, n+1 for one of level-n summaries
    pinned: bool = False
    locked: bool = False
    deleted: bool = False
    archived: bool = False
    quarantined: bool = False
    off_topic: bool = False


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    summary_id: str
    centre_key: str
    bucket_start_ms: int
    ts_ms: int  # the newest source's event time: the summary sorts where its cluster ended
    source_ids: tuple[str, ...]
    summary_of: tuple[str, ...]  # the same ids when the sources are summaries, else ()
    summary_level: int
    token_estimate: int
    text: str
    tags: tuple[str, ...]
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    plan_id: str
    now_ms: int
    clusters: tuple[ClusterPlan, ...]

    @property
    def empty(self) -> bool:
        return not self.clusters


def paused(signals: Sequence[str], policy: CompactionPolicy = DEFAULT_COMPACTION_POLICY) -> bool:
    """True when the agent's field shows a pressure tag that must stop new deletes."""
    return any(tag.removeprefix("tag:") in policy.pause_tags for tag in signals)


def eligible(c: CompactionCandidate, now_ms: int, policy: CompactionPolicy) -> bool:
    if c.pinned or c.locked or c.deleted or c.archived or c.quarantined:
        return False
    if c.kind in NEVER_COMPACTED or now_ms - c.ts_ms < policy.min_age_ms:
        return False
    if policy.summary_level == 0:
        return c.kind != Kind.SUMMARY.value
    return c.kind == Kind.SUMMARY.value and c.summary_level == policy.summary_level


def decayed_usage(c: CompactionCandidate, now_ms: int, policy: CompactionPolicy) -> float:
    """`included_count_decay` x0.95 per whole day since the last inclusion, on read:
    whole days keep it free of float jitter between replays."""
    since = c.last_accessed_ms if c.last_accessed_ms is not None else c.ts_ms
    days = max(now_ms - since, 0) // DAY_MS
    return c.included_count_decay * policy.usage_decay_per_day**days


def candidate_score(c: CompactionCandidate, now_ms: int, policy: CompactionPolicy) -> float:
    """Higher = better to compact: old, rarely included, spammy or off-topic."""
    age_days = max(now_ms - c.ts_ms, 0) / DAY_MS
    spam = max(policy.spam_quality - c.quality, 0.0) / policy.spam_quality
    if c.off_topic:
        spam = max(spam, 0.5)
    return (
        policy.age_weight * age_days
        - policy.usage_weight * decayed_usage(c, now_ms, policy)
        + policy.spam_weight * spam
    )


def plan_compaction(
    candidates: Sequence[CompactionCandidate],
    degrees: Mapping[str, int],
    now_ms: int,
    policy: CompactionPolicy = DEFAULT_COMPACTION_POLICY,
    budget: CompactionBudget = DEFAULT_COMPACTION_BUDGET,
) -> CompactionPlan:
    scores = {
        c.memory_id: score
        for c in candidates
        if eligible(c, now_ms, policy)
        and (score := candidate_score(c, now_ms, policy)) > policy.min_score
    }
    pool = {c.memory_id: c for c in candidates if c.memory_id in scores}
    clusters: list[ClusterPlan] = []
    skipped: set[tuple[int, str]] = set()
    used_sources = 0
    while len(clusters) < budget.max_clusters:
        room = min(policy.max_cluster_size, budget.max_sources - used_sources)
        if room < policy.min_cluster_size:
            break
        chosen = _hottest(pool, scores, degrees, policy, skipped)
        if chosen is None:
            break
        bucket, key, members = chosen
        taken = _cap(members, scores, policy, room)
        if len(taken) < policy.min_cluster_size:
            skipped.add((bucket, key))  # too few of them fit the token cap together
            continue
        clusters.append(_cluster(taken, key, bucket, degrees, policy))
        used_sources += len(taken)
        for member in taken:
            del pool[member.memory_id]
    ids = sorted(c.summary_id for c in clusters)
    plan_id = stable_digest("compaction-plan", *ids).hex()[:24]
    return CompactionPlan(plan_id=plan_id, now_ms=now_ms, clusters=tuple(clusters))


def _hottest(
    pool: Mapping[str, CompactionCandidate],
    scores: Mapping[str, float],
    degrees: Mapping[str, int],
    policy: CompactionPolicy,
    skipped: set[tuple[int, str]],
) -> tuple[int, str, list[CompactionCandidate]] | None:
    """The (bucket, key) whose members carry the most score x key type weight."""
    groups: dict[tuple[int, str], list[CompactionCandidate]] = defaultdict(list)
    for c in pool.values():
        bucket = c.ts_ms - c.ts_ms % policy.window_ms
        for key in set(c.keys):
            if degrees.get(key, 0) < policy.hub_degree:
                groups[(bucket, key)].append(c)
    best: tuple[float, int, str] | None = None
    for (bucket, key), members in groups.items():
        if len(members) < policy.min_cluster_size or (bucket, key) in skipped:
            continue
        heat = sum(scores[m.memory_id] for m in members)
        heat *= safe_type_weight(key, policy.key_weights)
        rank = (-heat, bucket, key)
        if best is None or rank < best:
            best = rank
    if best is None:
        return None
    _, bucket, key = best
    return bucket, key, groups[(bucket, key)]


def _cap(
    members: Sequence[CompactionCandidate],
    scores: Mapping[str, float],
    policy: CompactionPolicy,
    room: int,
) -> list[CompactionCandidate]:
    """Highest-scoring members first, within the size and token caps."""
    ordered = sorted(members, key=lambda c: (-scores[c.memory_id], c.ts_ms, c.memory_id))
    taken: list[CompactionCandidate] = []
    tokens = 0
    for c in ordered:
        cost = estimate_tokens(c.text)
        if len(taken) >= room:
            break
        if tokens + cost > policy.max_cluster_tokens:
            continue
        taken.append(c)
        tokens += cost
    return taken


def _cluster(
    members: Sequence[CompactionCandidate],
    key: str,
    bucket: int,
    degrees: Mapping[str, int],
    policy: CompactionPolicy,
) -> ClusterPlan:
    ordered = sorted(members, key=lambda c: (c.ts_ms, c.memory_id))
    sources = [SummarySource(c.memory_id, c.text, c.ts_ms, c.keys, c.tags) for c in ordered]
    source_ids = tuple(sorted(c.memory_id for c in ordered))
    ts_ms = max(c.ts_ms for c in ordered)
    return ClusterPlan(
        summary_id=summary_id(source_ids, ts_ms),
        centre_key=key,
        bucket_start_ms=bucket,
        ts_ms=ts_ms,
        source_ids=source_ids,
        summary_of=source_ids if policy.summary_level > 0 else (),
        summary_level=policy.summary_level + 1,
        token_estimate=sum(estimate_tokens(c.text) for c in ordered),
        text=summary_text(
            sources, centre=key, bucket_start_ms=bucket, max_tokens=policy.max_summary_tokens
        ),
        tags=rolled_up_tags(sources, limit=policy.max_rolled_tags, weights=policy.key_weights),
        keys=rolled_up_keys(
            sources,
            degrees,
            centre=key,
            limit=policy.max_rolled_keys,
            weights=policy.key_weights,
        ),
    )
