"""Evidence first (docs/learning.md): when a query matches a situation the agent
has evidence about, that situation's evidence entries lead the reply, the action
most likely to work first.

A query matches a situation when one of its evidence entries is among the rerank
candidates and is about as relevant to the query as the best candidate
(`match_ratio` of its relevance): relevance, not the priors, decides whether the
query is about the situation. The first such entry in rank order names the
situation; its entries among the candidates are then ordered by their decision
score (`grimoire.streams.learn.evidence.decision_score`: the posterior mean,
plus the agent's exploration bonus if it set one), ties by id, and go first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from grimoire.streams.learn.evidence import (
    DEFAULT_EVIDENCE_POLICY,
    EVIDENCE_EVENT_TYPE,
    SITUATION_EDGE_PREFIX,
    EvidencePolicy,
    action_of,
    decision_score,
    posterior_mean,
)
from grimoire.streams.recall.ports import RecallRecord
from grimoire.streams.recall.rerank import Scored

__all__ = [
    "DEFAULT_EVIDENCE_FIRST_POLICY",
    "EVIDENCE_REASON",
    "EvidenceFirstPolicy",
    "EvidenceLead",
    "Pooled",
    "evidence_first",
    "evidence_summary",
    "situation_of",
]

# The reason an item carries when it was put first as evidence.
EVIDENCE_REASON = "evidence:first"
CLADE: Final = "clade"  # the provenance of a copy a clade sibling shared


@dataclass(frozen=True, slots=True)
class EvidenceFirstPolicy:
    """`clade_weight`: what a clade sibling's count weighs against the agent's own
    when a situation's evidence is pooled (its copies carry the sibling's counts)."""

    enabled: bool = True
    match_ratio: float = 0.8
    clade_weight: float = 0.8
    evidence: EvidencePolicy = field(default=DEFAULT_EVIDENCE_POLICY)

    def __post_init__(self) -> None:
        if not 0.0 <= self.match_ratio <= 1.0:
            raise ValueError("match_ratio must be within [0, 1]")
        if not 0.0 <= self.clade_weight <= 1.0:
            raise ValueError("clade_weight must be within [0, 1]")


DEFAULT_EVIDENCE_FIRST_POLICY: Final = EvidenceFirstPolicy()

Pooled = tuple[float, float]  # (successes, failures) of an action, the clade's weighted


@dataclass(frozen=True, slots=True)
class EvidenceLead:
    """The entries that lead a reply, in order, and each one's pooled counts (its
    action's, in its situation: the agent's own plus the siblings' weighted)."""

    items: tuple[Scored, ...] = ()
    pooled: Mapping[str, Pooled] = field(default_factory=dict)


def situation_of(record: RecallRecord) -> str:
    """The situation edge of an evidence entry ("" for any other memory)."""
    if record.event_type != EVIDENCE_EVENT_TYPE:
        return ""
    for edge in record.hyperedge_ids:
        if edge.startswith(SITUATION_EDGE_PREFIX):
            return edge
    return ""


def _action(record: RecallRecord) -> str:
    return action_of(record.nexus_keys)


def evidence_first(
    scored: Sequence[Scored],
    records: Mapping[str, RecallRecord],
    relevance: Mapping[str, float],
    policy: EvidenceFirstPolicy,
) -> EvidenceLead:
    """The entries to put first, in order (none: the query matches no situation).
    `scored` in rank order; `records` and `relevance` by memory id. A situation's
    entries are the agent's own and the copies its clade shared: an action's
    counts are pooled (a copy's weighted by `clade_weight`), the actions ordered by
    their pooled decision score, an action's own entry before its copies."""
    if not policy.enabled or not scored:
        return EvidenceLead()
    best = max(relevance.get(s.memory_id, 0.0) for s in scored)
    matched = ""
    for each in scored:
        edge = situation_of(records[each.memory_id])
        if edge and relevance.get(each.memory_id, 0.0) >= policy.match_ratio * best:
            matched = edge
            break
    if not matched:
        return EvidenceLead()
    group = [s for s in scored if situation_of(records[s.memory_id]) == matched]
    counts: dict[str, list[float]] = {}
    for item in group:
        record = records[item.memory_id]
        weight = policy.clade_weight if record.provenance == CLADE else 1.0
        pooled = counts.setdefault(_action(record), [0.0, 0.0])
        pooled[0] += weight * record.validated_count
        pooled[1] += weight * record.contradicted_count
    trials = sum(s + f for s, f in counts.values())

    def order(item: Scored) -> tuple[float, bool, str]:
        record = records[item.memory_id]
        wins, losses = counts[_action(record)]
        score = decision_score(wins, losses, trials, policy.evidence)
        return (-score, record.provenance == CLADE, item.memory_id)

    led = tuple(sorted(group, key=order))
    return EvidenceLead(
        led,
        {
            s.memory_id: (
                round(counts[_action(records[s.memory_id])][0], 6),
                round(counts[_action(records[s.memory_id])][1], 6),
            )
            for s in led
        },
    )


def evidence_summary(
    record: RecallRecord,
    pooled: Pooled | None = None,
    policy: EvidencePolicy = DEFAULT_EVIDENCE_POLICY,
) -> dict[str, str | int | float] | None:
    """What a reply says of an evidence entry: its situation, action, counts and
    posterior mean, and, when it led the reply, its action's pooled counts and
    their posterior mean (None for any other memory)."""
    edge = situation_of(record)
    if not edge:
        return None
    successes, failures = record.validated_count, record.contradicted_count
    summary: dict[str, str | int | float] = {
        "situation": edge,
        "action": _action(record),
        "successes": successes,
        "failures": failures,
        "posterior_mean": round(posterior_mean(successes, failures, policy), 6),
    }
    if pooled is not None:
        summary["pooled_successes"] = pooled[0]
        summary["pooled_failures"] = pooled[1]
        summary["pooled_posterior_mean"] = round(posterior_mean(*pooled, policy), 6)
    return summary
