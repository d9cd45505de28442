"""grimoire.streams.trust.retraction: what a retraction takes back of the shares
a source event added to memories that stand on others (reinforcements), and of
an aggregate whose text came from the event retracted (its seed)."""

from __future__ import annotations

from dataclasses import replace

from grimoire.streams.maintenance.compaction import DAY_MS
from grimoire.streams.maintenance.compaction_summary import SummarySource
from grimoire.streams.model.records import Kind
from grimoire.streams.trust.retraction import (
    DerivationRole,
    DerivationView,
    DerivedNode,
    Edge,
    RebuiltSummary,
    RetractionOp,
    SummaryShape,
    plan_retraction,
)

T0 = 1_790_000_000_000 - 1_790_000_000_000 % DAY_MS


def memory(memory_id: str, text: str, ts: int, *, kind: Kind = Kind.EPISODE) -> DerivedNode:
    content = SummarySource(memory_id, text, ts, (f"key:{memory_id}",), (f"tag/{memory_id}",))
    return DerivedNode(memory_id, kind.value, content=content)


def view(edges: list[Edge], *nodes: DerivedNode) -> DerivationView:
    return DerivationView(tuple(edges), {node.memory_id: node for node in nodes})


def without(
    state: DerivationView, dropped: tuple[Edge, ...], *nodes: DerivedNode
) -> DerivationView:
    """The view after a retraction was applied: its edges dropped, `nodes` as now stored."""
    stored = {**state.nodes, **{node.memory_id: node for node in nodes}}
    return DerivationView(tuple(e for e in state.edges if e not in dropped), stored)


# ---- reinforcements -----------------------------------------------------------------


def test_an_event_reinforcing_twice_takes_both_shares_back() -> None:
    """Two parts of one event merged into the same memory: one edge of weight 2."""
    edges = [
        Edge("m1", "ev-1", DerivationRole.RECORD),
        Edge("m1", "ev-2", DerivationRole.REINFORCE, 2),
    ]
    node = replace(memory("m1", "disk full", T0), reinforced_count=3)
    plan = plan_retraction("ev-2", view(edges, node))
    (step,) = plan.steps
    assert (step.op, step.memory_id, step.reinforced_count) == (RetractionOp.UNREINFORCE, "m1", 1)
    assert step.details() == {
        "kind": "episode",
        "lost": ["ev-2"],
        "kept": [],
        "reinforced_count": 1,
    }
    assert plan.dropped == (Edge("m1", "ev-2", DerivationRole.REINFORCE, 2),)


def test_a_reinforcement_never_keeps_a_memory_alive() -> None:
    """The memory's own event goes: the reinforcing one left does not sustain it."""
    edges = [
        Edge("m1", "ev-1", DerivationRole.RECORD),
        Edge("m1", "ev-2", DerivationRole.REINFORCE),
    ]
    node = replace(memory("m1", "disk full", T0), reinforced_count=1)
    plan = plan_retraction("ev-1", view(edges, node))
    assert [(s.op, s.memory_id) for s in plan.steps] == [(RetractionOp.RETRACT, "m1")]
    assert set(plan.dropped) == set(edges)


def test_a_memory_retracted_by_the_cascade_is_not_unreinforced_as_well() -> None:
    """A summary whose one readable source goes is retracted; the reinforcement by
    the same event goes with it, with no counter step for a retracted memory."""
    edges = [
        Edge("m1", "ev-1", DerivationRole.RECORD),
        Edge("s", "m1", DerivationRole.COMPACTED),
        Edge("s", "gone", DerivationRole.COMPACTED),  # a source whose hash is gone
        Edge("s", "ev-1", DerivationRole.REINFORCE),
    ]
    shape = SummaryShape("key:m1", T0, 1)
    summary = replace(
        memory("s", "Summary s", T0 + 1, kind=Kind.SUMMARY), summary=shape, reinforced_count=1
    )
    plan = plan_retraction("ev-1", view(edges, memory("m1", "disk full", T0), summary))
    assert [(s.op, s.memory_id) for s in plan.steps] == [
        (RetractionOp.RETRACT, "m1"),
        (RetractionOp.RETRACT, "s"),
    ]


# ---- an aggregate's text and its seed -------------------------------------------------

