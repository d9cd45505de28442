"""A run's outcome, planned (streams/learn/runs.py): credit and blame by role with
loss aversion, strength only for what was recalled before a success, the run's
edges, uplifts and Hedge step, and members written after the run ended credited
as if they had been there (a property over random splits)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import pytest

from grimoire.streams.learn.causal import CausalEdge, causal_uplift, edges_by_cause
from grimoire.streams.learn.hedge import (
    LEARNED_FACTORS,
    RANK,
    Observation,
    hedge_update,
    initial_weights,
)
from grimoire.streams.learn.runs import (
    DEFAULT_RUN_POLICY,
    RECALLED,
    EndedRun,
    MemoryCredit,
    RoleWeight,
    RunLearning,
    RunPolicy,
    credit_run,
    learn_from_late_members,
    learn_from_run,
    run_edge_id,
    signed_quality,
)
from grimoire.streams.recall.rerank import DEFAULT_RERANK_WEIGHTS

INITIAL = initial_weights(DEFAULT_RERANK_WEIGHTS)


def test_run_edge_id() -> None:
    assert run_edge_id("r-1") == "run:r-1"


@pytest.mark.parametrize(
    ("quality", "signal"),
    [(1.0, 1.0), (0.9, 0.8), (0.75, 0.5), (0.5, 0.0), (0.25, -0.5), (0.1, -0.8), (0.0, -1.0)],
)
def test_signed_quality_is_zero_at_the_line_and_one_at_the_ends(
    quality: float, signal: float
) -> None:
    assert signed_quality(quality) == pytest.approx(signal, abs=1e-12)


def test_signed_quality_with_another_line() -> None:
    policy = RunPolicy(success_line=0.8)
    # above: (0.9 - 0.8) / 0.2 = 0.5; below: (0.4 - 0.8) / 0.8 = -0.5
    assert signed_quality(0.9, policy) == pytest.approx(0.5)
    assert signed_quality(0.4, policy) == pytest.approx(-0.5)
    assert signed_quality(1.0, RunPolicy(success_line=1.0)) == 0.0
    assert signed_quality(0.0, RunPolicy(success_line=0.0)) == 0.0


# --- credit by role -----------------------------------------------------------------


# Default policy: gain 0.10, loss 0.15; credit / blame shares action 1 / 1,
# outcome 0.5 / 0.5, context 0.4 / 0.3, trigger 0.3 / 0.2, recalled 0.6 / 0.6.
@pytest.mark.parametrize(
    ("quality", "role", "delta"),
    [
        # quality 0.9: signal 0.8; credit = 0.10 · share · 0.8
        (0.9, "action", 0.08),
        (0.9, "outcome", 0.04),
        (0.9, "context", 0.032),
        (0.9, "trigger", 0.024),
        # quality 0.1: signal -0.8; blame = 0.15 · share · -0.8
        (0.1, "action", -0.12),
        (0.1, "outcome", -0.06),
        (0.1, "context", -0.048),  # 0.15 · 0.4 · -0.8
        (0.1, "trigger", -0.036),  # 0.15 · 0.3 · -0.8
        # the ends: 0.10 · 1 · 1 and 0.15 · 1 · -1
        (1.0, "action", 0.10),
        (0.0, "action", -0.15),
        # at the line: a success with nothing to add
        (0.5, "action", 0.0),
        # a role the policy does not know moves nothing
        (0.9, "observer", 0.0),
        (0.1, "observer", 0.0),
    ],
)
def test_a_member_is_credited_by_its_role(quality: float, role: str, delta: float) -> None:
    (credit,) = credit_run(quality, {"m": role}, frozenset())
    success = quality >= 0.5
    assert credit == MemoryCredit(
        memory_id="m",
        roles=(role,),
        confidence_delta=pytest.approx(delta, abs=1e-12),  # type: ignore[arg-type]
        strength_delta=0.0,  # a member that was not recalled never gains strength
        validated=1 if success else 0,
        contradicted=0 if success else 1,
    )


@pytest.mark.parametrize("role", ["action", "outcome", "context", RECALLED])
@pytest.mark.parametrize("size", [0.2, 0.6, 1.0])
def test_blame_outweighs_credit_at_the_same_distance_from_the_line(role: str, size: float) -> None:
    members = {} if role == RECALLED else {"m": role}
    recalled = {"m"} if role == RECALLED else set()
    (up,) = credit_run(0.5 + size / 2, members, recalled)
    (down,) = credit_run(0.5 - size / 2, members, recalled)
    assert up.confidence_delta > 0 > down.confidence_delta
    assert abs(down.confidence_delta) > up.confidence_delta


def test_every_role_is_blamed_more_than_it_is_credited() -> None:
    # Loss aversion for every role: the trigger's credit 0.10 · 0.3 = 0.03 against
    # its blame 0.15 · 0.3 = 0.045.
    for role in ("action", "outcome", "context", "trigger", "recalled"):
        up = (
            credit_run(1.0, {"m": role}, set())
            if role != "recalled"
            else credit_run(1.0, {}, {"m"})
        )
        down = (
            credit_run(0.0, {"m": role}, set())
            if role != "recalled"
            else credit_run(0.0, {}, {"m"})
        )
        assert -down[0].confidence_delta > up[0].confidence_delta > 0, role
    (up,) = credit_run(1.0, {"t": "trigger"}, set())
    (down,) = credit_run(0.0, {"t": "trigger"}, set())
    assert (up.confidence_delta, down.confidence_delta) == pytest.approx((0.03, -0.045))


@pytest.mark.parametrize(
    ("quality", "delta", "strength"),
    [
        (0.9, 0.048, 1.0),  # 0.10 · 0.6 · 0.8; strength on a success
        (1.0, 0.06, 1.0),
        (0.5, 0.0, 1.0),  # at the line: a success, strength without confidence
        (0.1, -0.072, 0.0),  # 0.15 · 0.6 · -0.8; no strength on a failure
        (0.0, -0.09, 0.0),
    ],
)
def test_a_recalled_memory_gains_strength_only_on_a_success(
    quality: float, delta: float, strength: float
) -> None:
    (credit,) = credit_run(quality, {}, {"r"})
    assert credit.roles == (RECALLED,)
    assert credit.confidence_delta == pytest.approx(delta, abs=1e-12)
    assert credit.strength_delta == strength
    # The run record counts the runs a memory was part of; a recalled memory
    # may have been read and rejected: no record.
    assert (credit.validated, credit.contradicted) == (0, 0)


def test_recalled_may_be_a_mapping_of_factor_values() -> None:
    as_set = credit_run(0.9, {"a": "action"}, {"r"})
    as_map = credit_run(0.9, {"a": "action"}, {"r": {"quality": 0.3}})
    assert as_set == as_map


@pytest.mark.parametrize(
    ("quality", "delta", "strength"),
    [
        (0.9, 0.128, 1.0),  # action 0.08 + recalled 0.048
        (0.1, -0.192, 0.0),  # action -0.12 + recalled -0.072
    ],
)
def test_a_member_the_run_also_recalled_has_both_shares_and_counts_once(
    quality: float, delta: float, strength: float
) -> None:
    (credit,) = credit_run(quality, {"m": "action"}, {"m"})
    assert credit.roles == ("action", RECALLED)
    assert credit.confidence_delta == pytest.approx(delta, abs=1e-12)
    assert credit.strength_delta == strength
    assert credit.validated + credit.contradicted == 1


def test_credits_are_one_per_memory_in_id_order() -> None:
    credits = credit_run(0.9, {"z": "trigger", "b": "action", "m": "outcome"}, {"a", "m"})
    assert [(c.memory_id, c.roles) for c in credits] == [
        ("a", (RECALLED,)),
        ("b", ("action",)),
        ("m", ("outcome", RECALLED)),
        ("z", ("trigger",)),
    ]


def test_a_policy_of_its_own() -> None:
    policy = RunPolicy(
        gain=0.2, loss=0.4, success_line=0.6, strength_gain=2.5,
        roles=(("action", RoleWeight(0.5, 0.25)), (RECALLED, RoleWeight(1.0, 1.0))),
    )  # fmt: skip
    # quality 0.8: signal (0.8 - 0.6) / 0.4 = 0.5; action 0.2 · 0.5 · 0.5 = 0.05,
    # recalled 0.2 · 1 · 0.5 = 0.1; the trigger is not in the policy: 0.
    credits = {
        c.memory_id: c for c in credit_run(0.8, {"a": "action", "t": "trigger"}, {"r"}, policy)
    }
    assert credits["a"].confidence_delta == pytest.approx(0.05)
    assert credits["r"].confidence_delta == pytest.approx(0.1)
    assert credits["r"].strength_delta == 2.5
    assert credits["t"].confidence_delta == 0.0
    # quality 0.3: signal (0.3 - 0.6) / 0.6 = -0.5; action 0.4 · 0.25 · -0.5 = -0.05
    (blamed,) = credit_run(0.3, {"a": "action"}, set(), policy)
    assert blamed.confidence_delta == pytest.approx(-0.05)
    assert (blamed.validated, blamed.contradicted) == (0, 1)


# --- the whole plan --------------------------------------------------------------------

RUN = {"t": "trigger", "a": "action", "o": "outcome", "c": "context"}
# What the run's recalls returned: factor values and each memory's place in its
# reply. r3 was shown below the top 3 (recalled_depth): not acted on.
RECALLS = {
    "r1": {"relevance": 1.0, "quality": 0.9, RANK: 0.0},
    "r2": {"relevance": 0.8, "quality": 0.3, RANK: 1.0},
    "r3": {"relevance": 0.6, "quality": 0.6, RANK: 3.0},
}
# How much each factor favoured r1 and r2 over the three shown (0.5 + value - mean;
# a factor not recorded is 0.5 for all, so 0.5): the means are relevance
# (1.0 + 0.8 + 0.6) / 3 = 0.8 and quality (0.9 + 0.3 + 0.6) / 3 = 0.6, so
# r1: relevance 0.7, quality 0.8; r2: relevance 0.5, quality 0.2. Each counts
# 1 / (1 + rank): r1 1, r2 0.5.
NEUTRAL = {n: 0.5 for n in LEARNED_FACTORS}
PREFERRED = (
    (NEUTRAL | {"relevance": 0.7, "quality": 0.8}, 1.0),
    (NEUTRAL | {"relevance": 0.5, "quality": 0.2}, 0.5),
)


def observed(success: bool) -> list[Observation]:
    return [Observation(factors, success, weight) for factors, weight in PREFERRED]


def plan(**overrides: object) -> RunLearning:
    arguments: dict[str, object] = {
        "quality": 0.9, "members": RUN, "recalled": RECALLS, "out_edges": {}, "block": 7,
        "weights": None, "initial": INITIAL, "learn_weights": True, "causal_active": True,
    } | overrides  # fmt: skip
    return learn_from_run(**arguments)  # type: ignore[arg-type]


def test_a_successful_run_plan_by_hand() -> None:
    learned = plan()
    # r3 was shown, not acted on: no credit
    assert [(c.memory_id, c.confidence_delta, c.strength_delta) for c in learned.credits] == [
        ("a", pytest.approx(0.08), 0.0),
        ("c", pytest.approx(0.032), 0.0),
        ("o", pytest.approx(0.04), 0.0),
        ("r1", pytest.approx(0.048), 1.0),
        ("r2", pytest.approx(0.048), 1.0),
        ("t", pytest.approx(0.024), 0.0),
    ]
    # the action → outcome edge at signal 0.8, first seen at block 7; uplift 0.8 / 2
    assert learned.edges == (CausalEdge("a", "o", 0.8, 1, 7),)
    assert learned.uplifts == (("a", 0.4),)
    # one Hedge step from the used recalls' preferences, from the initial weights:
    # mean losses (1 - preference, weighted) relevance (0.3 + 0.5·0.5) / 1.5 = 0.367,
    # quality (0.2 + 0.5·0.8) / 1.5 = 0.4, the rest 0.5: relevance and quality gain.
    assert learned.weights == hedge_update(INITIAL, observed(True), INITIAL)
    assert learned.weights is not None and learned.weights.updates == 1
    gains = {n: learned.weights.weight(n) / INITIAL.weight(n) for n in LEARNED_FACTORS}
    assert gains["relevance"] > gains["quality"] > gains["recency"]
    assert gains["recency"] == pytest.approx(gains["outcome"], abs=1e-6)


def test_a_failed_run_blames_and_its_edge_is_negative() -> None:
    learned = plan(quality=0.1)
    assert learned.edges == (CausalEdge("a", "o", -0.8, 1, 7),)
    assert learned.uplifts == (("a", -0.4),)
    assert all(c.strength_delta == 0.0 for c in learned.credits)
    # members contradicted once; what was only recalled keeps no record
    assert {c.memory_id: c.contradicted for c in learned.credits} == {
        "a": 1, "c": 1, "o": 1, "t": 1, "r1": 0, "r2": 0,
    }  # fmt: skip
    assert learned.weights == hedge_update(INITIAL, observed(False), INITIAL)


def test_stored_edges_are_reinforced_and_the_uplift_counts_every_out_edge() -> None:
    stored = {
        "a": [CausalEdge("a", "o", 0.4, 1, 3), CausalEdge("a", "x", -1.0, 1, 5)],
    }
    learned = plan(out_edges=stored)
    # a → o: (0.4 + 0.8) / 2 = 0.6, evidence 2, last block 7
    assert learned.edges == (CausalEdge("a", "o", 0.6, 2, 7),)
    # a's uplift over both out-edges: (0.6·2 - 1·1) / (3 + 1) = 0.05
    assert learned.uplifts == (("a", pytest.approx(0.05)),)


def test_two_actions_two_outcomes_give_four_edges_and_two_uplifts() -> None:
    members = {"a1": "action", "a2": "action", "o1": "outcome", "o2": "outcome"}
    learned = plan(members=members, quality=1.0)
    assert [(e.cause, e.effect, e.weight) for e in learned.edges] == [
        ("a1", "o1", 1.0), ("a1", "o2", 1.0), ("a2", "o1", 1.0), ("a2", "o2", 1.0),
    ]  # fmt: skip
    # each action: (1·1 + 1·1) / (2 + 1) = 0.666666667
    assert learned.uplifts == (("a1", 0.666666667), ("a2", 0.666666667))


@pytest.mark.parametrize(
    ("overrides", "learns"),
    [
        ({}, True),
        ({"recalled": {}}, False),  # nothing recalled: nothing to learn weights from
        ({"recalled": {"r3": RECALLS["r3"]}}, False),  # only shown, never acted on
        ({"learn_weights": False}, False),  # use_learned_weights off
    ],
)
def test_weights_move_only_with_recalls_and_learn_weights(
    overrides: dict[str, object], learns: bool
) -> None:
    learned = plan(**overrides)
    assert (learned.weights is not None) == learns
    # credits and edges are learned either way
    assert learned.edges and learned.credits


def test_the_step_starts_from_the_stored_weights_and_skips_causal_when_off() -> None:
    stored = hedge_update(INITIAL, [Observation({"quality": 1.0}, True)], INITIAL)
    learned = plan(weights=stored, causal_active=False)
    active = frozenset(LEARNED_FACTORS) - {"causal"}
    assert learned.weights == hedge_update(stored, observed(True), INITIAL, active=active)
    assert learned.weights is not None and learned.weights.updates == 2


def test_a_run_without_an_action_or_outcome_links_nothing() -> None:
    learned = plan(members={"t": "trigger", "c": "context"})
    assert learned.edges == () and learned.uplifts == ()
    assert {c.memory_id for c in learned.credits} == {"t", "c", "r1", "r2"}


def test_recalled_depth_decides_what_was_acted_on() -> None:
    deep = plan(policy=RunPolicy(recalled_depth=4))
    assert "r3" in {c.memory_id for c in deep.credits}
    shallow = plan(policy=RunPolicy(recalled_depth=1))
    assert {c.memory_id for c in shallow.credits} & {"r1", "r2", "r3"} == {"r1"}


# --- late members -----------------------------------------------------------------------


def test_late_members_by_hand() -> None:
    # The run ended (quality 0.9, block 7) with only its trigger and action; the
    # outcome memory is written later: it gets its own credit, and the edge a → o
    # that could not exist at the end, with the run's block.
    ended = EndedRun("r-1", "out-1", 0.9, 1_000, 7)
    late = learn_from_late_members(ended, RUN, frozenset({"o"}), {"a": []})
    assert [(c.memory_id, c.roles, c.confidence_delta) for c in late.credits] == [
        ("o", ("outcome",), pytest.approx(0.04))
    ]
    assert late.edges == (CausalEdge("a", "o", 0.8, 1, 7),)
    assert late.uplifts == (("a", 0.4),)
    assert late.weights is None


def test_a_late_member_linking_nothing_new_moves_no_edge() -> None:
    ended = EndedRun("r-1", "out-1", 0.1, 1_000, 7)
    stored = {"a": [CausalEdge("a", "o", -0.8, 1, 7)]}
    late = learn_from_late_members(ended, RUN, frozenset({"c"}), stored)
    assert late.edges == () and late.uplifts == ()
    assert [(c.memory_id, c.contradicted) for c in late.credits] == [("c", 1)]


class Fold:
    """What the store does with plans: credits add up, edges and uplifts are set."""

    def __init__(self, edges: Sequence[CausalEdge]) -> None:
        self.edges = {(e.cause, e.effect): e for e in edges}
        self.credits: dict[str, list[float]] = {}
        self.roles: dict[str, set[str]] = {}
        self.uplifts: dict[str, float] = {}

    def out_edges(self, members: Mapping[str, str]) -> dict[str, list[CausalEdge]]:
        actions = [m for m, role in members.items() if role == "action"]
        grouped = edges_by_cause(self.edges.values())
        return {a: grouped.get(a, []) for a in actions}

    def apply(self, learned: RunLearning) -> None:
        for credit in learned.credits:
            held = self.credits.setdefault(credit.memory_id, [0.0, 0.0, 0, 0])
            held[0] += credit.confidence_delta
            held[1] += credit.strength_delta
            held[2] += credit.validated
            held[3] += credit.contradicted
            self.roles.setdefault(credit.memory_id, set()).update(credit.roles)
        for edge in learned.edges:
            self.edges[(edge.cause, edge.effect)] = edge
        self.uplifts.update(learned.uplifts)


ROLES = ("action", "action", "outcome", "outcome", "context", "trigger", "note")


@pytest.mark.parametrize("seed", range(60))
def test_crediting_late_members_later_is_crediting_them_with_the_run(seed: int) -> None:
    rng = random.Random(seed)
    ids = [f"m{i:02d}" for i in range(rng.randint(1, 9))]
    members = {m: rng.choice(ROLES) for m in ids}
    quality = rng.choice([0.0, 0.5, 1.0, rng.random()])
    # Edges from earlier runs between some of these memories (and others).
    prior = [
        CausalEdge(rng.choice(ids), f"x{i}", rng.uniform(-1, 1), rng.randint(1, 4), 1)
        for i in range(rng.randint(0, 3))
    ] + [
        CausalEdge(a, o, rng.uniform(-1, 1), rng.randint(1, 4), 2)
        for a in ids for o in ids if a != o and rng.random() < 0.1
    ]  # fmt: skip
    # The run ends with some members written; the rest come in one or two groups.
    order = ids[:]
    rng.shuffle(order)
    cut = rng.randint(0, len(order))
    early = set(order[:cut])
    rest = order[cut:]
    split = rng.randint(0, len(rest))
    groups = [g for g in (set(rest[:split]), set(rest[split:])) if g]
    # The run recalled memories written before it ended: other memories, and
    # perhaps some of its own early ones.
    recalled = {
        f"r{i}": {"quality": rng.random(), RANK: float(rng.randint(0, 4))}
        for i in range(rng.randint(0, 3))
    }
    recalled |= {m: {"quality": 0.5, RANK: 0.0} for m in early if rng.random() < 0.3}
    block = rng.randint(5, 50)

    def ended_run(fold: Fold, written: set[str]) -> RunLearning:
        now = {m: r for m, r in members.items() if m in written}
        return learn_from_run(
            quality=quality, members=now, recalled=recalled, out_edges=fold.out_edges(now),
            block=block, weights=None, initial=INITIAL, learn_weights=True,
            causal_active=True,
        )  # fmt: skip

    at_once = Fold(prior)
    whole = ended_run(at_once, set(ids))
    at_once.apply(whole)

    in_parts = Fold(prior)
    first = ended_run(in_parts, early)
    in_parts.apply(first)
    ended = EndedRun("run-1", "out-1", quality, 1_000, block)
    written = set(early)
    for group in groups:
        written |= group
        now = {m: r for m, r in members.items() if m in written}
        late = learn_from_late_members(ended, now, frozenset(group), in_parts.out_edges(now))
        assert late.weights is None
        assert {c.memory_id for c in late.credits} == group  # only the late ones
        in_parts.apply(late)

    assert in_parts.credits.keys() == at_once.credits.keys()
    for memory_id, held in at_once.credits.items():
        assert in_parts.credits[memory_id] == pytest.approx(held, abs=1e-9), memory_id
    assert in_parts.roles == at_once.roles
    assert in_parts.edges == at_once.edges
    assert in_parts.uplifts == pytest.approx(at_once.uplifts, abs=1e-9)
    # and every uplift is what the cause's final out-edges say
    grouped = edges_by_cause(in_parts.edges.values())
    for cause, uplift in in_parts.uplifts.items():
        assert uplift == pytest.approx(causal_uplift(grouped[cause]), abs=1e-9)
    # the weights move once, with the run's end, whatever was written by then
    assert first.weights == whole.weights


def test_the_default_policy_roles() -> None:
    assert DEFAULT_RUN_POLICY.role("action") == RoleWeight(1.0, 1.0)
    assert DEFAULT_RUN_POLICY.role("nobody") == RoleWeight(0.0, 0.0)
