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


def entry(
    memory_id: str, edge: str, tool: str, wins: int, losses: int, provenance: str = "self"
) -> RecallRecord:
    return RecallRecord(
        provenance=provenance,
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


def _first(*args: object) -> tuple[Scored, ...]:
    return evidence_first(*args).items  # type: ignore[arg-type]


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
    first = _first(ranked("ep", "e1", "e2", "e3", "x"), records, relevance,
                           EvidenceFirstPolicy())  # fmt: skip
    assert [s.memory_id for s in first] == ["e2", "e3", "e1"]


def test_an_entry_far_less_relevant_than_the_best_candidate_matches_nothing() -> None:
    records = {"ep": episode("ep"), "e1": entry("e1", DISK, "rotate", 5, 0)}
    relevance = {"ep": 1.0, "e1": 0.5}
    policy = EvidenceFirstPolicy(match_ratio=0.8)
    assert _first(ranked("ep", "e1"), records, relevance, policy) == ()
    looser = EvidenceFirstPolicy(match_ratio=0.5)
    assert [s.memory_id for s in _first(ranked("ep", "e1"), records, relevance, looser)] == ["e1"]


def test_off_or_without_entries_nothing_leads() -> None:
    records = {"ep": episode("ep"), "e1": entry("e1", DISK, "rotate", 5, 0)}
    relevance = {"ep": 1.0, "e1": 1.0}
    assert _first(ranked("ep", "e1"), records, relevance,
                          EvidenceFirstPolicy(enabled=False)) == ()  # fmt: skip
    assert _first(ranked("ep"), {"ep": episode("ep")}, {"ep": 1.0},
                          EvidenceFirstPolicy()) == ()  # fmt: skip


def test_the_exploration_bonus_can_put_a_rarely_tried_action_first() -> None:
    records = {"a": entry("a", DISK, "often", 12, 8), "b": entry("b", DISK, "rare", 0, 1)}
    relevance = {"a": 1.0, "b": 1.0}
    greedy = _first(ranked("a", "b"), records, relevance, EvidenceFirstPolicy())
    assert [s.memory_id for s in greedy] == ["a", "b"]
    curious = EvidenceFirstPolicy(evidence=EvidencePolicy(exploration_bonus=1.0))
    assert [s.memory_id for s in _first(ranked("a", "b"), records, relevance, curious)] == [
        "b",
        "a",
    ]


def test_ties_are_broken_by_id_whatever_the_rank_order() -> None:
    records = {"b": entry("b", DISK, "x", 1, 1), "a": entry("a", DISK, "y", 1, 1)}
    relevance = {"a": 1.0, "b": 1.0}
    for order in (("a", "b"), ("b", "a")):
        first = _first(ranked(*order), records, relevance, EvidenceFirstPolicy())
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


def test_a_siblings_counts_pool_with_the_agents_own_at_the_clade_weight() -> None:
    # own: rotate 2/1; the clade's copies: prune 5/0 (x0.8 = 4/0), rotate 0/5 (0/4)
    records = {
        "own": entry("own", DISK, "rotate", 2, 1),
        "c1": entry("c1", DISK, "prune", 5, 0, provenance="clade"),
        "c2": entry("c2", DISK, "rotate", 0, 5, provenance="clade"),
    }
    relevance = {"own": 1.0, "c1": 1.0, "c2": 1.0}
    lead = evidence_first(ranked("own", "c1", "c2"), records, relevance, EvidenceFirstPolicy())
    assert [s.memory_id for s in lead.items] == ["c1", "own", "c2"]
    assert lead.pooled == {"c1": (4.0, 0.0), "own": (2.0, 5.0), "c2": (2.0, 5.0)}
    alone = EvidenceFirstPolicy(clade_weight=0.0)
    lead = evidence_first(ranked("own", "c1", "c2"), records, relevance, alone)
    # weighed at 0 the copies count nothing: the own action (2/1) leads, its copy next
    assert [s.memory_id for s in lead.items] == ["own", "c2", "c1"]


def test_the_summary_of_a_leading_entry_says_its_pooled_counts() -> None:
    summary = evidence_summary(entry("e", DISK, "prune", 3, 1), (7.0, 1.0))
    assert summary is not None
    assert (summary["pooled_successes"], summary["pooled_failures"]) == (7.0, 1.0)
    assert summary["pooled_posterior_mean"] == 0.8
