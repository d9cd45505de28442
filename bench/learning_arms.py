"""The reference arms of `python -m bench learning` and how every arm is scored:
pure, seeded, no I/O.

Each arm plays every agent slot's runs of the same environment (`learning_env.py`):
the same situations in the same order, outcomes from the same draw per (slot, run).
- `oracle`: always the situation's best action (regret 0 by definition).
- `thompson`: Thompson sampling, one Beta(1, 1) prior per situation x action and
  per agent, updated with the outcomes its choices draw; its samples come from a
  stream seeded per (slot, run), so it is deterministic.
- `uniform`: an action uniformly at random, seeded per (slot, run).

The arms that act on Grimoire's recall (`grimoire`, `grimoire_learning_off`) run
through the pipeline in `learning.py` and are scored here the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from bench.learning_env import (
    Environment,
    Run,
    draw_outcome,
    late_start,
    regret,
    run_stream,
    schedule,
)

__all__ = [
    "ARMS",
    "TARGETS",
    "arm_summary",
    "play",
    "play_oracle",
    "play_thompson",
    "play_uniform",
    "reference_arms",
    "targets",
]

#: Every arm the report names, in its order.
ARMS: Final = ("oracle", "thompson", "grimoire", "grimoire_learning_off", "uniform")

#: Issue 36's targets, as this bench reads them: grimoire's regret at most 1.2 x
#: Thompson's; its late success rate at least 0.85 x the oracle's; learning off
#: "clearly worse", read here as a regret at least 1.25 x grimoire's.
TARGETS: Final[Mapping[str, float]] = {
    "grimoire_regret_over_thompson_max": 1.2,
    "grimoire_late_success_over_oracle_min": 0.85,
    "learning_off_regret_over_grimoire_min": 1.25,
}

# A policy of one slot: (slot, run index, situation, what the slot saw so far) ->
# action; what it saw is the slot's earlier runs.
Policy = Callable[[int, int, int, list[Run]], int]


def play(env: Environment, policy: Policy, arm: str) -> list[Run]:
    """Every slot's runs under `policy`, each outcome from the (slot, run) draw."""
    runs: list[Run] = []
    for slot in range(env.agents):
        mine: list[Run] = []
        for index, situation in enumerate(schedule(env, slot)):
            action = policy(slot, index, situation, mine)
            success, quality = draw_outcome(env, slot, index, situation, action)
            mine.append(
                Run(f"{arm}-s{slot}-r{index:03d}", slot, index, situation, action, success, quality)
            )
        runs.extend(mine)
    return runs


def play_oracle(env: Environment) -> list[Run]:
    return play(env, lambda _slot, _run, situation, _seen: env.situations[situation].best, "oracle")


def play_uniform(env: Environment) -> list[Run]:
    def policy(slot: int, run: int, situation: int, _seen: list[Run]) -> int:
        return run_stream(env, slot, run, "uniform").randrange(
            len(env.situations[situation].actions)
        )

    return play(env, policy, "uniform")


def play_thompson(env: Environment) -> list[Run]:
    """Per slot, Beta(1 + successes, 1 + failures) per situation x action from the
    slot's own earlier runs; the action with the largest sample (ties: the first)."""

    def policy(slot: int, run: int, situation: int, seen: list[Run]) -> int:
        count = len(env.situations[situation].actions)
        wins, losses = [0] * count, [0] * count
        for earlier in seen:
            if earlier.situation == situation:
                if earlier.success:
                    wins[earlier.action] += 1
                else:
                    losses[earlier.action] += 1
        rng = run_stream(env, slot, run, "thompson")
        samples = [rng.betavariate(1 + wins[a], 1 + losses[a]) for a in range(count)]
        return max(range(count), key=lambda a: (samples[a], -a))

    return play(env, policy, "thompson")


def _rate(values: list[bool]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def arm_summary(env: Environment, runs: Iterable[Run]) -> dict[str, Any]:
    """How one arm did: `regret` (expected: best p - chosen p summed over its runs,
    all agents), `late_success_rate` (the share of successful runs over each
    agent's last third of runs), the same in expectation (the mean chosen p) and
    the share of best actions there, and the success rate over every run."""
    played = list(runs)
    start = late_start(env.runs_per_agent)
    late = [r for r in played if r.index >= start]
    total = regret(env, played)

    def p(run: Run) -> float:
        return env.situations[run.situation].actions[run.action].p_success

    return {
        "regret": total,
        "regret_per_run": round(total / len(played), 4) if played else None,
        "late_success_rate": _rate([r.success for r in late]),
        "late_expected_success_rate": round(sum(p(r) for r in late) / len(late), 4)
        if late
        else None,
        "late_best_action_share": _rate(
            [r.action == env.situations[r.situation].best for r in late]
        ),
        "success_rate": _rate([r.success for r in played]),
        "runs": len(played),
        "late_runs": len(late),
    }


def _ratio(top: float | None, bottom: float | None) -> float | None:
    if top is None or bottom is None or bottom == 0:
        return None
    return round(top / bottom, 4)


def targets(arms: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Issue 36's targets against the arms' figures (`met`: None when a figure is
    missing)."""
    grimoire, thompson = arms.get("grimoire", {}), arms.get("thompson", {})
    oracle, off = arms.get("oracle", {}), arms.get("grimoire_learning_off", {})
    over_thompson = _ratio(grimoire.get("regret"), thompson.get("regret"))
    late = _ratio(grimoire.get("late_success_rate"), oracle.get("late_success_rate"))
    off_ratio = _ratio(off.get("regret"), grimoire.get("regret"))

    def met(value: float | None, bound: float, *, at_most: bool) -> bool | None:
        if value is None:
            return None
        return value <= bound if at_most else value >= bound

    max_t = TARGETS["grimoire_regret_over_thompson_max"]
    min_o = TARGETS["grimoire_late_success_over_oracle_min"]
    min_off = TARGETS["learning_off_regret_over_grimoire_min"]
    return {
        "grimoire_regret_over_thompson": {
            "value": over_thompson,
            "max": max_t,
            "met": met(over_thompson, max_t, at_most=True),
        },
        "grimoire_late_success_over_oracle": {
            "value": late,
            "min": min_o,
            "met": met(late, min_o, at_most=False),
        },
        "learning_off_regret_over_grimoire": {
            "value": off_ratio,
            "min": min_off,
            "met": met(off_ratio, min_off, at_most=False),
        },
    }


def reference_arms(env: Environment) -> dict[str, list[Run]]:
    """The arms that need no pipeline, played on `env`."""
    return {
        "oracle": play_oracle(env),
        "thompson": play_thompson(env),
        "uniform": play_uniform(env),
    }
