"""The pure parts of the learning benchmark: its generated world is the same for the
same seed, its texts are distinct per run, and how recalls, regret and the learned
weights are scored."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from bench.learning import learned_weights, learning_source
from bench.learning_env import (
    VERDICTS,
    Recalled,
    Run,
    ScoredRecall,
    build_environment,
    choose_action,
    draw_outcome,
    epsilon,
    recalled_choice,
    regret,
    render_run,
    schedule,
    success_first,
    top_run,
)


def test_the_world_is_the_same_for_the_same_seed_and_differs_for_another() -> None:
    first = build_environment(seed=7, agents=2, situations=3, actions=4, runs_per_agent=12)
    again = build_environment(seed=7, agents=2, situations=3, actions=4, runs_per_agent=12)
    other = build_environment(seed=8, agents=2, situations=3, actions=4, runs_per_agent=12)
    assert first == again
    assert first.to_json() != other.to_json()
    for slot in range(2):
        assert schedule(first, slot) == schedule(again, slot)
        for run in range(12):
            assert render_run(first, slot, run, 0, 1, True) == render_run(
                again, slot, run, 0, 1, True
            )
            assert draw_outcome(first, slot, run, 0, 1) == draw_outcome(again, slot, run, 0, 1)
            assert choose_action(first, slot, run, 0, 3, 2) == choose_action(
                again, slot, run, 0, 3, 2
            )


def test_each_situation_has_one_good_action_and_poor_others() -> None:
    env = build_environment(seed=3, agents=1, situations=4, actions=4, runs_per_agent=1)
    assert len({s.key for s in env.situations}) == 4
    for situation in env.situations:
        odds = sorted(a.p_success for a in situation.actions)
        assert 0.80 <= odds[-1] <= 0.90
        assert all(0.15 <= p <= 0.35 for p in odds[:-1])
        assert situation.p_best == odds[-1]


def test_the_schedule_visits_every_situation_once_per_cycle() -> None:
    env = build_environment(seed=7, agents=1, situations=3, actions=4, runs_per_agent=10)
    order = schedule(env, 0)
    assert len(order) == 10
    for start in (0, 3, 6):
        assert sorted(order[start : start + 3]) == [0, 1, 2]


def test_run_texts_are_distinct_and_name_the_action_and_result() -> None:
    env = build_environment(seed=7, agents=2, situations=3, actions=4, runs_per_agent=30)
    texts = [
        render_run(env, slot, run, run % 3, run % 4, run % 2 == 0)
        for slot in (0, 1)
        for run in range(30)
    ]
    for role in ("trigger", "action", "outcome"):
        values = [getattr(t, role) for t in texts]
        assert len(set(values)) == len(values), role
    spec = env.situations[1]
    worked = render_run(env, 0, 5, 1, 2, True)
    failed = render_run(env, 0, 5, 1, 2, False)
    assert spec.actions[2].name in worked.action
    assert worked.trigger == failed.trigger  # the world is the same; only the result differs
    assert worked.action == failed.action
    assert worked.outcome != failed.outcome


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def test_success_and_failure_texts_use_the_same_words_but_the_verdict() -> None:
    """Neutral wording: a successful run's texts are the failed run's but for the
    verdict word, which is in no query, so neither matches a query better."""
    env = build_environment(seed=5, agents=2, situations=6, actions=4, runs_per_agent=12)
    queries = [_words(s.query) for s in env.situations]
    success_word, failure_word = VERDICTS
    for query in queries:
        assert success_word not in query and failure_word not in query
    for slot in range(2):
        for run in range(12):
            for situation in range(6):
                for action in range(4):
                    worked = render_run(env, slot, run, situation, action, True)
                    failed = render_run(env, slot, run, situation, action, False)
                    assert worked.trigger == failed.trigger
                    assert worked.action == failed.action
                    good, bad = _words(worked.outcome), _words(failed.outcome)
                    assert good - bad == {success_word}
                    assert bad - good == {failure_word}
                    query = queries[situation]
                    assert len(good & query) == len(bad & query)


def test_outcome_draws_are_common_random_numbers_with_quality_on_the_right_side() -> None:
    env = build_environment(seed=7, agents=1, situations=1, actions=4, runs_per_agent=1)
    spec = env.situations[0]
    best, worst = spec.best, min(range(4), key=lambda i: spec.actions[i].p_success)
    wins: Counter[int] = Counter()
    for run in range(400):
        for action in (best, worst):
            success, quality = draw_outcome(env, 0, run, 0, action)
            assert (quality >= 0.5) == success
            assert 0.0 <= quality <= 1.0
            wins[action] += success
        # One draw per run: whatever fails with the best action fails with the worst.
        if draw_outcome(env, 0, run, 0, best)[0] is False:
            assert draw_outcome(env, 0, run, 0, worst)[0] is False
    assert wins[best] / 400 == pytest.approx(spec.p_best, abs=0.07)
    assert wins[worst] / 400 == pytest.approx(spec.actions[worst].p_success, abs=0.07)


def test_the_policy_follows_the_recall_and_explores_less_with_visits() -> None:
    env = build_environment(seed=7, agents=1, situations=1, actions=4, runs_per_agent=1)
    assert epsilon(0) > epsilon(4) > epsilon(40) >= 0.05
    # Nothing recalled: always an exploration.
    assert all(choose_action(env, 0, run, 0, 10, None)[1] for run in range(50))
    late = [choose_action(env, 0, run, 0, 200, 3) for run in range(400)]
    followed = sum(1 for action, explored in late if not explored and action == 3)
    assert followed / 400 == pytest.approx(1 - epsilon(200), abs=0.05)


def _run(situation: int, success: bool, action: int = 0, index: int = 0) -> Run:
    return Run(f"r{index}", 0, index, situation, action, success, 0.9 if success else 0.1)


def test_the_policy_reads_the_first_recalled_item_about_an_action_of_the_situation() -> None:
    env = build_environment(seed=7, agents=1, situations=2, actions=4, runs_per_agent=1)
    names = [a.name for a in env.situations[0].actions]
    mine = {
        "a-outcome": _run(0, False, action=2, index=1),
        "b-trigger": _run(1, True, action=1, index=2),
        "c-action": _run(0, True, action=3, index=3),
    }
    other_situation = {"source_event_id": "b-trigger"}
    unrelated = {"source_event_id": "x", "gist": "the incident channel has 4 people in it"}
    both = {"source_event_id": "y", "text": f"{names[0]} or {names[1]}, unclear"}
    advice = {"source_event_id": "z", "gist": f"In this situation {names[1]} works best."}
    # Items of other situations, naming no action or several, are skipped; the agent's
    # own run's memory gives its action and result.
    items = [other_situation, unrelated, both, {"source_event_id": "a-outcome"}, advice]
    assert recalled_choice(env, 0, items, mine) == Recalled(2, False, "a-outcome")
    # An entry that is none of the agent's runs and names one action is advice.
    assert recalled_choice(env, 0, [unrelated, advice], mine) == Recalled(1, None, "z")
    # A name inside a longer one is not a mention of it.
    longer = {"source_event_id": "w", "gist": f"pre-{names[0]}-post"}
    assert recalled_choice(env, 0, [longer], mine) is None
    assert recalled_choice(env, 0, [], mine) is None
    assert recalled_choice(env, 1, items, mine) == Recalled(1, True, "b-trigger")


def test_a_failed_recalled_action_is_not_repeated() -> None:
    env = build_environment(seed=7, agents=1, situations=1, actions=4, runs_per_agent=1)
    for run in range(100):
        action, explored = choose_action(env, 0, run, 0, 50, 2, recalled_failed=True)
        assert action != 2 and explored


def test_the_top_memory_is_the_first_item_of_the_situations_runs() -> None:
    runs = {
        "a-trigger": _run(0, False, index=1),
        "b-action": _run(1, True, index=2),
        "c-outcome": _run(0, True, index=3),
    }
    items = [
        {"source_event_id": "curator-insight"},  # not one of the bench's memories
        {"source_event_id": "b-action"},  # another situation
        {"source_event_id": "c-outcome"},
        {"source_event_id": "a-trigger"},
    ]
    found = top_run(items, runs, 0)
    assert found is not None
    run, source = found
    assert (run.index, run.success, source) == (3, True, "c-outcome")
    assert top_run(items[:2], runs, 0) is None
    assert top_run([], runs, 1) is None


def test_success_first_skips_warmup_and_counts_recalls_without_memory_apart() -> None:
    recalls = [
        ScoredRecall(0, 0, 0, None, None),  # warm-up
        ScoredRecall(0, 0, 1, False, False),  # warm-up
        ScoredRecall(0, 0, 2, True, False),
        ScoredRecall(0, 0, 3, True, True),
        ScoredRecall(0, 1, 2, False, None),
        ScoredRecall(1, 0, 5, None, True),
    ]
    rates = success_first(recalls, warmup=2)
    assert rates.warmup_skipped == 2
    assert (rates.learner.scored, rates.learner.success_first, rates.learner.without_memory) == (
        3,
        2,
        1,
    )
    assert (rates.shadow.scored, rates.shadow.success_first, rates.shadow.without_memory) == (
        3,
        2,
        1,
    )
    assert rates.learner.rate == pytest.approx(2 / 3, abs=1e-4)
    assert rates.top_differs == 3
    assert success_first([], warmup=2).learner.rate is None


def test_regret_is_the_expected_cost_of_the_choices() -> None:
    env = build_environment(seed=7, agents=1, situations=2, actions=4, runs_per_agent=1)
    best = env.situations[0].best
    other = (best + 1) % 4
    gap = env.situations[0].p_best - env.situations[0].actions[other].p_success
    runs = [_run(0, True, best), _run(0, False, other), _run(0, True, other)]
    assert regret(env, runs) == pytest.approx(2 * gap, abs=1e-4)
    assert regret(env, []) == 0


def test_learned_weights_come_from_the_replys_learning_section() -> None:
    reply = {"learning": {"source": "learned", "updates": 12, "weights": {"rrf": 0.4}}}
    assert learned_weights(reply) == {"rrf": 0.4}
    assert learning_source(reply) == {"source": "learned", "updates": 12}
    assert learning_source({"items": []}) == {}
    assert learned_weights({"explain": {"weights": {"rrf": 0.3, "quality": 0.2}}}) == {
        "rrf": 0.3,
        "quality": 0.2,
    }
    assert learned_weights({"weights": {"rrf": 1}}) == {"rrf": 1.0}
    assert learned_weights({"explain": {"weights": {}}}) is None
    assert learned_weights({"items": []}) is None
