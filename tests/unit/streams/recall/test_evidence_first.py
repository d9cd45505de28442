"""Evidence first: a matched situation's entries lead, best posterior first."""

from __future__ import annotations

from grimoire.streams.learn.evidence import EVIDENCE_EVENT_TYPE, EvidencePolicy, situation_edge
from grimoire.streams.recall.evidence_first import (
    EvidenceFirstPolicy,
    evidence_first,
    evidence_summary,
    situation_of,
)
from grimoire.streams.recall.ports import RecallRecord
from grimoire.streams.recall.rerank import Candidate, RerankFactors, Scored

DISK = situation_edge(("tag:alert/disk",))
LAG = situation_edge(("tag:alert/lag",))


def entry(memory_id: str, edge: str, tool: str, wins: int, losses: int) -> RecallRecord:
    return RecallRecord(
        memory_id=memory_id,
        kind="insight",
        layer="contemplation",
        text=f"Evidence for action {tool}",
        ts_ms=0,
        event_type=EVIDENCE_EVENT_TYPE,
        hyperedge_ids=(edge,),
        nexus_keys=("tag:alert/disk", f"tool:{tool}"),
        validated_count=wins,
        contradicted_count=losses,
    )


def episode(memory_id: str) -> RecallRecord:
    return RecallRecord(memory_id=memory_id, kind="episode", layer="observation", text="", ts_ms=0)


def ranked(*ids: str) -> list[Scored]:
    factors = RerankFactors(1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 1.0)
    return [
        Scored(Candidate(i, 1.0, 0.5, 0.5, 0), 1.0 - n / 10, factors) for n, i in enumerate(ids)
    ]


def test_a_matched_situations_entries_lead_best_posterior_first() -> None:
    records = {
        "ep": episode("ep"),
        "e1": entry("e1", DISK, "rotate", 1, 3),
        "e2": entry("e2", DISK, "prune", 5, 1),
        "e3": entry("e3", DISK, "grow", 1, 0),
        "x": entry("x", LAG, "scale", 9, 0),
    }
    relevance = {"ep": 1.0, "e1": 0.9, "e2": 0.7, "e3": 0.5, "x": 0.2}
    first = evidence_first(ranked("ep", "e1", "e2", "e3", "x"), records, relevance,
                           EvidenceFirstPolicy())  # fmt: skip
    assert [s.memory_id for s in first] == ["e2", "e3", "e1"]


def test_an_entry_far_less_relevant_than_the_best_candidate_matches_nothing() -> None:
    records = {"ep": episode("ep"), "e1": entry("e1", DISK, "rotate", 5, 0)}
    relevance = {"ep": 1.0, "e1": 0.5}
    policy = EvidenceFirstPolicy(match_ratio=0.8)
    assert evidence_first(ranked("ep", "e1"), records, relevance, policy) == ()
    looser = EvidenceFirstPolicy(match_ratio=0.5)
    assert [
        s.memory_id for s in evidence_first(ranked("ep", "e1"), records, relevance, looser)
    ] == ["e1"]


def test_off_or_without_entries_nothing_leads() -> None:
    records = {"ep": episode("ep"), "e1": entry("e1", DISK, "rotate", 5, 0)}
    relevance = {"ep": 1.0, "e1": 1.0}
    assert evidence_first(ranked("ep", "e1"), records, relevance,
                          EvidenceFirstPolicy(enabled=False)) == ()  # fmt: skip
    assert evidence_first(ranked("ep"), {"ep": episode("ep")}, {"ep": 1.0},
                          EvidenceFirstPolicy()) == ()  # fmt: skip


def test_the_exploration_bonus_can_put_a_rarely_tried_action_first() -> None:
    records = {"a": entry("a", DISK, "often", 12, 8), "b": entry("b", DISK, "rare", 0, 1)}
    relevance = {"a": 1.0, "b": 1.0}
    greedy = evidence_first(ranked("a", "b"), records, relevance, EvidenceFirstPolicy())
    assert [s.memory_id for s in greedy] == ["a", "b"]
    curious = EvidenceFirstPolicy(evidence=EvidencePolicy(exploration_bonus=1.0))
    assert [s.memory_id for s in evidence_first(ranked("a", "b"), records, relevance, curious)] == [
        "b",
        "a",
    ]


def test_ties_are_broken_by_id_whatever_the_rank_order() -> None:
    records = {"b": entry("b", DISK, "x", 1, 1), "a": entry("a", DISK, "y", 1, 1)}
    relevance = {"a": 1.0, "b": 1.0}
    for order in (("a", "b"), ("b", "a")):
        first = evidence_first(ranked(*order), records, relevance, EvidenceFirstPolicy())
        assert [s.memory_id for s in first] == ["a", "b"]


def test_the_summary_says_situation_action_counts_and_posterior() -> None:
    assert evidence_summary(entry("e", DISK, "prune", 3, 1)) == {
        "situation": DISK,
        "action": "prune",
        "successes": 3,
        "failures": 1,
        "posterior_mean": round(4 / 6, 6),
    }
    assert evidence_summary(episode("ep")) is None
    assert situation_of(episode("ep")) == ""
