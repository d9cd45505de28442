"""grimoire.streams.write.plan: admission decisions → WriteBatch, without a store.

Factor values are computed by hand from the defaults in streams/write/admission.py:
composite = 0.25·U + 0.25·F + 0.20·N + 0.15·R + 0.15·T; an episode observation has
T = 0.2 and U = 0.4·importance for a plain text of four words or more.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import orjson
import pytest

from grimoire.streams.model.field_state import FieldState
from grimoire.streams.model.ids import memory_id
from grimoire.streams.model.records import HyperedgeRef, Kind, MemoryCandidate, Role
from grimoire.streams.write.admission import NearMemory
from grimoire.streams.write.changes import Decision, Reinforcement, StatsDelta
from grimoire.streams.write.plan import PlanItem, StoredNeighbour, aggregate_id, plan_batch
from tests.support.builders import memory_candidate
from tests.support.vectors import Vector, unit

AGENT = "agent-1"
OTHER = "agent-2"
TS = 1_767_225_600_000
DAY = 24 * 3600 * 1000  # the default recency half-life
TEXT = "disk full on node seven"  # no digits, keys or hedges: quality 0.2·1 + 0.15·0.5
QUALITY = 0.275

V1 = unit(1.0)
EIDOLON = unit(3.0, 1.0)


def cand(
    event: str,
    text: str = TEXT,
    *,
    ts: int = TS,
    agent: str = AGENT,
    importance: float = 0.9,
    hyperedge: HyperedgeRef | None = None,
) -> MemoryCandidate:
    return memory_candidate(
        agent,
        event,
        text,
        ts=ts,
        normalized_hash=f"h-{text}",
        importance=importance,
        hyperedge=hyperedge,
    )


def item(
    c: MemoryCandidate,
    vector: Vector = V1,
    *,
    now: int | None = None,
    stored: StoredNeighbour | None = None,
) -> PlanItem:
    return PlanItem(c, vector, EIDOLON, c.ts_ms if now is None else now, stored)


def stored(
    memory: str,
    similarity: float,
    *,
    confidence: float = 0.6,
    kind: str = "episode",
    text: str = "something else entirely",
) -> StoredNeighbour:
    return StoredNeighbour(NearMemory(memory, similarity, confidence, text), kind)


def fields(*agents: str, watermark: int = TS) -> dict[str, FieldState]:
    return {agent: FieldState(agent, watermark_ms=watermark) for agent in agents}


OLD_ID = memory_id(AGENT, "old", 0, TS - DAY)


# --- admit ---------------------------------------------------------------------------


def test_a_novel_candidate_is_admitted_with_its_breakdown() -> None:
    c = cand("ev-1")
    batch, (outcome,) = plan_batch([item(c)], fields(AGENT))

    # U = 0.4·0.9 = 0.36, F = 0.4, N = 1, R = 1, T = 0.2
    # composite = 0.09 + 0.1 + 0.2 + 0.15 + 0.03 = 0.57 > 0.55: standard episode confidence
    (record,) = batch.records
    assert record.candidate == c
    assert record.canonical == V1.tobytes()
    assert record.eidolon == EIDOLON.tobytes()
    assert (record.confidence, record.quality) == (0.6, QUALITY)
    assert (record.quarantined, record.off_topic, record.aggregate_of) == (False, False, "")
    assert orjson.loads(record.admission) == {
        "action": "admit",
        "reason": "admitted",
        "composite": 0.57,
        "future_utility": 0.36,
        "factual_confidence": 0.4,
        "novelty": 1.0,
        "recency": 1.0,
        "type_prior": 0.2,
        "off_topic": False,
    }
    assert batch.decisions == (Decision(AGENT, c.id, "admit"),)
    assert (batch.folds, batch.reinforcements, batch.metrics) == ((), (), ())
    assert batch.fields == (FieldState(AGENT, watermark_ms=TS),)
    assert batch.stats == (
        StatsDelta(AGENT, (("admit", 1), ("candidates", 1), ("quality_sum", QUALITY))),
    )
    assert outcome.memory_id == c.id
    assert outcome.quality is not None and outcome.quality.total == QUALITY


def test_the_low_band_admits_at_low_confidence() -> None:
    c = cand("ev-1", importance=0.5)  # U = 0.2: composite 0.05 + 0.38 = 0.53
    batch, (outcome,) = plan_batch([item(c)], fields(AGENT))
    assert (outcome.decision.composite, outcome.decision.reason) == (
        0.53,
        "admitted_low_confidence",
    )
    assert batch.records[0].confidence == 0.3


def test_recency_is_measured_against_the_agents_watermark() -> None:
    c = cand("ev-1", ts=TS - DAY)  # one half-life behind now: R = 0.5
    _, (outcome,) = plan_batch([item(c, now=TS)], fields(AGENT))
    assert outcome.decision.factors.recency == 0.5
    assert outcome.decision.composite == 0.495  # 0.57 - 0.15·0.5
    assert outcome.decision.reason == "admitted_low_confidence"


# --- near-duplicates -----------------------------------------------------------------


def test_repeats_in_one_batch_fold_into_an_aggregate_of_the_first() -> None:
    edge = HyperedgeRef("run:r1", Role.CONTEXT)
    first = cand("ev-1")
    second = cand("ev-2", ts=TS + 1_000, hyperedge=edge)
    third = cand("ev-3", ts=TS + 2_000)
    batch, outcomes = plan_batch(
        [item(first), item(second), item(third)], fields(AGENT, watermark=TS + 2_000)
    )

    group = memory_id(AGENT, f"aggregate:{first.id}", 0, TS)
    assert aggregate_id(AGENT, first.id) == group
    assert [r.id for r in batch.records] == [first.id]
    # The third meets the aggregate the second created (as it would in the store,
    # had the batch ended after the second): the same vector as the first, and a tie
    # goes to the smaller id.
    assert group < first.id
    assert [(f.aggregate_id, f.target_id, f.member_id, f.ts_ms) for f in batch.folds] == [
        (group, first.id, second.id, TS + 1_000),
        (group, group, third.id, TS + 2_000),
    ]
    assert all(f.agent_id == AGENT for f in batch.folds)
    seed = batch.folds[0].seed
    assert seed.candidate == replace(second, id=group, kind=Kind.AGGREGATE, hyperedge=None)
    assert (seed.aggregate_of, seed.confidence, seed.quality) == (first.id, 0.6, 0.5)
    assert (seed.canonical, seed.eidolon) == (V1.tobytes(), EIDOLON.tobytes())
    assert orjson.loads(seed.admission)["action"] == "aggregate"

    assert [o.memory_id for o in outcomes] == [first.id, group, group]
    assert [(o.decision.action, o.decision.reason) for o in outcomes[1:]] == [
        ("aggregate", "duplicate"),
        ("aggregate", "duplicate"),
    ]
    assert outcomes[1].decision.target_id == first.id
    assert outcomes[1].decision.confidence == 0.0
    assert outcomes[1].quality is None
    assert [d.action for d in batch.decisions] == ["admit", "aggregate", "aggregate"]
    assert batch.stats == (
        StatsDelta(
            AGENT,
            (("admit", 1), ("aggregate", 2), ("candidates", 3), ("quality_sum", QUALITY)),
        ),
    )


def test_a_closer_stored_neighbour_beats_an_earlier_batch_member() -> None:
    first = cand("ev-1")
    second = cand("ev-2", ts=TS + 1)
    # second sits at 0.6 from first (on topic) but 0.97 from a stored memory
    near_first = unit(0.6, 0.8)
    batch, outcomes = plan_batch(
        [item(first), item(second, near_first, stored=stored(OLD_ID, 0.97))],
        fields(AGENT),
    )
    assert outcomes[1].decision.target_id == OLD_ID
    (fold,) = batch.folds
    assert (fold.aggregate_id, fold.target_id) == (aggregate_id(AGENT, OLD_ID), OLD_ID)


def test_an_earlier_batch_member_beats_a_weaker_stored_neighbour() -> None:
    first = cand("ev-1")
    second = cand("ev-2", ts=TS + 1)
    batch, outcomes = plan_batch(
        [item(first), item(second, stored=stored(OLD_ID, 0.5))], fields(AGENT)
    )
    assert outcomes[1].decision.target_id == first.id
    assert batch.folds[0].aggregate_id == aggregate_id(AGENT, first.id)


def test_folding_into_an_aggregate_neighbour_uses_its_id() -> None:
    existing = aggregate_id(AGENT, OLD_ID)
    c = cand("ev-1")
    batch, (outcome,) = plan_batch(
        [item(c, stored=stored(existing, 0.97, kind="aggregate"))], fields(AGENT)
    )
    (fold,) = batch.folds
    assert (fold.aggregate_id, fold.target_id, fold.member_id) == (existing, existing, c.id)
    assert outcome.memory_id == existing
    assert batch.records == ()


def test_a_near_duplicate_reinforces_the_neighbour() -> None:
    c = cand("ev-1", ts=TS + 5)
    batch, (outcome,) = plan_batch(
        [item(c, stored=stored(OLD_ID, 0.93))], fields(AGENT, watermark=TS + 5)
    )
    # The reinforcing event is named, so retracting it finds the reinforcement.
    assert batch.reinforcements == (
        Reinforcement(AGENT, OLD_ID, c.id, TS + 5, source_event_id="ev-1"),
    )
    assert (batch.records, batch.folds) == ((), ())
    assert (outcome.decision.action, outcome.decision.reason) == ("merge", "near_duplicate")
    assert (outcome.memory_id, outcome.quality) == (OLD_ID, None)
    assert batch.decisions == (Decision(AGENT, c.id, "merge"),)
    assert batch.stats == (StatsDelta(AGENT, (("candidates", 1), ("merge", 1))),)


@pytest.mark.parametrize(
    ("similarity", "action"),
    [
        (0.96, "aggregate"),
        (0.95, "merge"),  # "above 0.95" is exclusive
        (0.91, "merge"),
        # 0.90 is not above the merge edge: F = 0.4 + 0.2·0.9·0.6 = 0.508, N = 0.1,
        # composite = 0.09 + 0.127 + 0.02 + 0.15 + 0.03 = 0.417 < 0.45
        (0.90, "reject"),
    ],
)
def test_duplicate_band_edges(similarity: float, action: str) -> None:
    neighbour = stored(OLD_ID, similarity)
    _, (outcome,) = plan_batch([item(cand("ev-1"), stored=neighbour)], fields(AGENT))
    assert outcome.decision.action == action


# --- quarantine and reject -----------------------------------------------------------


def test_a_contradiction_of_a_confident_memory_is_stored_quarantined() -> None:
    c = cand("ev-1", "the bridge is not safe", importance=0.5)
    neighbour = stored(OLD_ID, 0.85, confidence=0.8, text="the bridge is safe")
    batch, (outcome,) = plan_batch([item(c, stored=neighbour)], fields(AGENT))

    # F = 0.4 - 0.4·0.8 = 0.08 < 0.3; N = 1 (a contradiction is novel); U = 0.2
    # composite = 0.05 + 0.02 + 0.2 + 0.15 + 0.03 = 0.45
    (record,) = batch.records
    assert record.id == c.id
    assert (record.quarantined, record.confidence, record.quality) == (True, 0.08, QUALITY)
    admission = orjson.loads(record.admission)
    assert (admission["action"], admission["reason"]) == ("quarantine", "contradiction")
    assert (admission["novelty"], admission["composite"]) == (1.0, 0.45)
    assert outcome.decision.target_id == OLD_ID
    assert outcome.memory_id == c.id
    assert batch.decisions == (Decision(AGENT, c.id, "quarantine"),)
    assert batch.reinforcements == ()
    assert batch.stats == (
        StatsDelta(AGENT, (("candidates", 1), ("quarantine", 1), ("quality_sum", QUALITY))),
    )


def test_a_quarantined_record_is_no_neighbour_for_later_batch_members() -> None:
    neighbour = stored(OLD_ID, 0.85, confidence=0.8, text="the bridge is safe")
    first = cand("ev-1", "the bridge is not safe", importance=0.5)
    second = cand("ev-2", "the bridge is not safe", ts=TS + 1, importance=0.5)
    batch, outcomes = plan_batch(
        [item(first, stored=neighbour), item(second, stored=neighbour)], fields(AGENT)
    )
    assert [o.decision.action for o in outcomes] == ["quarantine", "quarantine"]
    assert [r.id for r in batch.records] == [first.id, second.id]
    assert batch.folds == ()


def test_a_rejected_candidate_leaves_only_a_decision() -> None:
    c = cand("ev-1", "ok thanks", importance=0.5)
    neighbour = stored(OLD_ID, 0.6, confidence=0.5, text="pool depth stable")
    batch, (outcome,) = plan_batch([item(c, stored=neighbour)], fields(AGENT))

    # U = 0.2 - 0.2 (short) - 0.15 (phatic) → 0; F = 0.4 + 0.2·0.6·0.5 = 0.46; N = 0.4
    # composite = 0 + 0.115 + 0.08 + 0.15 + 0.03 = 0.375 < 0.45
    factors = outcome.decision.factors
    assert (factors.future_utility, factors.factual_confidence, factors.novelty) == (
        0.0,
        0.46,
        0.4,
    )
    assert outcome.decision.composite == 0.375
    assert (outcome.decision.action, outcome.decision.reason) == ("reject", "below_threshold")
    assert (outcome.memory_id, outcome.quality) == (None, None)
    assert (batch.records, batch.folds, batch.reinforcements) == ((), (), ())
    assert batch.decisions == (Decision(AGENT, c.id, "reject"),)
    assert batch.stats == (StatsDelta(AGENT, (("candidates", 1), ("reject", 1))),)
    assert not batch.is_empty()  # the decision itself must be committed


def test_off_topic_is_a_flag_and_a_counter() -> None:
    c = cand("ev-1")
    batch, (outcome,) = plan_batch([item(c, stored=stored(OLD_ID, 0.3))], fields(AGENT))
    # no alignment bonus below 0.5: composite = 0.09 + 0.1 + 0.14 + 0.15 + 0.03 = 0.51
    assert outcome.decision.composite == 0.51
    assert batch.records[0].off_topic is True
    assert orjson.loads(batch.records[0].admission)["off_topic"] is True
    assert dict(batch.stats[0].counters)["off_topic"] == 1


def test_agents_never_fold_into_each_other_and_stats_are_per_agent() -> None:
    mine = cand("ev-1")
    theirs = cand("ev-2", agent=OTHER, ts=TS + 1)
    repeat = cand("ev-3", agent=OTHER, ts=TS + 2)
    batch, outcomes = plan_batch(
        [item(mine), item(theirs), item(repeat)], fields(OTHER, AGENT, watermark=TS + 2)
    )
    assert [o.decision.action for o in outcomes] == ["admit", "admit", "aggregate"]
    assert batch.folds[0].aggregate_id == aggregate_id(OTHER, theirs.id)
    assert [f.agent_id for f in batch.fields] == [AGENT, OTHER]  # sorted by agent
    assert batch.stats == (
        StatsDelta(AGENT, (("admit", 1), ("candidates", 1), ("quality_sum", QUALITY))),
        StatsDelta(
            OTHER, (("admit", 1), ("aggregate", 1), ("candidates", 2), ("quality_sum", QUALITY))
        ),
    )


def test_quality_sum_adds_every_written_record() -> None:
    # "disk 95% full on node 7": two concrete tokens (specificity 0.5), a number with a
    # unit (verifiability 0.2), novelty 1 (orthogonal to the first), neutral consistency:
    # 0.25·0.5 + 0.2·1 + 0.15·0.2 + 0.15·0.5 = 0.43
    first = cand("ev-1")
    second = cand("ev-2", "disk 95% full on node 7", ts=TS + 1)
    batch, outcomes = plan_batch([item(first), item(second, unit(0.0, 1.0))], fields(AGENT))
    assert outcomes[1].quality is not None
    assert outcomes[1].quality.total == 0.43
    # One increment per record, in order: the store adds them one by one, so the
    # total is the same however the records were batched.
    increments = [amount for name, amount in batch.stats[0].counters if name == "quality_sum"]
    assert increments == [QUALITY, 0.43]


# --- aggregate ids -------------------------------------------------------------------


def test_aggregate_id_is_deterministic_and_timed_at_the_target() -> None:
    target = memory_id(AGENT, "ev-9", 0, TS + 12_345)
    agg = aggregate_id(AGENT, target)
    assert agg == aggregate_id(AGENT, target)
    assert agg == memory_id(AGENT, f"aggregate:{target}", 0, TS + 12_345)
    assert agg != target
    assert uuid.UUID(agg).version == 7
    assert int(agg.replace("-", "")[:12], 16) == TS + 12_345
    assert aggregate_id(OTHER, target) != agg


def test_aggregate_ids_sort_like_their_targets() -> None:
    earlier = aggregate_id(AGENT, memory_id(AGENT, "ev-1", 0, TS))
    later = aggregate_id(AGENT, memory_id(AGENT, "ev-0", 0, TS + 1))
    assert earlier < later
