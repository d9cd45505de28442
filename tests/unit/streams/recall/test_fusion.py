"""grimoire.streams.recall.fusion: reciprocal rank fusion with hand-computed scores."""

from __future__ import annotations

import pytest

from grimoire.streams.recall.fusion import DEFAULT_RRF_K, FusedHit, reciprocal_rank_fusion


def test_default_k_is_60() -> None:
    assert DEFAULT_RRF_K == 60


def test_scores_ranks_and_order_for_two_lanes() -> None:
    fused = reciprocal_rank_fusion({"A": ["x", "y", "z"], "B": ["q", "w", "x"]})
    # x: A#1 + B#3 = 1/61 + 1/63; q: B#1 = 1/61; y: A#2 and w: B#2 = 1/62 (tie -> id);
    # z: A#3 = 1/63.
    assert [hit.id for hit in fused] == ["x", "q", "w", "y", "z"]
    expected = {"x": 1 / 61 + 1 / 63, "q": 1 / 61, "w": 1 / 62, "y": 1 / 62, "z": 1 / 63}
    for hit in fused:
        assert hit.score == pytest.approx(expected[hit.id], rel=1e-12)
    by_id = {hit.id: hit for hit in fused}
    assert (by_id["x"].lanes, by_id["x"].ranks) == (("A", "B"), (1, 3))
    assert (by_id["q"].lanes, by_id["q"].ranks) == (("B",), (1,))
    assert (by_id["y"].lanes, by_id["y"].ranks) == (("A",), (2,))
    assert (by_id["z"].lanes, by_id["z"].ranks) == (("A",), (3,))


def test_hit_in_both_lanes_beats_a_single_first_place() -> None:
    fused = reciprocal_rank_fusion({"dense": ["solo", "both"], "bm25": ["other", "both"]})
    assert fused[0].id == "both"
    assert fused[0].score == pytest.approx(2 / 62)


def test_ties_break_by_id() -> None:
    fused = reciprocal_rank_fusion({"A": ["b"], "B": ["a"], "C": ["c"]})
    assert [hit.id for hit in fused] == ["a", "b", "c"]
    assert {hit.score for hit in fused} == {1 / 61}


def test_duplicates_within_a_lane_count_once_at_best_rank() -> None:
    fused = reciprocal_rank_fusion({"A": ["x", "y", "x", "x"]})
    by_id = {hit.id: hit for hit in fused}
    assert by_id["x"].score == pytest.approx(1 / 61)
    assert by_id["x"].ranks == (1,)
    assert by_id["x"].lanes == ("A",)
    assert by_id["y"].score == pytest.approx(1 / 62)
    assert by_id["y"].ranks == (2,)


def test_duplicate_later_in_lane_keeps_the_earlier_rank() -> None:
    fused = reciprocal_rank_fusion({"A": ["p", "x", "q", "x"], "B": ["x"]})
    x = next(hit for hit in fused if hit.id == "x")
    assert x.ranks == (2, 1)
    assert x.score == pytest.approx(1 / 62 + 1 / 61)


@pytest.mark.parametrize(
    "lanes",
    [{}, {"A": []}, {"A": [], "B": []}],
    ids=["no-lanes", "one-empty", "two-empty"],
)
def test_empty_input(lanes: dict[str, list[str]]) -> None:
    assert reciprocal_rank_fusion(lanes) == []


def test_an_empty_lane_contributes_nothing() -> None:
    assert reciprocal_rank_fusion({"A": [], "B": ["x"]}) == [
        FusedHit(id="x", score=1 / 61, lanes=("B",), ranks=(1,))
    ]


def test_custom_k() -> None:
    fused = reciprocal_rank_fusion({"A": ["x", "y"], "B": ["y"]}, k=1)
    assert [hit.id for hit in fused] == ["y", "x"]
    assert fused[0].score == pytest.approx(1 / 3 + 1 / 2)
    assert fused[1].score == pytest.approx(1 / 2)


def test_k_zero_is_allowed() -> None:
    assert reciprocal_rank_fusion({"A": ["x"]}, k=0)[0].score == 1.0


def test_negative_k_raises() -> None:
    with pytest.raises(ValueError):
        reciprocal_rank_fusion({"A": ["x"]}, k=-1)


def test_lane_mapping_order_does_not_matter() -> None:
    one = reciprocal_rank_fusion({"A": ["x", "y"], "B": ["y", "z"], "C": ["z", "x"]})
    two = reciprocal_rank_fusion({"C": ["z", "x"], "A": ["x", "y"], "B": ["y", "z"]})
    assert one == two
    # lanes are reported in sorted lane order whatever the mapping's order
    assert all(list(hit.lanes) == sorted(hit.lanes) for hit in two)


def test_accepts_tuples_and_does_not_mutate_input() -> None:
    lanes = {"A": ("x", "y"), "B": ["y"]}
    reciprocal_rank_fusion(lanes)
    assert lanes == {"A": ("x", "y"), "B": ["y"]}
