"""`bench learning` at its smallest, through the real broker, Redis and a worker: one
learning agent and its shadow, one situation, four runs. What is checked is the
report's shape and that its counts add up (every episode of every run decided,
every run ended and scored or skipped), not the learning target."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.learning import LEARNING_ON, LearningOptions, run_learning
from grimoire.infra.settings import Settings

pytestmark = pytest.mark.integration

RUNS = 4


async def test_a_tiny_learning_bench_runs_end_to_end_and_its_counts_add_up(
    settings: Settings, tmp_path: Path
) -> None:
    options = LearningOptions(agents=1, situations=1, actions=4, runs=RUNS, seed=3, warmup=1)

    report = await run_learning(settings, options, log_dir=tmp_path)

    for key in (
        "runs",
        "success_first_rate",
        "success_first_rate_without_learning",
        "regret",
        "weights",
    ):
        assert key in report, key
    assert report["runs"] == RUNS
    assert report["recalls"] == 2 * RUNS  # the learner's and the shadow's, run for run
    assert isinstance(report["weights"], dict)
    assert report["weights"] or report["weights_note"]
    assert 0.0 <= report["regret"] <= RUNS
    assert report["regret_per_run"] == pytest.approx(report["regret"] / RUNS, abs=1e-3)

    scoring = report["success_first"]
    assert scoring["warmup_recalls_skipped"] == 1  # the first visit of the one situation
    for side, rate_key in (
        ("learning", "success_first_rate"),
        ("without_learning", "success_first_rate_without_learning"),
    ):
        counted = scoring[side]
        assert (
            counted["scored"] + counted["without_situation_memory"] + scoring["before_any_success"]
            == RUNS - 1
        )
        assert 0 <= counted["success_first"] <= counted["scored"]
        rate = report[rate_key]
        if counted["scored"]:
            assert rate == pytest.approx(counted["success_first"] / counted["scored"], abs=1e-3)
        else:
            assert rate is None
    # By the second run the first run's memories are there to recall.
    assert scoring["learning"]["without_situation_memory"] == 0
    assert sum(scoring["top_memory_role"].values()) == RUNS

    # Every episode of every run (3 per run, learner and shadow) was decided once.
    decided = sum(
        count
        for kind, count in report["decisions"].items()
        if kind.rsplit("/", 1)[-1] in ("trigger", "action", "outcome")
    )
    assert decided == 2 * RUNS * 3
    assert set(report["learning_config"]) == {"learner-0", "shadow-0"}
    for answers in report["learning_config"].values():
        assert set(answers) == set(LEARNING_ON)
        assert all(a == "applied" or a.startswith("refused") for a in answers.values())
    assert report["timings"]["run_ms"]["p50"] > 0