ORIGIN_TEXT = "rpc endpoint on node seven timed out"
SEED_TEXT = "rpc endpoint on node seven timed out again"
ORIGIN = memory("t", ORIGIN_TEXT, T0)
# The aggregate was created by the fold of ev-1 (its seed): its text is ev-1's.
AGGREGATE = DerivedNode(
    "agg",
    Kind.AGGREGATE.value,
    count=3,
    content=SummarySource("agg", SEED_TEXT, T0 + 1, ("key:seed",), ("tag/seed",)),
    source_event_id="ev-1",
)
EDGES = [
    Edge("t", "ev-t", DerivationRole.RECORD),
    Edge("agg", "t", DerivationRole.ORIGIN),
    Edge("agg", "ev-1", DerivationRole.FOLD),
    Edge("agg", "ev-2", DerivationRole.FOLD),
]
FROM_ORIGIN = RebuiltSummary(
    text=ORIGIN_TEXT,
    ts_ms=T0,
    keys=("key:t",),
    tags=("tag/t",),
    source_ids=("t",),
    summary_of=(),
)


def test_retracting_the_seed_takes_its_share_and_its_text() -> None:
    plan = plan_retraction("ev-1", view(EDGES, ORIGIN, AGGREGATE))
    assert [(s.op, s.memory_id) for s in plan.steps] == [
        (RetractionOp.REDUCE, "agg"),
        (RetractionOp.REBUILD, "agg"),
    ]
    reduce, rebuild = plan.steps
    assert (reduce.count, reduce.lost, reduce.kept) == (2, ("ev-1",), ("ev-2", "t"))
    assert rebuild.summary == FROM_ORIGIN  # the origin's text, keys, tags and time
    assert rebuild.details() == {
        "kind": "aggregate",
        "lost": ["ev-1"],
        "kept": ["ev-2", "t"],
        "source_ids": ["t"],
        "ts": T0,
    }
    assert plan.dropped == (Edge("agg", "ev-1", DerivationRole.FOLD),)


def test_retracting_another_fold_leaves_the_seed_s_text() -> None:
    plan = plan_retraction("ev-2", view(EDGES, ORIGIN, AGGREGATE))
    assert [(s.op, s.memory_id, s.count) for s in plan.steps] == [(RetractionOp.REDUCE, "agg", 2)]


def test_retracting_the_origin_leaves_the_seed_s_text() -> None:
    plan = plan_retraction("ev-t", view(EDGES, ORIGIN, AGGREGATE))
    assert [(s.op, s.memory_id, s.count) for s in plan.steps] == [
        (RetractionOp.RETRACT, "t", None),
        (RetractionOp.REDUCE, "agg", 2),
    ]


def test_the_seed_gone_with_no_readable_member_left_retracts_the_aggregate() -> None:
    """The origin went first: the folds left have no stored text to show."""
    state = view(EDGES, ORIGIN, AGGREGATE)
    first = plan_retraction("ev-t", state)
    state = without(
        state, first.dropped, replace(ORIGIN, retracted=True), replace(AGGREGATE, count=2)
    )
    plan = plan_retraction("ev-1", state)
    (step,) = plan.steps
    assert (step.op, step.memory_id, step.lost, step.kept) == (
        RetractionOp.RETRACT,
        "agg",
        ("ev-1",),
        (),
    )
    assert not step.uncount_terms  # the write path never counted an aggregate's terms
    assert set(plan.dropped) == {
        Edge("agg", "ev-1", DerivationRole.FOLD),
        Edge("agg", "ev-2", DerivationRole.FOLD),
    }


def test_the_seed_and_the_origin_of_one_event_go_together() -> None:
    """One event both wrote the origin and seeded the aggregate (two of its parts)."""
    edges = [
        Edge("t", "ev-1", DerivationRole.RECORD),
        Edge("agg", "t", DerivationRole.ORIGIN),
        Edge("agg", "ev-1", DerivationRole.FOLD),
        Edge("agg", "ev-2", DerivationRole.FOLD),
    ]
    plan = plan_retraction("ev-1", view(edges, ORIGIN, AGGREGATE))
    assert [(s.op, s.memory_id) for s in plan.steps] == [
        (RetractionOp.RETRACT, "t"),
        (RetractionOp.RETRACT, "agg"),
    ]


