"""grimoire.streams.recall.flow on a dict-backed RecallSource: lifecycle, compaction,
budgets, filters, token budget, episodes, usage and tenancy."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from grimoire.streams.inbound.recall_request import RecallQuery
from grimoire.streams.recall.flow import RankingPolicy, RecallOutcome, run_recall
from grimoire.streams.recall.options import ProvenanceFilters, RetrievalMode
from grimoire.streams.recall.packing import ITEM_OVERHEAD_TOKENS, estimate_tokens
from grimoire.streams.recall.ports import RecallRecord, Vector
from grimoire.streams.recall.relevance import RelevancePolicy
from grimoire.streams.recall.walk.daimoi import WalkBudget
from tests.support.recall import NOW, DictSource, context, query, record, seed_vector


async def ask(source: DictSource, q: RecallQuery, vector: Vector | None = None) -> RecallOutcome:
    return await run_recall(
        q, context(q.query, vector if vector is not None else seed_vector(1)), source
    )


CORPUS = [
    record("m1", "disk full on node seven", 1, nexus_keys=("err:disk_full", "entity:node7")),
    record("m2", "node seven rebooted after the disk alarm", 2, nexus_keys=("entity:node7",)),
    record("m3", "cpu saturated on the scheduler", 3, nexus_keys=("err:cpu",)),
    record("m4", "backup finished without errors", 4, nexus_keys=("tool:backup",)),
]


async def test_items_carry_scores_reasons_gist_and_full_text_only_at_the_top() -> None:
    outcome = await ask(DictSource(CORPUS), query(full_text_items=1))
    top, *rest = outcome.items
    assert top.record.memory_id == "m1"
    assert top.text == "disk full on node seven"
    assert all(item.text is None for item in rest)
    assert "lane:bm25" in top.reasons and "lane:canonical" in top.reasons
    factors = dict(top.factors)
    assert {
        "relevance",
        "effective_confidence",
        "quality",
        "recency",
        "regime_match",
        "score",
    } <= set(factors)
    assert factors["rank:bm25"] == 1.0
    assert all(item.gist for item in outcome.items)


async def test_the_walk_brings_memories_that_share_keys_with_its_reasons() -> None:
    source = DictSource(CORPUS)
    q = query("disk full", canonical_k=1, eidolon_k=0, bm25_k=1)
    outcome = await ask(source, q, vector=CORPUS[0].vector)
    by_id = {item.record.memory_id: item for item in outcome.items}
    assert "m2" in by_id  # no lane found it; entity:node7 did
    assert by_id["m2"].lanes == ("walk",)
    assert "entity:node7" in by_id["m2"].reasons


async def test_an_entity_the_query_names_brings_its_memories_in_its_own_lane() -> None:
    chicago = record(
        "c1", "the relay there kept dropping blocks", 9, nexus_keys=("entity:chicago",)
    )
    source = DictSource([*CORPUS, chicago])
    q = query("what happened in Chicago", canonical_k=0, eidolon_k=0)
    outcome = await ask(source, q)
    by_id = {item.record.memory_id: item for item in outcome.items}
    assert by_id["c1"].lanes == ("entity",)  # no word and no vector matched it
    assert "lane:entity" in by_id["c1"].reasons


async def test_a_when_question_explains_what_its_time_cue_added() -> None:
    said = record("w1", "the disk filled up yesterday", 5)
    outcome = await ask(DictSource([*CORPUS, said]), query("when did the disk fill up"))
    factors = {item.record.memory_id: dict(item.factors) for item in outcome.items}
    assert factors["w1"]["query_match"] > 0.0
    assert "query_match" not in factors["m3"]  # no cue, nothing added


async def test_same_request_same_state_gives_identical_items() -> None:
    source = DictSource(CORPUS)
    first = await ask(source, query())
    second = await ask(source, query())
    assert first.items == second.items


async def test_deleted_and_quarantined_memories_are_never_returned() -> None:
    records = [
        *CORPUS,
        record(
            "gone", "disk full on node seven again", 5, deleted=True, nexus_keys=("entity:node7",)
        ),
        record("held", "disk full node seven", 6, quarantined=True, nexus_keys=("entity:node7",)),
    ]
    outcome = await ask(DictSource(records), query(max_items=10))
    ids = {item.record.memory_id for item in outcome.items}
    assert ids and not ids & {"gone", "held"}


async def test_a_compacted_source_is_replaced_by_its_summary() -> None:
    summary = record(
        "sum1",
        "summary: node seven disk incidents",
        9,
        kind="summary",
        nexus_keys=("entity:node7", "err:disk_full"),
    )
    source_gone = replace(CORPUS[1], deleted=True, replaced_by="sum1")
    source = DictSource([CORPUS[0], source_gone, CORPUS[2], CORPUS[3], summary])
    outcome = await ask(source, query("node seven rebooted", max_items=10))
    ids = [item.record.memory_id for item in outcome.items]
    assert "m2" not in ids
    assert ids.count("sum1") == 1


@pytest.mark.parametrize(
    "walk",
    [
        WalkBudget(num_walkers=0),
        WalkBudget(max_hops=0),
        WalkBudget(max_keys_per_node=0),
        WalkBudget(max_neighbors_per_key=0),
        WalkBudget(max_total_candidates=0),
    ],
)
async def test_a_zero_walk_budget_walks_nothing(walk: WalkBudget) -> None:
    outcome = await ask(DictSource(CORPUS), query("disk full", walk=walk, max_items=10))
    assert all("walk" not in item.lanes for item in outcome.items)


async def test_walk_budgets_of_one_cap_the_walk() -> None:
    many = [
        record(f"n{i}", f"unrelated note {i}", 10 + i, nexus_keys=("entity:node7",))
        for i in range(30)
    ]
    source = DictSource([*CORPUS, *many])
    walk = WalkBudget(
        num_walkers=1,
        max_hops=1,
        max_keys_per_node=1,
        max_neighbors_per_key=1,
        max_total_candidates=1,
    )
    q = query("disk full", walk=walk, max_items=50, canonical_k=1, eidolon_k=0, bm25_k=1)
    outcome = await ask(source, q, vector=CORPUS[0].vector)
    walked = [item for item in outcome.items if item.lanes == ("walk",)]
    assert len(walked) <= 1


@pytest.mark.parametrize("max_items", [0, 1, 2])
async def test_max_items_is_honoured(max_items: int) -> None:
    outcome = await ask(DictSource(CORPUS), query(max_items=max_items))
    assert len(outcome.items) == min(max_items, len(CORPUS))


@pytest.mark.parametrize("budget", [0, 10, 25, 40, 1000])
async def test_token_budget_is_honoured(budget: int) -> None:
    outcome = await ask(DictSource(CORPUS), query(token_budget=budget, full_text_items=2))
    assert outcome.tokens_used <= budget
    assert outcome.tokens_used == sum(item.tokens for item in outcome.items)
    for item in outcome.items:
        expected = ITEM_OVERHEAD_TOKENS + estimate_tokens(item.gist)
        expected += estimate_tokens(item.text) if item.text is not None else 0
        assert item.tokens == expected
    if budget >= 1000:
        assert len(outcome.items) == len(CORPUS)


def _filtered(
    memory_id: str, seed: int, where: tuple[str, str, str, str, str], **extra: Any
) -> RecallRecord:
    session, run, actor, event_type, layer = where
    return record(
        memory_id,
        f"deploy failed {memory_id}",
        seed,
        session_id=session,
        run_id=run,
        actor_id=actor,
        event_type=event_type,
        layer=layer,
        ts_ms=NOW - (6 - seed) * 1_000,
        **extra,
    )


FILTER_CORPUS = [
    _filtered("a", 1, ("s1", "r1", "ci", "tool", "action")),  # ts NOW - 5 s
    _filtered("b", 2, ("s2", "r1", "ops", "episode", "observation")),  # NOW - 4 s
    _filtered("c", 3, ("s1", "r2", "ops", "transcript", "input"), kind="insight"),  # NOW - 3 s
    _filtered("d", 4, ("s3", "r3", "ci", "tool", "observation")),  # NOW - 2 s
]


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (ProvenanceFilters(), {"a", "b", "c", "d"}),
        (ProvenanceFilters(since_ms=NOW - 3_000), {"c", "d"}),
        (ProvenanceFilters(until_ms=NOW - 4_000), {"a", "b"}),
        (ProvenanceFilters(since_ms=NOW - 4_000, until_ms=NOW - 3_000), {"b", "c"}),
        (ProvenanceFilters(session_id="s1"), {"a", "c"}),
        (ProvenanceFilters(run_id="r1"), {"a", "b"}),
        (ProvenanceFilters(actor_id="ci"), {"a", "d"}),
        (ProvenanceFilters(event_type_prefix="tr"), {"c"}),
        (ProvenanceFilters(event_type_prefix="tool"), {"a", "d"}),
        (ProvenanceFilters(kinds=("insight",)), {"c"}),
        (ProvenanceFilters(layers=("observation",)), {"b", "d"}),
        (ProvenanceFilters(layers=("action", "input")), {"a", "c"}),
        (ProvenanceFilters(session_id="s1", actor_id="ops"), {"c"}),
        (ProvenanceFilters(session_id="nope"), set()),
    ],
)
async def test_each_provenance_filter_is_honoured(
    filters: ProvenanceFilters, expected: set[str]
) -> None:
    linked = [replace(r, nexus_keys=("tag:deploy",)) for r in FILTER_CORPUS]  # the walk sees all
    outcome = await ask(DictSource(linked), query("deploy failed", filters=filters, max_items=10))
    assert {item.record.memory_id for item in outcome.items} == expected


async def test_episode_expansion_attaches_siblings_with_roles_within_budget() -> None:
    edge = {"m1": "trigger", "m4": "outcome", "m3": "action"}
    records = [replace(r, hyperedge_ids=("turn:1",)) if r.memory_id in edge else r for r in CORPUS]
    source = DictSource(records, {"turn:1": edge})
    outcome = await ask(source, query(max_items=1, expand_episodes=True))
    (item,) = outcome.items
    assert item.record.memory_id == "m1"
    assert [(s.memory_id, s.role) for s in item.episode] == [("m3", "action"), ("m4", "outcome")]
    assert outcome.tokens_used == item.tokens
    tight = await ask(
        source, query(max_items=1, expand_episodes=True, token_budget=item.tokens - 1)
    )
    assert len(tight.items[0].episode) < 2


async def test_usage_names_the_included_memories_and_writes_nothing() -> None:
    source = DictSource(CORPUS)
    outcome = await ask(source, query(max_items=2))
    assert outcome.used_ids == tuple(item.record.memory_id for item in outcome.items)
    assert outcome.used_ids and source.touched == []  # recall is a read
    quiet = DictSource(CORPUS)
    probe = await run_recall(
        replace(query(max_items=2), record_usage=False), context("disk", seed_vector(1)), quiet
    )
    assert probe.items and probe.used_ids == ()


async def test_mode_none_retrieves_nothing_and_light_does_not_walk() -> None:
    source = DictSource(CORPUS)
    q = query()
    none = await run_recall(q, context(q.query, seed_vector(1), RetrievalMode.NONE), source)
    assert none.items == () and source.graph_calls == 0
    light = await run_recall(q, context(q.query, seed_vector(1), RetrievalMode.LIGHT), source)
    assert light.items and source.graph_calls == 0
    assert all(set(item.lanes) <= {"canonical", "bm25"} for item in light.items)


async def test_a_walk_round_costs_a_few_batched_graph_calls_not_one_per_walker() -> None:
    many = [
        record(f"n{i}", f"note {i}", 10 + i, nexus_keys=(f"entity:e{i % 5}", f"tag:t{i % 7}"))
        for i in range(60)
    ]
    source = DictSource([*CORPUS, *many])
    q = query("note entity", max_items=10, walk=WalkBudget(num_walkers=8, max_hops=2))
    await ask(source, q)
    assert source.graph_calls >= 3  # seeds, their keys, neighbours: the walk ran
    # 8 walkers x 2 expansions x 3 reads would be 48 calls one walker at a time.
    assert source.graph_calls <= 12


def turn(memory_id: str, text: str, seed: int, ts_ms: int, **extra: Any) -> RecallRecord:
    return record(
        memory_id, text, seed, ts_ms=ts_ms, session_id="s1", nexus_keys=("session:s1",), **extra
    )


SESSION = [
    turn("t1", "ana asked what bea painted last week", 21, NOW - 3_000),
    turn("t2", "a sunset over the lake, in oils", 22, NOW - 2_000),
    turn("t3", "then they talked about lunch", 23, NOW - 1_000),
    turn("t4", "the weather was mild all afternoon", 24, NOW),
]
NO_WALK = WalkBudget(num_walkers=0)


async def test_the_next_line_of_a_strong_match_joins_through_its_session() -> None:
    q = query("what did bea paint last week", walk=NO_WALK, canonical_k=1, eidolon_k=0, bm25_k=1)
    outcome = await ask(DictSource(SESSION), q, vector=SESSION[0].vector)
    by_id = {item.record.memory_id: item for item in outcome.items}
    # no lane found the answer; the question's session neighbours join the pool
    assert by_id["t2"].lanes == ("context",)
    assert "lane:context" in by_id["t2"].reasons
    assert dict(by_id["t2"].factors)["context"] > 0
    assert "t4" not in by_id  # two lines away: not a neighbour of any anchor
    none = RankingPolicy(relevance=RelevancePolicy(context_anchors=0))
    alone = await run_recall(
        q, context(q.query, SESSION[0].vector), DictSource(SESSION), policy=none
    )
    assert [item.record.memory_id for item in alone.items] == ["t1"]


async def test_a_neighbour_outside_the_filters_or_deleted_never_joins() -> None:
    records = [SESSION[0], replace(SESSION[1], deleted=True), replace(SESSION[2], actor_id="x")]
    q = query(
        "what did bea paint last week",
        walk=NO_WALK,
        canonical_k=1,
        eidolon_k=0,
        bm25_k=1,
        filters=ProvenanceFilters(actor_id="y"),
    )
    outcome = await ask(
        DictSource([replace(r, actor_id="y") if r.memory_id == "t1" else r for r in records]),
        q,
        vector=SESSION[0].vector,
    )
    assert [item.record.memory_id for item in outcome.items] == ["t1"]
