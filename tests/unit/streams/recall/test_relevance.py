"""grimoire.streams.recall.relevance: pool scoring on lexical and semantic evidence plus
session context, hand-computed."""

from __future__ import annotations

import numpy as np
import pytest

from grimoire.streams.recall.ports import Anchor, adjacent_members
from grimoire.streams.recall.relevance import (
    NO_MATCH,
    QueryMatch,
    RelevancePolicy,
    anchors,
    cosines,
    score_pool,
)


def vec(*values: float) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def test_cosines_are_exact_and_empty_without_a_query() -> None:
    found = cosines(vec(1, 0), {"a": vec(2, 0), "b": vec(0, 3), "c": vec(1, 1), "z": vec(0, 0)})
    assert found == pytest.approx({"a": 1.0, "b": 0.0, "c": 2**-0.5, "z": 0.0})
    assert cosines(None, {"a": vec(1, 0)}) == {}
    assert cosines(vec(1, 0), {}) == {}


# Lexical and semantic blended half and half, whatever the default share.
HALF = RelevancePolicy(lexical_share=0.5)


def test_lexical_and_semantic_are_spread_over_the_pool_and_blended() -> None:
    lexical = {"a": 9.0, "b": 3.0}  # c holds none of the terms
    semantic = {"a": 0.2, "b": 0.8, "c": 0.5}
    out = score_pool(["a", "b", "c"], lexical, semantic, {}, HALF)
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
    out = score_pool(["question", "answer", "far"], lexical, semantic, neighbours, HALF)
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


# Shares that are powers of two, so each part of a boost shows in the sum exactly.
SHARES = RelevancePolicy(time_cue_share=0.5, time_window_share=0.25, actor_share=0.125)


def test_a_query_match_weighs_each_part_by_its_share() -> None:
    assert QueryMatch(cue=1.0).share(SHARES) == pytest.approx(0.5)
    assert QueryMatch(window=1.0).share(SHARES) == pytest.approx(0.25)
    assert QueryMatch(actor=1.0).share(SHARES) == pytest.approx(0.125)
    assert QueryMatch(cue=1.0, window=0.5, actor=1.0).share(SHARES) == pytest.approx(0.75)
    assert NO_MATCH.share(SHARES) == 0.0
    assert QueryMatch() == NO_MATCH


def test_a_match_boosts_a_memory_by_a_share_of_its_own_relevance() -> None:
    # lexical only: own relevance a 1, b 1/2, c 0
    lexical = {"a": 2.0, "b": 1.0, "c": 0.0}
    matches = {
        "a": QueryMatch(cue=1.0),
        "b": QueryMatch(cue=1.0, window=1.0, actor=1.0),
        "c": QueryMatch(cue=1.0, window=1.0, actor=1.0),
    }
    out = score_pool(["a", "b", "c"], lexical, {}, {}, SHARES, matches)
    assert out["a"].own == pytest.approx(1.0)
    assert out["a"].boost == pytest.approx(0.5)
    assert out["a"].total == pytest.approx(1.5)
    assert out["b"].own == pytest.approx(0.5)
    assert out["b"].boost == pytest.approx(0.5 * (0.5 + 0.25 + 0.125))
    assert out["b"].total == pytest.approx(0.5 + 0.5 * 0.875)
    # nothing of its own, nothing to boost
    assert (out["c"].boost, out["c"].total) == (0.0, 0.0)


def test_the_boost_follows_the_policy_shares() -> None:
    lexical = {"a": 1.0, "b": 0.0}  # own relevance: a 1, b 0
    policy = RelevancePolicy()
    match = QueryMatch(cue=1.0, window=1.0, actor=1.0)
    out = score_pool(["a", "b"], lexical, {}, {}, policy, {"a": match})
    expected = policy.time_cue_share + policy.time_window_share + policy.actor_share
    assert out["a"].boost == pytest.approx(expected)
    assert out["a"].total == pytest.approx(1.0 + expected)
    off = RelevancePolicy(time_cue_share=0.0, time_window_share=0.0, actor_share=0.0)
    assert score_pool(["a", "b"], lexical, {}, {}, off, {"a": match})["a"].boost == 0.0


def test_a_neighbour_lends_its_own_relevance_not_its_boost() -> None:
    # own relevance: question 1, answer 1/2
    lexical = {"question": 2.0, "answer": 1.0, "far": 0.0}
    neighbours = {"answer": ("question",), "question": ("answer",)}
    matches = {"question": QueryMatch(cue=1.0)}
    out = score_pool(["question", "answer", "far"], lexical, {}, neighbours, SHARES, matches)
    assert out["question"].total == pytest.approx(1.0 + 0.5 + 0.3 * 0.5)
    # context_share 0.3 of the question's own 1.0, not of its boosted 1.5
    assert out["answer"].context == pytest.approx(0.3)
    assert out["answer"].boost == 0.0
    assert out["answer"].total == pytest.approx(0.5 + 0.3)


def test_context_is_not_boosted_by_the_memory_s_own_match() -> None:
    # own relevance: question 1, answer 1/2
    lexical = {"question": 2.0, "answer": 1.0, "far": 0.0}
    neighbours = {"answer": ("question",)}
    matches = {"answer": QueryMatch(cue=1.0)}
    out = score_pool(["question", "answer", "far"], lexical, {}, neighbours, SHARES, matches)
    # answer: own 1/2, boost 1/2 * 0.5, context 0.3 * 1
    assert out["answer"].boost == pytest.approx(0.25)
    assert out["answer"].total == pytest.approx(0.5 + 0.25 + 0.3)


def test_anchors_rank_on_own_relevance_not_the_boost() -> None:
    # own relevance: a 1, b 1/2, c 0; b's match triples its own
    full = RelevancePolicy(time_cue_share=1.0, time_window_share=1.0, actor_share=1.0)
    lexical = {"a": 2.0, "b": 1.0, "c": 0.0}
    out = score_pool(["a", "b", "c"], lexical, {}, {}, full, {"b": QueryMatch(1.0, 1.0, 1.0)})
    assert out["b"].total == pytest.approx(2.0)
    assert out["b"].total > out["a"].total
    assert anchors(out, 1) == ["a"]


def test_without_matches_nothing_is_boosted() -> None:
    lexical = {"a": 9.0, "b": 3.0}
    semantic = {"a": 0.2, "b": 0.8, "c": 0.5}
    neighbours = {"a": ("b",)}
    for matches in (None, {}, {"elsewhere": QueryMatch(cue=1.0)}):
        out = score_pool(["a", "b", "c"], lexical, semantic, neighbours, SHARES, matches)
        for relevance in out.values():
            assert relevance.boost == 0.0
            assert relevance.total == pytest.approx(relevance.own + relevance.context)
    assert score_pool(["a", "b", "c"], lexical, semantic, neighbours) == score_pool(
        ["a", "b", "c"], lexical, semantic, neighbours, matches=None
    )


def test_policy_refuses_negative_match_shares() -> None:
    for bad in (
        {"time_cue_share": -0.1},
        {"time_window_share": -0.1},
        {"actor_share": -0.1},
    ):
        with pytest.raises(ValueError):
            RelevancePolicy(**bad)  # type: ignore[arg-type]
    none = RelevancePolicy(time_cue_share=0.0, time_window_share=0.0, actor_share=0.0)
    assert QueryMatch(1.0, 1.0, 1.0).share(none) == 0.0