def test_once_rebuilt_the_aggregate_stands_on_its_origin() -> None:
    state = view(EDGES, ORIGIN, AGGREGATE)
    first = plan_retraction("ev-1", state)
    rebuilt = replace(
        AGGREGATE,
        count=2,
        content=SummarySource("agg", ORIGIN_TEXT, T0, ("key:t",), ("tag/t",)),
    )
    state = without(state, first.dropped, rebuilt)
    # The origin's event goes: the text it gave goes too, though ev-2's share is left.
    plan = plan_retraction("ev-t", state)
    assert [(s.op, s.memory_id) for s in plan.steps] == [
        (RetractionOp.RETRACT, "t"),
        (RetractionOp.RETRACT, "agg"),
    ]
    assert plan.steps[1].lost == ("t",)
    # ...while another fold's retraction only takes its share.
    plan = plan_retraction("ev-2", state)
    assert [(s.op, s.memory_id, s.count) for s in plan.steps] == [(RetractionOp.REDUCE, "agg", 1)]


def test_an_aggregate_standing_on_a_rebuilt_origin_is_rebuilt_with_it() -> None:
    """The origin is a summary, rebuilt by the cascade: the aggregate showing its
    text (its seed retracted before) takes the new text."""
    sources = [memory(f"m{n}", f"worker {n} ran out of memory", T0 + n) for n in (1, 2)]
    summary = replace(
        memory("t", "Summary of 2 memories", T0 + 5, kind=Kind.SUMMARY),
        summary=SummaryShape("key:m1", T0, 1),
    )
    shown = replace(
        AGGREGATE, content=SummarySource("agg", "Summary of 2 memories", T0 + 5, ("key:t",))
    )
    edges = [
        Edge("m1", "ev-m1", DerivationRole.RECORD),
        Edge("m2", "ev-m2", DerivationRole.RECORD),
        Edge("t", "m1", DerivationRole.COMPACTED),
        Edge("t", "m2", DerivationRole.COMPACTED),
        Edge("agg", "t", DerivationRole.ORIGIN),
        Edge("agg", "ev-2", DerivationRole.FOLD),  # the seed's fold (ev-1) is gone
    ]
    plan = plan_retraction("ev-m1", view(edges, *sources, summary, shown))
    assert [(s.op, s.memory_id) for s in plan.steps] == [
        (RetractionOp.RETRACT, "m1"),
        (RetractionOp.REBUILD, "t"),
        (RetractionOp.REBUILD, "agg"),
    ]
    summary_step, aggregate_step = plan.steps[1], plan.steps[2]
    assert summary_step.summary is not None and aggregate_step.summary is not None
    assert aggregate_step.summary.text == summary_step.summary.text
    assert aggregate_step.summary.source_ids == ("t",)
    assert (aggregate_step.lost, aggregate_step.count) == ((), None)  # no share of it went


def test_a_summary_of_the_aggregate_is_rebuilt_from_its_new_text() -> None:
    edges = [
        *EDGES,
        Edge("s", "agg", DerivationRole.COMPACTED),
        Edge("s", "m9", DerivationRole.COMPACTED),
    ]
    other = memory("m9", "rpc endpoint on node nine timed out", T0 + 9)
    shape = SummaryShape("key:seed", T0, 1)
    summary = replace(memory("s", "Summary s", T0 + 10, kind=Kind.SUMMARY), summary=shape)
    plan = plan_retraction("ev-1", view(edges, ORIGIN, AGGREGATE, other, summary))
    assert [(s.op, s.memory_id) for s in plan.steps] == [
        (RetractionOp.REDUCE, "agg"),
        (RetractionOp.REBUILD, "agg"),
        (RetractionOp.REBUILD, "s"),
    ]
    rebuilt = plan.steps[2].summary
    assert rebuilt is not None
    assert ORIGIN_TEXT in rebuilt.text and SEED_TEXT not in rebuilt.text


def test_an_aggregate_read_without_its_seed_keeps_its_text() -> None:
    """A store that does not name the seed: no fold can be told to be it."""
    unknown = replace(AGGREGATE, source_event_id="")
    plan = plan_retraction("ev-1", view(EDGES, ORIGIN, unknown))
    assert [(s.op, s.memory_id, s.count) for s in plan.steps] == [(RetractionOp.REDUCE, "agg", 2)]
