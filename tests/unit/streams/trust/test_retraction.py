"""grimoire.streams.trust.retraction: the retraction cascade as a pure plan."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

import pytest

from grimoire.streams.learn.curator.values import CuratedEntry, EntryStatus
from grimoire.streams.maintenance.compaction import DAY_MS
from grimoire.streams.maintenance.compaction_summary import (
    SummarySource,
    rolled_up_keys,
    rolled_up_tags,
    summary_text,
)
from grimoire.streams.model.records import Kind
from grimoire.streams.trust.retraction import (
    DerivationRole,
    DerivationView,
    DerivedNode,
    Edge,
    RetractionOp,
    SummaryShape,
    demoted,
    plan_retraction,
)

T0 = 1_790_000_000_000 - 1_790_000_000_000 % DAY_MS
CENTRE = "err:oom"


def episode(memory_id: str, n: int, *, keys: tuple[str, ...] = (CENTRE,)) -> DerivedNode:
    content = SummarySource(memory_id, f"worker {n} ran out of memory", T0 + n, keys, ("ops/oom",))
    return DerivedNode(memory_id, Kind.EPISODE.value, content=content)


def summary(memory_id: str, level: int = 1) -> DerivedNode:
    content = SummarySource(memory_id, f"Summary {memory_id}", T0 + 100, (CENTRE,), ("topic/gc",))
    return DerivedNode(
        memory_id, Kind.SUMMARY.value, content=content, summary=SummaryShape(CENTRE, T0, level)
    )


def insight(memory_id: str, sources: tuple[str, ...], **fields: object) -> DerivedNode:
    entry = CuratedEntry(
        memory_id=memory_id,
        kind=Kind.INSIGHT,
        text="Tool swap tends to work.",
        confidence=0.8,
        last_accessed_ms=T0,
        ts_ms=T0,
        status=EntryStatus.ACTIVE,
        source_ids=sources,
    )
    entry = replace(entry, **fields)  # type: ignore[arg-type]
    return DerivedNode(memory_id, entry.kind.value, entry=entry)


def records(*pairs: tuple[str, str]) -> list[Edge]:
    """memory <- event edges."""
    return [Edge(memory, event, DerivationRole.RECORD) for memory, event in pairs]


def view(
    edges: list[Edge], *nodes: DerivedNode, degrees: dict[str, int] | None = None
) -> DerivationView:
    return DerivationView(tuple(edges), {node.memory_id: node for node in nodes}, degrees or {})


def retracted(state: DerivationView, nodes: Sequence[DerivedNode], *events: str) -> DerivationView:
    """``state`` once each event in turn is retracted: the edges its plan drops are gone
    (the ``nodes`` stay as they are)."""
    for event in events:
        plan = plan_retraction(event, state)
        state = view([e for e in state.edges if e not in plan.dropped], *nodes)
    return state


def test_a_memory_goes_with_its_source_event() -> None:
    plan = plan_retraction("ev-1", view(records(("m1", "ev-1")), episode("m1", 1)))
    (step,) = plan.steps
    assert (step.op, step.memory_id, step.lost, step.kept) == (
        RetractionOp.RETRACT,
        "m1",
        ("ev-1",),
        (),
    )
    assert step.uncount_terms  # the write path counted its terms
    assert plan.dropped == (Edge("m1", "ev-1", DerivationRole.RECORD),)
    assert not plan.curated_changed


def test_an_unknown_source_plans_nothing() -> None:
    plan = plan_retraction("ev-9", view(records(("m1", "ev-1")), episode("m1", 1)))
    assert plan.empty and plan.steps == () and plan.dropped == ()


def test_every_part_of_an_event_goes() -> None:
    edges = records(("m1", "ev-1"), ("m2", "ev-1"), ("m3", "ev-2"))
    plan = plan_retraction(
        "ev-1", view(edges, episode("m1", 1), episode("m2", 2), episode("m3", 3))
    )
    assert [(s.op, s.memory_id) for s in plan.steps] == [
        (RetractionOp.RETRACT, "m1"),
        (RetractionOp.RETRACT, "m2"),
    ]


AGGREGATE = DerivedNode("agg", Kind.AGGREGATE.value, count=3)
AGG_EDGES = [
    *records(("t", "ev-t")),
    Edge("agg", "t", DerivationRole.ORIGIN),
    Edge("agg", "ev-1", DerivationRole.FOLD),
    Edge("agg", "ev-2", DerivationRole.FOLD),
]


def test_an_aggregate_loses_one_share_per_folded_event() -> None:
    plan = plan_retraction("ev-1", view(AGG_EDGES, episode("t", 0), AGGREGATE))
    (step,) = plan.steps
    assert (step.op, step.count, step.lost, step.kept) == (
        RetractionOp.REDUCE,
        2,
        ("ev-1",),
        ("ev-2", "t"),
    )
    assert plan.dropped == (Edge("agg", "ev-1", DerivationRole.FOLD),)


def test_a_fold_of_two_parts_takes_two_shares() -> None:
    edges = [*AGG_EDGES[:2], Edge("agg", "ev-1", DerivationRole.FOLD, 2)]
    plan = plan_retraction("ev-1", view(edges, episode("t", 0), replace(AGGREGATE, count=3)))
    assert [(s.op, s.count) for s in plan.steps] == [(RetractionOp.REDUCE, 1)]


def test_retracting_the_group_original_takes_its_share() -> None:
    plan = plan_retraction("ev-t", view(AGG_EDGES, episode("t", 0), AGGREGATE))
    assert [(s.op, s.memory_id, s.count) for s in plan.steps] == [
        (RetractionOp.RETRACT, "t", None),
        (RetractionOp.REDUCE, "agg", 2),
    ]


def test_an_aggregate_without_shares_is_retracted() -> None:
    nodes = (episode("t", 0), replace(AGGREGATE, count=1))
    state = retracted(view(AGG_EDGES, *nodes), nodes, "ev-1", "ev-2")
    plan = plan_retraction("ev-t", state)
    assert [(s.op, s.memory_id) for s in plan.steps] == [
        (RetractionOp.RETRACT, "t"),
        (RetractionOp.RETRACT, "agg"),
    ]
    assert set(plan.dropped) == set(state.edges)


def test_a_reinforcement_lowers_the_counter_only() -> None:
    edges = [*records(("m1", "ev-1")), Edge("m1", "ev-2", DerivationRole.REINFORCE)]
    node = replace(episode("m1", 1), reinforced_count=3)
    plan = plan_retraction("ev-2", view(edges, node))
    (step,) = plan.steps
    assert (step.op, step.reinforced_count, step.lost) == (RetractionOp.UNREINFORCE, 2, ("ev-2",))
    # ...and the memory's own retraction takes the reinforcement edge with it.
    plan = plan_retraction("ev-1", view(edges, node))
    assert [s.op for s in plan.steps] == [RetractionOp.RETRACT]
    assert set(plan.dropped) == set(edges)


def _summary_world() -> tuple[list[Edge], list[DerivedNode]]:
    sources = [episode(f"m{n}", n, keys=(CENTRE, f"path:/srv/{n}")) for n in (1, 2, 3)]
    edges = records(("m1", "ev-1"), ("m2", "ev-2"), ("m3", "ev-3"))
    edges += [Edge("s", f"m{n}", DerivationRole.COMPACTED) for n in (1, 2, 3)]
    return edges, [*sources, summary("s")]


def test_a_summary_is_rebuilt_from_the_sources_left() -> None:
    edges, nodes = _summary_world()
    degrees = {CENTRE: 3, "path:/srv/2": 1, "path:/srv/3": 1}
    plan = plan_retraction("ev-1", view(edges, *nodes, degrees=degrees))
    assert [(s.op, s.memory_id) for s in plan.steps] == [
        (RetractionOp.RETRACT, "m1"),
        (RetractionOp.REBUILD, "s"),
    ]
    rebuilt = plan.steps[1].summary
    assert rebuilt is not None
    kept = [n.content for n in nodes if n.memory_id in ("m2", "m3") and n.content]
    assert rebuilt.text == summary_text(kept, centre=CENTRE, bucket_start_ms=T0, max_tokens=400)
    assert rebuilt.text.startswith("Summary of 2 memories on err:oom")
    assert "worker 1 " not in rebuilt.text
    assert rebuilt.keys == rolled_up_keys(kept, degrees, centre=CENTRE, limit=32)
    assert rebuilt.tags == rolled_up_tags(kept, limit=16)
    assert (rebuilt.source_ids, rebuilt.summary_of, rebuilt.ts_ms) == (("m2", "m3"), (), T0 + 3)
    assert plan.steps[1].lost == ("m1",) and plan.steps[1].kept == ("m2", "m3")


def test_a_summary_left_without_sources_is_retracted() -> None:
    edges, nodes = _summary_world()
    state = retracted(view(edges, *nodes), nodes, "ev-1", "ev-2")
    plan = plan_retraction("ev-3", state)
    assert [(s.op, s.memory_id) for s in plan.steps] == [
        (RetractionOp.RETRACT, "m3"),
        (RetractionOp.RETRACT, "s"),
    ]
    assert not plan.steps[1].uncount_terms  # compaction never counted it


def test_a_summary_whose_sources_all_share_the_event_goes_at_once() -> None:
    """Both sources come from one event: the summary is decided after both."""
    edges = records(("m1", "ev-1"), ("m2", "ev-1"))
    edges += [Edge("s", "m1", DerivationRole.COMPACTED), Edge("s", "m2", DerivationRole.COMPACTED)]
    plan = plan_retraction("ev-1", view(edges, episode("m1", 1), episode("m2", 2), summary("s")))
    assert [(s.op, s.memory_id) for s in plan.steps] == [
        (RetractionOp.RETRACT, "m1"),
        (RetractionOp.RETRACT, "m2"),
        (RetractionOp.RETRACT, "s"),
    ]


def test_a_summary_of_a_rebuilt_summary_is_rebuilt_too() -> None:
    edges, nodes = _summary_world()
    edges += [
        Edge("s2", "s", DerivationRole.COMPACTED),
        Edge("s2", "other", DerivationRole.COMPACTED),
    ]
    other = replace(summary("other"), content=SummarySource("other", "Summary other", T0, ()))
    plan = plan_retraction("ev-1", view(edges, *nodes, other, summary("s2", level=2)))
    assert [(s.op, s.memory_id) for s in plan.steps] == [
        (RetractionOp.RETRACT, "m1"),
        (RetractionOp.REBUILD, "s"),
        (RetractionOp.REBUILD, "s2"),
    ]
    first, second = plan.steps[1].summary, plan.steps[2].summary
    assert first is not None and second is not None
    assert second.summary_of == ("other", "s")  # a level-2 summary names what it folds
    assert "Summary of 2 memories" in second.text  # its line for `s` is `s`'s new text


def test_an_insight_losing_part_of_its_evidence_is_demoted() -> None:
    edges = records(("e1", "ev-1"), ("e2", "ev-2"))
    edges += [Edge("i", "e1", DerivationRole.EVIDENCE), Edge("i", "e2", DerivationRole.EVIDENCE)]
    nodes = (episode("e1", 1), episode("e2", 2), insight("i", ("e1", "e2")))
    plan = plan_retraction("ev-1", view(edges, *nodes))
    assert [(s.op, s.memory_id) for s in plan.steps] == [
        (RetractionOp.RETRACT, "e1"),
        (RetractionOp.DEMOTE, "i"),
    ]
    entry = plan.steps[1].entry
    assert entry is not None
    assert entry.confidence == pytest.approx(0.4)  # 0.8 x 1 of 2
    assert entry.status is EntryStatus.DEMOTED  # under the insight threshold (0.6)
    assert entry.source_ids == ("e2",)
    assert plan.curated_changed
    assert plan.steps[1].details()["status"] == "demoted"


def test_an_insight_without_evidence_goes_and_takes_its_heuristic() -> None:
    edges = records(("e1", "ev-1"))
    edges += [Edge("i", "e1", DerivationRole.EVIDENCE), Edge("h", "i", DerivationRole.EVIDENCE)]
    heuristic = replace(insight("h", ("i",)), kind=Kind.HEURISTIC.value)
    nodes = (episode("e1", 1), insight("i", ("e1",)), heuristic)
    plan = plan_retraction("ev-1", view(edges, *nodes))
    assert [(s.op, s.memory_id) for s in plan.steps] == [
        (RetractionOp.RETRACT, "e1"),
        (RetractionOp.RETRACT, "i"),
        (RetractionOp.RETRACT, "h"),
    ]
    assert plan.curated_changed
    assert plan.steps[2].curated and not plan.steps[0].curated


def test_a_demoted_insight_leaves_its_heuristic_alone() -> None:
    edges = records(("e1", "ev-1"), ("e2", "ev-2"))
    edges += [Edge("i", "e1", DerivationRole.EVIDENCE), Edge("i", "e2", DerivationRole.EVIDENCE)]
    edges += [Edge("h", "i", DerivationRole.EVIDENCE)]
    nodes = (episode("e1", 1), episode("e2", 2), insight("i", ("e1", "e2")), insight("h", ("i",)))
    plan = plan_retraction("ev-1", view(edges, *nodes))
    assert [s.memory_id for s in plan.steps] == ["e1", "i"]


def test_the_demotion_rule() -> None:
    entry = insight("i", ("a", "b", "c", "d")).entry
    assert entry is not None
    kept = demoted(entry, 3, 4, {"a"})
    assert kept.confidence == pytest.approx(0.6)  # 0.8 x 3/4: still active at 0.6
    assert kept.status is EntryStatus.ACTIVE and kept.source_ids == ("b", "c", "d")
    playbook = replace(entry, kind=Kind.HEURISTIC, status=EntryStatus.PLAYBOOK)
    assert demoted(playbook, 3, 4, {"a"}).status is EntryStatus.DEMOTED  # under 0.7
    proposed = replace(entry, status=EntryStatus.PROPOSED)
    assert demoted(proposed, 1, 4, {"a"}).status is EntryStatus.PROPOSED
    assert demoted(entry, 1, 100, {"a"}).confidence == 0.05  # the decay floor
    low = replace(entry, confidence=0.01)
    assert demoted(low, 1, 2, {"a"}).confidence == 0.01  # never raised to the floor
    assert demoted(entry, 0, 0, ()) is entry


def test_a_memory_named_as_the_source_goes_with_what_derives_from_it() -> None:
    edges, nodes = _summary_world()
    plan = plan_retraction("m2", view(edges, *nodes))
    assert [(s.op, s.memory_id) for s in plan.steps] == [
        (RetractionOp.RETRACT, "m2"),
        (RetractionOp.REBUILD, "s"),
    ]
    assert Edge("m2", "ev-2", DerivationRole.RECORD) in plan.dropped


def test_a_memory_retracted_already_changes_nothing_again() -> None:
    edges = records(("m1", "ev-1"))
    plan = plan_retraction("ev-1", view(edges, replace(episode("m1", 1), retracted=True)))
    assert plan.steps == () and plan.dropped == tuple(edges)


def test_a_summary_source_that_is_gone_is_left_out_of_the_rebuild() -> None:
    edges, nodes = _summary_world()
    present = [n for n in nodes if n.memory_id != "m3"]  # m3's hash is gone
    plan = plan_retraction("ev-1", view(edges, *present))
    rebuilt = plan.steps[1].summary
    assert rebuilt is not None and rebuilt.source_ids == ("m2",)


def test_the_plan_depends_on_the_graph_not_on_its_order() -> None:
    edges, nodes = _summary_world()
    edges += [Edge("i", "m1", DerivationRole.EVIDENCE), Edge("i", "m2", DerivationRole.EVIDENCE)]
    nodes += [insight("i", ("m1", "m2")), AGGREGATE]
    edges += [Edge("agg", "ev-1", DerivationRole.FOLD), Edge("agg", "ev-2", DerivationRole.FOLD)]
    plans = set()
    for seed in range(5):
        shuffled_edges, shuffled_nodes = list(edges), list(nodes)
        random.Random(seed).shuffle(shuffled_edges)
        random.Random(seed).shuffle(shuffled_nodes)
        plans.add(plan_retraction("ev-1", view(shuffled_edges, *shuffled_nodes)))
    (plan,) = plans
    assert [(s.op, s.memory_id) for s in plan.steps] == [
        (RetractionOp.REDUCE, "agg"),
        (RetractionOp.RETRACT, "m1"),
        (RetractionOp.DEMOTE, "i"),
        (RetractionOp.REBUILD, "s"),
    ]


def test_a_cycle_in_the_index_still_plans_in_a_fixed_order() -> None:
    edges = [
        *records(("a", "ev-1")),
        Edge("a", "b", DerivationRole.COMPACTED),
        Edge("b", "a", DerivationRole.COMPACTED),
    ]
    plan = plan_retraction("ev-1", view(edges, summary("a"), summary("b")))
    assert [s.memory_id for s in plan.steps] == sorted(s.memory_id for s in plan.steps)
    assert {s.memory_id for s in plan.steps} <= {"a", "b"}
