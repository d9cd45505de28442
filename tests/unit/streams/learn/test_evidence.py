"""Evidence per situation x action: situation naming, counts, posterior, bonus."""

from __future__ import annotations

import math

import pytest

from grimoire.streams.learn.evidence import (
    DEFAULT_EVIDENCE_POLICY,
    EvidenceCount,
    EvidencePolicy,
    RunMember,
    decision_score,
    evidence_id,
    evidence_text,
    plan_evidence,
    posterior_mean,
    run_actions,
    run_situation,
    situation_edge,
)


def member(memory_id: str, role: str, *keys: str, text: str = "", ts: int = 0) -> RunMember:
    return RunMember(memory_id, role, tuple(keys), text, ts)


def test_the_situation_is_the_triggers_tags_and_regime() -> None:
    triggers = [
        member("t1", "trigger", "tag:alert/disk", "entity:ines", "regime:peak", "run:r1"),
        member("t2", "trigger", "path:/var/lib", "tag:alert/disk"),
    ]
    assert run_situation(triggers) == ("regime:peak", "tag:alert/disk")


def test_an_untagged_trigger_falls_back_on_its_heaviest_keys() -> None:
    triggers = [member("t", "trigger", "entity:ines", "path:/var/lib", "err:oom", "run:r", "url:x")]
    # err: and run: describe the occurrence, not the situation
    assert run_situation(triggers, EvidencePolicy(fallback_keys=2)) == ("path:/var/lib", "url:x")


def test_a_run_with_no_trigger_key_names_no_situation() -> None:
    assert run_situation([member("t", "trigger", "run:r1")]) == ()


def test_the_actions_are_the_tools_of_the_action_members() -> None:
    actions = [member("a", "action", "tool:rotate-logs"), member("b", "action", "tool:df", "x")]
    assert run_actions(actions) == ("df", "rotate-logs")


def test_posterior_mean_is_that_of_the_beta_prior_updated() -> None:
    assert posterior_mean(0, 0) == 0.5
    assert posterior_mean(1, 0) == pytest.approx(2 / 3)
    assert posterior_mean(7, 1) == pytest.approx(0.8)
    assert posterior_mean(1, 0, EvidencePolicy(prior_successes=2, prior_failures=8)) == (
        pytest.approx(3 / 11)
    )


def test_the_exploration_bonus_favours_rarely_tried_actions_and_is_off_by_default() -> None:
    assert decision_score(3, 1, 20) == posterior_mean(3, 1)
    policy = EvidencePolicy(exploration_bonus=1.0)
    rare = decision_score(1, 1, 20, policy)
    common = decision_score(10, 10, 20, policy)
    assert posterior_mean(1, 1) == posterior_mean(10, 10)
    assert rare > common
    assert rare == pytest.approx(0.5 + math.sqrt(math.log(21) / 3))


def test_a_first_run_creates_the_entry_at_the_prior_and_counts_itself() -> None:
    members = [
        member("t", "trigger", "tag:alert/disk", text="disk at 91% on db-1", ts=10),
        member("a", "action", "tool:rotate-logs", ts=20),
        member("o", "outcome", ts=30),
    ]
    plan = plan_evidence("agent", success=True, members=members, stored={})
    (created,) = plan.created
    assert created.memory_id == evidence_id("agent", ("tag:alert/disk",), "rotate-logs")
    assert created.confidence == 0.5
    assert created.keys == ("tag:alert/disk", "tool:rotate-logs")
    assert created.edge_id == situation_edge(("tag:alert/disk",))
    assert "rotate-logs" in created.text and "disk at 91% on db-1" in created.text
    (update,) = plan.updates
    assert update.success is True
    assert 0.5 + update.confidence_delta == pytest.approx(2 / 3)


def test_a_later_run_moves_the_stored_count_to_the_new_posterior() -> None:
    members = [member("t", "trigger", "tag:alert/disk"), member("a", "action", "tool:prune")]
    entry = evidence_id("agent", ("tag:alert/disk",), "prune")
    stored = {entry: EvidenceCount(entry, 3, 1, 0.61)}
    plan = plan_evidence("agent", success=False, members=members, stored=stored)
    assert plan.created == ()
    (update,) = plan.updates
    assert update.success is False
    assert 0.61 + update.confidence_delta == pytest.approx(posterior_mean(3, 2))


def test_the_same_run_plans_the_same_evidence_whatever_the_members_order() -> None:
    members = [
        member("t", "trigger", "tag:alert/disk", text="first", ts=1),
        member("t2", "trigger", "tag:alert/disk", text="second", ts=2),
        member("a", "action", "tool:prune", ts=3),
    ]
    one = plan_evidence("agent", success=True, members=members, stored={})
    other = plan_evidence("agent", success=True, members=members[::-1], stored={})
    assert one == other
    assert "first" in one.created[0].text


def test_a_run_without_a_named_situation_or_a_tool_counts_nothing() -> None:
    no_tool = [member("t", "trigger", "tag:alert/disk"), member("a", "action")]
    no_situation = [member("t", "trigger", "run:x"), member("a", "action", "tool:prune")]
    for members in (no_tool, no_situation):
        plan = plan_evidence("agent", success=True, members=members, stored={})
        assert plan.created == () and plan.updates == ()


def test_agents_and_situations_never_share_an_entry() -> None:
    ids = {
        evidence_id("a", ("tag:x",), "t"),
        evidence_id("b", ("tag:x",), "t"),
        evidence_id("a", ("tag:y",), "t"),
        evidence_id("a", ("tag:x",), "u"),
    }
    assert len(ids) == 4


def test_the_text_is_fixed_by_the_situation_action_and_first_trigger() -> None:
    text = evidence_text(("tag:alert/disk",), "prune", "  disk   full ", DEFAULT_EVIDENCE_POLICY)
    assert text == "Evidence for action prune in alert/disk. Situation seen: disk full"


def test_the_policy_refuses_impossible_values() -> None:
    with pytest.raises(ValueError):
        EvidencePolicy(prior_successes=0)
    with pytest.raises(ValueError):
        EvidencePolicy(exploration_bonus=-1)
