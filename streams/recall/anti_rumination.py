"""Anti-rumination (docs/design.md §5 step 3): once every `every_ticks` ticks, a recall
carries memories of the opposite emotional valence to the agent's mood.

Mood-congruent recall feeds itself: an anxious agent recalls anxious memories,
which keep it anxious. So the first recall in each window of `every_ticks` ticks
(the agent's latest ingested tick, never the wall clock) must include up to
`items` memories whose pleasure has the other sign: confident moments for an
anxious agent, warnings and losses for an elated one. Which window was last
served is per-agent state, so the same request on the same state gets the same
answer, and a replay of the log serves the same windows.

Contrarian memories come from what the recall found relevant (the scored pool,
best first), then from the fused lanes and walk beyond it (in fused order, at
most `scan` ids), so they still concern the query. A mood or a memory counts as
having a valence when |pleasure| >= `min_valence`; an agent without one has
nothing to ruminate on and gets no injection.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from grimoire.streams.model.field_state import Affect
from grimoire.streams.ports.recall import RecallSource
from grimoire.streams.recall.fusion import FusedHit
from grimoire.streams.recall.options import ProvenanceFilters
from grimoire.streams.recall.pool import Pooled, joined, resolved_records
from grimoire.streams.recall.ports import RecallRecord
from grimoire.streams.recall.relevance import Relevance
from grimoire.streams.recall.rerank import Candidate, Scored

CONTRARIAN_REASON = "anti-rumination"


@dataclass(frozen=True, slots=True)
class ContrarianPolicy:
    every_ticks: int = 100
    items: int = 1
    min_valence: float = 0.2
    scan: int = 200

    def __post_init__(self) -> None:
        for name in ("every_ticks", "items", "scan"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.min_valence <= 1.0:
            raise ValueError(f"min_valence must be in [0, 1], got {self.min_valence}")


DEFAULT_CONTRARIAN_POLICY = ContrarianPolicy()


def window_of(tick: int | None, mood: Affect | None, policy: ContrarianPolicy) -> int | None:
    """The tick window this recall belongs to, or None when it gets no injection
    (no tick, no valence in the mood, or the policy switched off)."""
    if policy.every_ticks == 0 or policy.items == 0 or tick is None or mood is None:
        return None
    if abs(mood.pleasure) < policy.min_valence:
        return None
    return tick // policy.every_ticks


def is_due(window: int | None, last_served: int | None) -> bool:
    """Whether `window` has not been served yet (windows only move forward)."""
    return window is not None and (last_served is None or window > last_served)


def opposes(affect: Affect | None, mood: Affect, min_valence: float) -> bool:
    """A memory whose valence has the other sign to the mood's."""
    if affect is None or abs(affect.pleasure) < min_valence or abs(mood.pleasure) < min_valence:
        return False
    return (affect.pleasure > 0.0) != (mood.pleasure > 0.0)


def ranked_pool(
    members: Mapping[str, Pooled],
    relevance: Mapping[str, Relevance],
    mood: Affect,
    min_valence: float,
) -> list[str]:
    """The pooled memories of opposite valence, most relevant first (ties by id)."""
    found = [i for i, p in members.items() if opposes(p.record.affect, mood, min_valence)]
    return sorted(found, key=lambda i: (-relevance[i].total if i in relevance else 0.0, i))


async def beyond_pool(
    source: RecallSource,
    fused: Sequence[FusedHit],
    seen: Iterable[str],
    filters: ProvenanceFilters,
    mood: Affect,
    policy: ContrarianPolicy,
    wanted: int,
    hashes_taken: frozenset[str] = frozenset(),
) -> dict[str, Pooled]:
    """Up to `wanted` memories of opposite valence from the fused list past the
    pool, in fused order, looking at no more than `policy.scan` ids; copies of a
    text in `hashes_taken` are passed over."""
    if wanted <= 0 or policy.scan == 0:
        return {}
    taken = set(seen)
    hits = [hit for hit in fused if hit.id not in taken][: policy.scan]
    records = await resolved_records(source, [hit.id for hit in hits])
    found: dict[str, Pooled] = {}
    for hit in hits:
        record = records.get(hit.id)
        if record is None or not _eligible(record, filters) or record.memory_id in taken:
            continue
        if record.memory_id in found or not opposes(record.affect, mood, policy.min_valence):
            continue
        if record.normalized_hash and record.normalized_hash in hashes_taken:
            continue
        found[record.memory_id] = joined(record, hit, None)
        if len(found) >= wanted:
            break
    return found


def _eligible(record: RecallRecord, filters: ProvenanceFilters) -> bool:
    return record.live and record.admitted_by(filters)


async def contrarian_candidates(
    source: RecallSource,
    filters: ProvenanceFilters,
    mood: Affect,
    contrarian: ContrarianPolicy,
    fused: Sequence[FusedHit],
    members: Mapping[str, Pooled],
    relevance: Mapping[str, Relevance],
    candidates: Sequence[Candidate],
) -> tuple[dict[str, Pooled], list[str]]:
    """Memories that may be injected against the mood, in order of preference,
    and the members with those found past the pool added. A copy of a
    shortlisted text is left out: it would take the shortlisted one's place."""
    shortlisted = {c.memory_id for c in candidates}
    hashes = frozenset(c.normalized_hash for c in candidates if c.normalized_hash)

    def usable(pooled: Pooled) -> bool:
        record = pooled.record
        return record.memory_id in shortlisted or record.normalized_hash not in hashes

    found = [
        i
        for i in ranked_pool(members, relevance, mood, contrarian.min_valence)
        if usable(members[i])
    ]
    extra = await beyond_pool(
        source,
        fused,
        members,
        filters,
        mood,
        contrarian,
        wanted=contrarian.items - min(len(found), contrarian.items),
        hashes_taken=hashes,
    )
    everyone = {**members, **extra}
    usable_ids = [*found, *extra]
    return everyone, usable_ids


def inject(
    diverse: Sequence[Scored],
    scored: Sequence[Scored],
    against: Sequence[str],
    mood: Affect,
    contrarian: ContrarianPolicy,
    max_items: int,
) -> tuple[list[Scored], tuple[str, ...]]:
    """The answer with up to `contrarian.items` memories of opposite valence, and
    the ids injected: those it holds on their merit count towards the quota,
    the rest replace its tail (never its top item)."""
    held = [
        s.memory_id for s in diverse if opposes(s.candidate.affect, mood, contrarian.min_valence)
    ]
    by_id = {s.memory_id: s for s in scored}
    chosen = {s.memory_id for s in diverse}
    picks = [by_id[i] for i in against if i in by_id and i not in chosen]
    picks = picks[: max(0, contrarian.items - len(held))]
    keep = list(diverse[: max(1, max_items - len(picks))])
    picks = picks[: max(0, max_items - len(keep))]
    return keep + picks, tuple(p.memory_id for p in picks)
