"""grimoire.streams.recall.relevance: pool scoring on lexical and semantic evidence plus
session context, hand-computed."""

from __future__ import annotations

import numpy as np
import pytest

from grimoire.streams.recall.ports import Anchor, adjacent_members
from grimoire.streams.recall.relevance import RelevancePolicy, anchors, cosines, score_pool


def vec(*values: float) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def test_cosines_are_exact_and_empty_without_a_query() -> None:
    found = cosines(vec(1, 0), {"a": vec(2, 0), "b": vec(0, 3), "c": vec(1, 1), "z": vec(0, 0)})
    assert found == pytest.approx({"a": 1.0, "b": 0.0, "c": 2**-0.5, "z": 0.0})
    assert cosines(None, {"a": vec(1, 0)}) == {}
    assert cosines(vec(1, 0), {}) == {}


def test_lexical_and_semantic_are_spread_over_the_pool_and_blended() -> None:
    lexical = {"a": 9.0, "b": 3.0}  # c holds none of the terms
    semantic = {"a": 0.2, "b": 0.8, "c": 0.5}
    out = score_pool(["a", "b", "c"], lexical, semantic, {})
    # lexical min-max: a 1, b 1/3, c 0; semantic: a 0, b 1, c 0.5
    assert out["a"].total == pytest.approx(0.5)
    assert out["b"].total == pytest.approx(0.5 * (1 / 3) + 0.5)
    assert out["c"].total == pytest.approx(0.25)
    assert (out["c"].lexical, out["c"].semantic, out["c"].context) == pytest.approx((0, 0.5, 0))
    leaning = score_pool(["a", "b", "c"], lexical, semantic, {}, RelevancePolicy(lexical_share=1))
    assert [leaning[i].total for i in "abc"] == pytest.approx([1.0, 1 / 3, 0.0])


def test_a_side_the_query_lacks_leaves_the_weight_to_the_other() -> None:
    semantic_only = score_pool(["a", "b"], {}, {"a": 0.9, "b": 0.1}, {})
    assert [semantic_only[i].total for i in "ab"] == pytest.approx([1.0, 0.0])
    lexical_only = score_pool(["a", "b"], {"a": 2.0, "b": 1.0}, {}, {})
    assert [lexical_only[i].total for i in "ab"] == pytest.approx([1.0, 0.0])
    # one pooled memory (or all equal): full marks where there is evidence, none where not
    single = score_pool(["a"], {"a": 2.0}, {"a": 0.3}, {})
    assert single["a"].total == pytest.approx(1.0)


def test_context_lends_a_share_of_the_best_pooled_neighbour() -> None:
    lexical = {"question": 0.0, "answer": 1.0, "far": 0.5}
    semantic = {"question": 1.0, "answer": 0.0, "far": 0.5}
    neighbours = {"answer": ("question", "outside", "answer"), "question": ("answer",)}
    out = score_pool(["question", "answer", "far"], lexical, semantic, neighbours)
    # own relevance 0.5 each; the pair lend each other 0.3 * 0.5, `outside` is
    # not pooled and a memory is never its own neighbour
    assert out["answer"].context == pytest.approx(0.15)
    assert out["question"].total == pytest.approx(0.65)
    assert out["far"].total == pytest.approx(0.5)
    off = score_pool(
        ["question", "answer"], lexical, semantic, neighbours, RelevancePolicy(context_share=0)
    )
    assert off["answer"].context == 0.0


def test_anchors_are_the_most_relevant_on_their_own_with_ties_on_id() -> None:
    out = score_pool(["b", "a", "c"], {"a": 1.0, "b": 1.0, "c": 0.0}, {}, {"c": ("a",)})
    assert anchors(out, 2) == ["a", "b"]
    assert anchors(out, 0) == []


def test_policy_bounds() -> None:
    for bad in (
        {"lexical_share": 1.5},
        {"context_share": -0.1},
        {"context_anchors": -1},
        {"pool_depth": 0},
    ):
        with pytest.raises(ValueError):
            RelevancePolicy(**bad)  # type: ignore[arg-type]


def test_adjacent_members_are_the_previous_and_next_in_event_time() -> None:
    members = {"t1": 1_000, "t2": 2_000, "t3": 3_000, "t4": 4_000}
    assert adjacent_members(members, Anchor("t2", "session:s", 2_000)) == ("t1", "t3")
    assert adjacent_members(members, Anchor("t1", "session:s", 1_000)) == ("t2",)
    assert adjacent_members(members, Anchor("t4", "session:s", 4_000)) == ("t3",)
    assert adjacent_members({"t1": 1_000}, Anchor("t1", "session:s", 1_000)) == ()
    # equal event times order on id, as a sorted set does
    tied = {"a": 5, "b": 5, "c": 5}
    assert adjacent_members(tied, Anchor("b", "k", 5)) == ("c", "a")
