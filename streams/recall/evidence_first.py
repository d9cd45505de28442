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
    decision_score,
    posterior_mean,
)
from grimoire.streams.recall.ports import RecallRecord
from grimoire.streams.recall.rerank import Scored

__all__ = [
    "DEFAULT_EVIDENCE_FIRST_POLICY",
    "EVIDENCE_REASON",
    "EvidenceFirstPolicy",
    "evidence_first",
    "evidence_summary",
    "situation_of",
]

# The reason an item carries when it was put first as evidence.
EVIDENCE_REASON = "evidence:first"


@dataclass(frozen=True, slots=True)
class EvidenceFirstPolicy:
    enabled: bool = True
    match_ratio: float = 0.8
    evidence: EvidencePolicy = field(default=DEFAULT_EVIDENCE_POLICY)

    def __post_init__(self) -> None:
        if not 0.0 <= self.match_ratio <= 1.0:
            raise ValueError("match_ratio must be within [0, 1]")


DEFAULT_EVIDENCE_FIRST_POLICY: Final = EvidenceFirstPolicy()


def situation_of(record: RecallRecord) -> str:
    """The situation edge of an evidence entry ("" for any other memory)."""
    if record.event_type != EVIDENCE_EVENT_TYPE:
        return ""
    for edge in record.hyperedge_ids:
        if edge.startswith(SITUATION_EDGE_PREFIX):
            return edge
    return ""


def evidence_first(
    scored: Sequence[Scored],
    records: Mapping[str, RecallRecord],
    relevance: Mapping[str, float],
    policy: EvidenceFirstPolicy,
) -> tuple[Scored, ...]:
    """The entries to put first, in order (empty: the query matches no situation).
    `scored` in rank order; `records` and `relevance` by memory id."""
    if not policy.enabled or not scored:
        return ()
    best = max(relevance.get(s.memory_id, 0.0) for s in scored)
    matched = ""
    for each in scored:
        edge = situation_of(records[each.memory_id])
        if edge and relevance.get(each.memory_id, 0.0) >= policy.match_ratio * best:
            matched = edge
            break
    if not matched:
        return ()
    group = [s for s in scored if situation_of(records[s.memory_id]) == matched]
    trials = sum(
        records[s.memory_id].validated_count + records[s.memory_id].contradicted_count
        for s in group
    )

    def order(item: Scored) -> tuple[float, str]:
        record = records[item.memory_id]
        score = decision_score(
            record.validated_count, record.contradicted_count, trials, policy.evidence
        )
        return (-score, item.memory_id)

    return tuple(sorted(group, key=order))


def evidence_summary(
    record: RecallRecord, policy: EvidencePolicy = DEFAULT_EVIDENCE_POLICY
) -> dict[str, str | int | float] | None:
    """What a reply says of an evidence entry: its situation, action, counts and
    posterior mean (None for any other memory)."""
    edge = situation_of(record)
    if not edge:
        return None
    action = next((k[len("tool:") :] for k in record.nexus_keys if k.startswith("tool:")), "")
    successes, failures = record.validated_count, record.contradicted_count
    return {
        "situation": edge,
        "action": action,
        "successes": successes,
        "failures": failures,
        "posterior_mean": round(posterior_mean(successes, failures, policy), 6),
    }
