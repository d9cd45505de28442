"""`bench learning` at its smallest, through the real broker, Redis and a worker: one
agent slot (a learner, its two shadows and a learning-off actor), one situation,
four runs. What is checked is that every `configure` was applied (a refused one
would leave a shadow learning), the report's shape and that its counts add up
(every episode of every run decided, every run ended and scored or skipped), not
the learning targets."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.learning import (
    GRIMOIRE_CONFIG,
    LEARNING_OFF,
    NO_OUTCOME_PRIOR_CONFIG,
    LearningOptions,
    run_learning,
)
from bench.learning_arms import ARMS
from grimoire.infra.settings import Settings

pytestmark = pytest.mark.integration

RUNS = 4


async def test_a_tiny_learning_bench_runs_end_to_end_and_its_counts_add_up(
    settings: Settings, tmp_path: Path
) -> None:
    options = LearningOptions(agents=1, situations=1, actions=4, runs=RUNS, seed=3, warmup=1)

    report = await run_learning(settings, options, log_dir=tmp_path)

    # Every setting of every agent was applied, none refused.
    assert report["learning_config"] == {
        "learner-0": dict.fromkeys(GRIMOIRE_CONFIG, "applied"),
        "shadow-0": dict.fromkeys(LEARNING_OFF, "applied"),
        "noprior-0": dict.fromkeys(NO_OUTCOME_PRIOR_CONFIG, "applied"),
        "off-0": dict.fromkeys(LEARNING_OFF, "applied"),
    }
    assert report["configure_refused"] == []
    assert "outcome_prior_note" not in report
    # And the recalls obeyed them (the last reply's explain section of each agent).
    used = report["weights_source"]
    assert (used["learner-0"]["outcome_bias"], used["noprior-0"]["outcome_bias"]) == (1.0, 0.0)
    assert used["learner-0"]["causal_scoring"] is used["noprior-0"]["causal_scoring"] is True
    for agent in ("shadow-0", "off-0"):
        assert (used[agent]["source"], used[agent]["updates"]) == ("static", 0), agent
        assert used[agent]["causal_scoring"] is False, agent

    assert report["runs"] == RUNS
    assert report["recalls"] == 4 * RUNS  # the four agents', run for run
    assert list(report["arms"]) == list(ARMS)
    for arm, figures in report["arms"].items():
        assert figures["runs"] == RUNS, arm
        assert 0.0 <= figures["regret"] <= RUNS, arm
        assert figures["late_runs"] == 1, arm  # the last third of 4 runs: the last one
        assert figures["late_success_rate"] in (0.0, 1.0), arm
    assert report["arms"]["oracle"]["regret"] == 0.0
    assert set(report["targets"]) == {
        "grimoire_regret_over_thompson",
        "grimoire_late_success_over_oracle",
        "learning_off_regret_over_grimoire",
    }
    assert isinstance(report["weights"], dict)
    assert report["weights"] or report["weights_note"]

    scoring = report["success_first"]
    assert scoring["warmup_recalls_skipped"] == 1  # the first visit of the one situation
    for side, rate_key in (
        ("learning", "success_first_rate"),
        ("without_learning", "success_first_rate_without_learning"),
        ("without_outcome_prior", "success_first_rate_without_outcome_prior"),
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

    # Every episode of every run (3 per run, four agents) was decided once.
    decided = sum(
        count
        for kind, count in report["decisions"].items()
        if kind.rsplit("/", 1)[-1] in ("trigger", "action", "outcome")
    )
    assert decided == 4 * RUNS * 3
    assert report["timings"]["run_ms"]["p50"] > 0
