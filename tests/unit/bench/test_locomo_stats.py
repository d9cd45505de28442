"""bench.locomo_stats: folds of conversations, figures per category, bootstrap
intervals, and the report they make together."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bench.locomo_stats import (
    OVERALL,
    assign_folds,
    bootstrap_interval,
    bootstrap_set,
    measure,
    per_category,
    pick,
    recall_values,
    split_folds,
    summary_lines,
)
from bench.retrieval_metrics import Judged

IDS = [f"conv-{n}" for n in range(40)]


def test_folds_depend_only_on_the_ids_not_their_order_or_repetition() -> None:
    shuffled = list(IDS)
    random.Random(5).shuffle(shuffled)
    assert assign_folds(IDS, 3) == assign_folds(shuffled, 3) == assign_folds(IDS + IDS[:7], 3)
    # The same on every run and machine: SHA-256, not Python's salted hash().
    assert assign_folds(["conv-26", "conv-30", "conv-41", "conv-42", "conv-43"], 2) == {
        "conv-26": 0,
        "conv-41": 1,
        "conv-42": 0,
        "conv-43": 1,
        "conv-30": 0,
    }


@pytest.mark.parametrize(("count", "k"), [(5, 2), (10, 2), (40, 3), (7, 5), (3, 5)])
def test_folds_are_balanced_to_one_conversation(count: int, k: int) -> None:
    folds = assign_folds(IDS[:count], k)
    sizes = [sum(1 for f in folds.values() if f == fold) for fold in range(k)]
    assert sum(sizes) == count
    assert max(sizes) - min(sizes) <= 1
    assert set(folds.values()) <= set(range(k))


def test_folds_are_not_the_file_order() -> None:
    # Dealing out in the ids' own order would put conv-0, conv-2, ... in fold 0.
    assert [assign_folds(IDS, 2)[c] for c in IDS] != [n % 2 for n in range(len(IDS))]


def test_a_split_names_its_tune_and_report_folds() -> None:
    split = split_folds(IDS[:5], 2, report_fold=1)
    assert set(split.tune) | set(split.report) == set(IDS[:5])
    assert not set(split.tune) & set(split.report)
    described = split.describe()
    assert described["report_fold"] == 1 and described["tune_folds"] == [0]
    assert described["report"] == list(split.report) == sorted(split.report)
    with pytest.raises(ValueError):
        split_folds(IDS, 1)
    with pytest.raises(ValueError):
        split_folds(IDS, 2, report_fold=2)


def test_per_category_names_categories_one_to_four_and_leaves_adversarial_out() -> None:
    judged = [
        Judged(1, ("a",), ("a", "b")),  # multi-hop: R@5 0.5
        Judged(4, ("a",), ("a",)),  # single-hop: 1
        Judged(4, ("x",), ("a",)),  # single-hop: 0
        Judged(5, ("a",), ("a",)),  # adversarial: not in the table
    ]
    table = per_category(judged)
    assert list(table) == ["multi-hop", "temporal", "open-domain", "single-hop", OVERALL]
    assert table["multi-hop"]["R@5"] == 0.5 and table["multi-hop"]["n"] == 1
    assert table["temporal"] == {"R@5": 0.0, "R@10": 0.0, "NDCG@10": 0.0, "n": 0}
    assert table["single-hop"]["R@5"] == 0.5 and table["single-hop"]["n"] == 2
    assert table[OVERALL]["n"] == 3
    assert table[OVERALL]["R@5"] == pytest.approx((0.5 + 1 + 0) / 3, abs=1e-4)


def test_pick_keeps_the_wanted_conversations_in_their_order() -> None:
    by_conversation = {
        "c1": [Judged(4, ("a",), ("a",))],
        "c2": [Judged(1, ("b",), ("b",))],
        "c3": [Judged(2, ("c",), ("c",))],
    }
    assert [j.ranked for j in pick(by_conversation, ["c3", "c1"])] == [("a",), ("c",)]


def test_the_bootstrap_is_deterministic_and_contains_the_point_estimate() -> None:
    rng = np.random.default_rng(11)
    values = rng.random(300) ** 2
    first = bootstrap_interval(values, resamples=500, seed=3)
    assert first == bootstrap_interval(list(values), resamples=500, seed=3)
    assert first["point"] == round(float(values.mean()), 4)
    assert first["low"] is not None and first["high"] is not None
    assert first["low"] < first["point"] < first["high"]
    # Another seed moves the interval's ends a little, never the point.
    other = bootstrap_interval(values, resamples=500, seed=4)
    assert other["point"] == first["point"] and other != first


def test_the_bootstrap_interval_narrows_with_more_questions() -> None:
    rng = np.random.default_rng(2)
    small = bootstrap_interval(rng.integers(0, 2, 50), seed=0)
    large = bootstrap_interval(rng.integers(0, 2, 2000), seed=0)
    assert small["low"] is not None and small["high"] is not None
    assert large["low"] is not None and large["high"] is not None
    assert large["high"] - large["low"] < small["high"] - small["low"]


def test_a_constant_sample_has_a_zero_width_interval_and_an_empty_one_none() -> None:
    assert bootstrap_interval([1.0] * 20) == {"point": 1.0, "low": 1.0, "high": 1.0}
    assert bootstrap_interval([]) == {"point": None, "low": None, "high": None}
    with pytest.raises(ValueError):
        bootstrap_interval([1.0], resamples=0)


def test_bootstrap_set_counts_headline_questions_and_pairs_the_baseline() -> None:
    judged = [Judged(4, ("a",), ("a",)), Judged(1, ("x",), ("a",)), Judged(5, ("a",), ("a",))]
    bm25 = [Judged(4, ("x",), ("a",)), Judged(1, ("x",), ("a",)), Judged(5, ("a",), ("a",))]
    assert list(recall_values(judged, 5)) == [1.0, 0.0]  # category 5 left out
    intervals = bootstrap_set(judged, bm25, resamples=200, seed=0)
    assert intervals["R@5"]["point"] == 0.5 and intervals["R@10"]["point"] == 0.5
    assert intervals["R@5_minus_bm25"]["point"] == 0.5
    with pytest.raises(ValueError):
        bootstrap_set(judged, bm25[:1])


def _run() -> dict[str, list[Judged]]:
    hit, miss = ("a",), ("x",)
    return {
        conversation: [Judged(1 + (i % 5), hit if (i + n) % 3 else miss, ("a",)) for i in range(12)]
        for n, conversation in enumerate(IDS[:5])
    }


def test_measure_reports_all_conversations_the_report_folds_and_intervals() -> None:
    judged = _run()
    bm25 = {c: [Judged(j.category, ("x",), j.relevant) for j in js] for c, js in judged.items()}
    split = split_folds(IDS[:5], 2, report_fold=0)
    result = measure(judged, {"bm25": bm25, "dense": bm25}, split, resamples=100, seed=1)
    assert result == measure(judged, {"bm25": bm25, "dense": bm25}, split, resamples=100, seed=1)
    report, tune = result["report_folds"], result["tune_folds"]
    assert report["conversations"] == [c for c in IDS[:5] if c in split.report]
    assert tune["conversations"] == [c for c in IDS[:5] if c in split.tune]
    headline = sum(1 for js in judged.values() for j in js if j.category <= 4)
    assert result["per_category"][OVERALL]["n"] == headline
    assert report["per_category"][OVERALL]["n"] + tune["per_category"][OVERALL]["n"] == headline
    assert report["baselines"]["bm25"][OVERALL]["R@5"] == 0.0
    boot = result["bootstrap"]
    assert boot["resamples"] == 100 and boot["seed"] == 1
    for side, table in (("all", result["per_category"]), ("report", report["per_category"])):
        interval = boot[side]["R@5"]
        assert interval["point"] == pytest.approx(table[OVERALL]["R@5"], abs=1e-4)
        assert interval["low"] <= interval["point"] <= interval["high"]
    assert result["folds"]["report"] == list(split.report)


def test_a_subset_run_outside_the_report_fold_reports_empty_figures() -> None:
    judged = _run()
    split = split_folds(IDS[:5], 2, report_fold=0)
    only_tune = {c: judged[c] for c in split.tune}
    result = measure(only_tune, {"bm25": only_tune}, split, resamples=10)
    assert result["report_folds"]["conversations"] == []
    assert result["report_folds"]["per_category"][OVERALL]["n"] == 0
    assert result["bootstrap"]["report"]["R@5"] == {"point": None, "low": None, "high": None}


def test_the_summary_shows_the_table_the_folds_and_the_intervals() -> None:
    judged = _run()
    split = split_folds(IDS[:5], 2)
    measured = measure(judged, {"bm25": judged, "dense": judged}, split, resamples=50)
    overall = measured["per_category"][OVERALL]
    result = {
        "data": "dev.json",
        "conversations": list(judged),
        "baselines": {
            "bm25": {"overall_no_adv": overall},
            "dense": {"overall_no_adv": overall},
        },
        **measured,
        "ablated": {"walk": {"walk_num_walkers": 0}},
    }
    text = "\n".join(summary_lines(result))
    for name in ("multi-hop", "temporal", "open-domain", "single-hop", OVERALL):
        assert f"| {name} |" in text
    assert "report on fold 0: " + ", ".join(split.report) in text
    assert "ablated: walk (walk_num_walkers=0)" in text
    assert "bootstrap 95 % intervals (50 resamples, seed 0" in text
    assert f"R@5 {overall['R@5']:.3f} [" in text
