"""The learning bench's reference arms (oracle, Thompson sampling, uniform) and how
every arm is scored: the same world and outcome draws for every arm, Thompson
deterministic, the oracle without regret, uniform choice's regret as its closed
form says."""

from __future__ import annotations

import pytest

from bench.learning_arms import (
    ARMS,
    arm_summary,
    play_oracle,
    play_thompson,
    play_uniform,
    reference_arms,
    targets,
)
from bench.learning_env import (
    Environment,
    Run,
    build_environment,
    late_start,
    outcome_draw,
    regret,
    schedule,
    uniform_regret,
)


def _env(seed: int = 7, **sizes: int) -> Environment:
    shape = {"agents": 4, "situations": 3, "actions": 4, "runs_per_agent": 60} | sizes
    return build_environment(seed=seed, **shape)


def test_every_arm_meets_the_same_situations_and_draws_the_same_outcomes() -> None:
    env = _env()
    arms = reference_arms(env)
    for runs in arms.values():
        assert len(runs) == env.agents * env.runs_per_agent
        for run in runs:
            assert run.situation == schedule(env, run.slot)[run.index]
            # One draw per (slot, run), whatever the arm and its action.
            draw, _grade = outcome_draw(env, run.slot, run.index)
            p = env.situations[run.situation].actions[run.action].p_success
            assert run.success == (draw < p)
    # Where two arms chose the same action in the same run, they got the same result.
    same = 0
    for mine, theirs in zip(arms["uniform"], arms["thompson"], strict=True):
        assert (mine.slot, mine.index) == (theirs.slot, theirs.index)
        if mine.action == theirs.action:
            same += 1
            assert (mine.success, mine.quality) == (theirs.success, theirs.quality)
    assert same > 0


def test_the_arms_are_the_same_for_the_same_seed() -> None:
    assert reference_arms(_env()) == reference_arms(_env())


def test_thompson_sampling_is_deterministic_and_seeded() -> None:
    first, again = play_thompson(_env()), play_thompson(_env())
    assert first == again
    assert [r.action for r in play_thompson(_env(seed=8))] != [r.action for r in first]


def test_thompson_sampling_learns_the_best_actions() -> None:
    env = _env()
    thompson = arm_summary(env, play_thompson(env))
    uniform = arm_summary(env, play_uniform(env))
    assert thompson["regret"] < 0.75 * uniform["regret"]
    assert thompson["late_best_action_share"] > 0.6
    assert uniform["late_best_action_share"] < 0.45


def test_the_oracle_always_takes_the_best_action_and_has_no_regret() -> None:
    env = _env()
    runs = play_oracle(env)
    assert all(r.action == env.situations[r.situation].best for r in runs)
    summary = arm_summary(env, runs)
    assert summary["regret"] == 0.0
    assert summary["late_best_action_share"] == 1.0


def test_uniform_regret_has_its_closed_form() -> None:
    # The closed form on a tiny case, by hand: one situation, 3 runs.
    tiny = _env(agents=1, situations=1, runs_per_agent=3)
    odds = [a.p_success for a in tiny.situations[0].actions]
    assert uniform_regret(tiny) == pytest.approx(3 * (max(odds) - sum(odds) / 4), abs=1e-4)
    # The seeded uniform arm's regret comes to it over many runs.
    many = _env(agents=2, situations=1, actions=2, runs_per_agent=2_000)
    played = regret(many, play_uniform(many))
    assert played == pytest.approx(uniform_regret(many), rel=0.05)


def test_an_arms_summary_counts_regret_and_its_last_third() -> None:
    env = _env(agents=1, situations=1, runs_per_agent=6)
    spec = env.situations[0]
    best, worse = spec.best, (spec.best + 1) % 4
    gap = spec.p_best - spec.actions[worse].p_success
    actions = [worse, worse, worse, best, best, worse]
    results = [False, False, True, True, False, True]
    runs = [
        Run(f"r{i}", 0, i, 0, a, s, 0.9 if s else 0.1)
        for i, (a, s) in enumerate(zip(actions, results, strict=True))
    ]
    summary = arm_summary(env, runs)
    assert late_start(6) == 4
    assert summary["late_runs"] == 2
    assert summary["late_success_rate"] == 0.5
    assert summary["late_best_action_share"] == 0.5
    expected_late = (spec.p_best + spec.actions[worse].p_success) / 2
    assert summary["late_expected_success_rate"] == pytest.approx(expected_late, abs=1e-4)
    assert summary["regret"] == pytest.approx(4 * gap, abs=1e-4)
    assert summary["success_rate"] == 0.5
    assert late_start(60) == 40
    assert late_start(2) == 1  # at least the last run


def test_targets_compare_grimoire_with_thompson_the_oracle_and_learning_off() -> None:
    arms = {
        "oracle": {"regret": 0.0, "late_success_rate": 0.8},
        "thompson": {"regret": 50.0, "late_success_rate": 0.7},
        "grimoire": {"regret": 55.0, "late_success_rate": 0.7},
        "grimoire_learning_off": {"regret": 100.0, "late_success_rate": 0.4},
        "uniform": {"regret": 110.0, "late_success_rate": 0.4},
    }
    assert list(arms) == list(ARMS)
    met = targets(arms)
    assert met["grimoire_regret_over_thompson"] == {"value": 1.1, "max": 1.2, "met": True}
    assert met["grimoire_late_success_over_oracle"]["value"] == 0.875
    assert met["grimoire_late_success_over_oracle"]["met"] is True
    assert met["learning_off_regret_over_grimoire"]["met"] is True
    worse = targets({**arms, "grimoire": {"regret": 70.0, "late_success_rate": 0.6}})
    assert worse["grimoire_regret_over_thompson"]["met"] is False
    assert worse["grimoire_late_success_over_oracle"]["met"] is False
    assert targets({})["grimoire_regret_over_thompson"]["met"] is None
