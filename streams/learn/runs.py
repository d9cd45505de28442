"""What a run's outcome teaches (docs/design.md §7): credit and blame by role.

A run is a hyperedge: the memories written under one `run_id`, each with its role
(trigger, context, action, outcome). When the run ends with a quality `q` in
[0, 1], every member is credited (q above the success line) or blamed (below),
scaled by its role: the action is what the agent chose, so it carries the
result; the trigger only says when it happened. Blame is larger than credit
(loss aversion: a memory that led to a failure should fall faster than one that
led to a success rises), which is the asymmetric confidence of docs/design.md §7.

A member's run record (validated / contradicted) counts the runs it was part
of, which is what recall's outcome bias reads. What the run recalled before
acting is credited too (the top `recalled_depth`
of each reply: what the agent acted on, not everything it was shown), and only
those memories gain strength, and only on a success: strength means "retrieved and then
followed by a good result", never "retrieved" (which an agent could game by
recalling a memory over and over).

Every function here is pure; the plan is applied by the store in one transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from grimoire.streams.learn.causal import CausalEdge, causal_uplift, reinforce, run_links
from grimoire.streams.learn.hedge import (
    DEFAULT_HEDGE_POLICY,
    LEARNED_FACTORS,
    RANK,
    HedgePolicy,
    LearnedWeights,
    Observation,
    hedge_update,
)

__all__ = [
    "DEFAULT_RUN_POLICY",
    "RECALLED",
    "RUN_EDGE_PREFIX",
    "RUN_RECALLED",
    "RUN_RECALLED_HITS",
    "EndedRun",
    "MemoryCredit",
    "RoleWeight",
    "RunLearning",
    "RunPolicy",
    "credit_run",
    "learn_from_late_members",
    "learn_from_run",
    "run_edge_id",
    "run_recall_counters",
    "signed_quality",
]

# The role of a memory the run recalled (it is not a member of the run's hyperedge).
RECALLED: Final = "recalled"


RUN_EDGE_PREFIX: Final = "run:"

# The agent's stats counters behind the retrieval hit rate (docs/design.md §8, seed 001: the
# share of recalled items later followed by a positive outcome): memories the
# ended runs recalled, and those of them a successful run credited.
RUN_RECALLED: Final = "run_recalled"
RUN_RECALLED_HITS: Final = "run_recalled_hits"


def run_edge_id(run_id: str) -> str:
    """The hyperedge the write path groups a run's memories into."""
    return f"{RUN_EDGE_PREFIX}{run_id}"


@dataclass(frozen=True, slots=True)
class RoleWeight:
    credit: float  # share of the gain on a success
    blame: float  # share of the loss on a failure


def _default_roles() -> tuple[tuple[str, RoleWeight], ...]:
    return (
        ("action", RoleWeight(1.0, 1.0)),
        ("outcome", RoleWeight(0.5, 0.5)),
        ("context", RoleWeight(0.4, 0.4)),
        ("trigger", RoleWeight(0.3, 0.3)),
        (RECALLED, RoleWeight(0.6, 0.6)),
    )


@dataclass(frozen=True, slots=True)
class RunPolicy:
    gain: float = 0.10  # confidence added to an action of a perfect run
    loss: float = 0.15  # confidence taken from an action of a worthless run
    success_line: float = 0.5  # quality at or above it is a success
    strength_gain: float = 1.0  # per recalled memory, on a success only
    # How deep into a run's recalls credit reaches: the agent acts on the top of a
    # reply, so the memories below were shown, not used.
    recalled_depth: int = 3
    roles: tuple[tuple[str, RoleWeight], ...] = field(default_factory=_default_roles)

    def role(self, name: str) -> RoleWeight:
        for role, weight in self.roles:
            if role == name:
                return weight
        return RoleWeight(0.0, 0.0)


DEFAULT_RUN_POLICY: Final = RunPolicy()


@dataclass(frozen=True, slots=True)
class MemoryCredit:
    memory_id: str
    roles: tuple[str, ...]  # its roles in the run (a recalled member has two)
    confidence_delta: float
    strength_delta: float
    validated: int
    contradicted: int


def signed_quality(quality: float, policy: RunPolicy = DEFAULT_RUN_POLICY) -> float:
    """The quality as a signal in [-1, 1]: 0 at the success line."""
    line = policy.success_line
    if quality >= line:
        return (quality - line) / (1.0 - line) if line < 1.0 else 0.0
    return (quality - line) / line if line > 0.0 else 0.0


def _delta(signal: float, weight: RoleWeight, policy: RunPolicy) -> float:
    if signal >= 0.0:
        return policy.gain * weight.credit * signal
    return policy.loss * weight.blame * signal


def credit_run(
    quality: float,
    members: Mapping[str, str],
    recalled: Mapping[str, object] | frozenset[str] | set[str],
    policy: RunPolicy = DEFAULT_RUN_POLICY,
) -> tuple[MemoryCredit, ...]:
    """What the run's outcome does to each memory: `members` maps memory id → role
    in the run's hyperedge, `recalled` holds the ids the run recalled before it
    acted. Ordered by memory id."""
    success = quality >= policy.success_line
    signal = signed_quality(quality, policy)
    ids = sorted(set(members) | set(recalled))
    credits: list[MemoryCredit] = []
    for memory_id in ids:
        roles: list[str] = []
        delta = 0.0
        if memory_id in members:
            role = members[memory_id]
            roles.append(role)
            delta += _delta(signal, policy.role(role), policy)
        strength = 0.0
        if memory_id in recalled:
            roles.append(RECALLED)
            delta += _delta(signal, policy.role(RECALLED), policy)
            strength = policy.strength_gain if success else 0.0
        credits.append(
            MemoryCredit(
                memory_id=memory_id,
                roles=tuple(roles),
                confidence_delta=round(delta, 9),
                strength_delta=strength,
                # The run record is the runs a memory was part of: a memory the run
                # only recalled may have been read and rejected, not acted on.
                validated=1 if success and memory_id in members else 0,
                contradicted=1 if not success and memory_id in members else 0,
            )
        )
    return tuple(credits)


@dataclass(frozen=True, slots=True)
class RunLearning:
    """Everything one run's outcome changes, as absolute new values where a value is
    stored (edges, uplifts, weights) and as deltas where the store adds (credits)."""

    credits: tuple[MemoryCredit, ...]
    edges: tuple[CausalEdge, ...]
    uplifts: tuple[tuple[str, float], ...]
    weights: LearnedWeights | None  # None: the weights do not change


def learn_from_run(
    *,
    quality: float,
    members: Mapping[str, str],
    recalled: Mapping[str, Mapping[str, float]],
    out_edges: Mapping[str, Sequence[CausalEdge]],
    block: int,
    weights: LearnedWeights | None,
    initial: LearnedWeights,
    learn_weights: bool,
    causal_active: bool,
    policy: RunPolicy = DEFAULT_RUN_POLICY,
    hedge: HedgePolicy = DEFAULT_HEDGE_POLICY,
) -> RunLearning:
    """A run's outcome, planned: credits by role, the run's action → outcome edges
    reinforced with the signed quality, each cause's new uplift, and one Hedge step
    from what the run recalled. `out_edges`: the causes' stored out-edges."""
    success = quality >= policy.success_line
    signal = signed_quality(quality, policy)
    used = {m: f for m, f in recalled.items() if _rank(f) < policy.recalled_depth}
    credits = credit_run(quality, members, frozenset(used), policy)
    current = {(e.cause, e.effect): e for edges in out_edges.values() for e in edges}
    changed: list[CausalEdge] = []
    for cause, effect, sighting in run_links(members, signal):
        edge = reinforce(current.get((cause, effect)), cause, effect, sighting, block)
        current[(cause, effect)] = edge
        changed.append(edge)
    uplifts = _uplifts(current, changed)
    new_weights: LearnedWeights | None = None
    if learn_weights and used:
        observations = [
            Observation(_preference(used[m], recalled), success, 1.0 / (1.0 + _rank(used[m])))
            for m in sorted(used)
        ]
        active = frozenset(LEARNED_FACTORS) - (frozenset() if causal_active else {"causal"})
        new_weights = hedge_update(
            weights if weights is not None else initial,
            observations,
            initial,
            active=active,
            policy=hedge,
        )
    return RunLearning(credits, tuple(changed), uplifts, new_weights)


def _uplifts(
    current: Mapping[tuple[str, str], CausalEdge], changed: Sequence[CausalEdge]
) -> tuple[tuple[str, float], ...]:
    """Each cause with a changed edge and its new uplift, from all of its edges as
    they stand now (`current`, by cause and effect), causes in order."""
    causes = sorted({edge.cause for edge in changed})
    return tuple(
        (cause, causal_uplift(e for (c, _), e in sorted(current.items()) if c == cause))
        for cause in causes
    )


def _preference(
    factors: Mapping[str, float], shown: Mapping[str, Mapping[str, float]]
) -> dict[str, float]:
    """How much each factor favoured this memory over the others the reply showed,
    in [0, 1] (0.5: no more than the average). A factor's raw value says little: the
    top of a reply always has the best relevance, success or not; what tells a
    factor that separates what worked from what did not is whether it put the
    used memory ahead of the rest."""
    out: dict[str, float] = {}
    for name in LEARNED_FACTORS:
        mean = sum(f.get(name, 0.5) for f in shown.values()) / len(shown)
        out[name] = min(1.0, max(0.0, 0.5 + factors.get(name, 0.5) - mean))
    return out


def _rank(factors: Mapping[str, float]) -> int:
    return int(factors.get(RANK, 0.0))


@dataclass(frozen=True, slots=True)
class EndedRun:
    """A run whose outcome was learned from: a memory of the run journaled after it
    is credited when it is written, as if it had been there."""

    run_id: str
    outcome_id: str
    quality: float
    ts_ms: int
    block: int


def learn_from_late_members(
    ended: EndedRun,
    members: Mapping[str, str],
    late: frozenset[str],
    out_edges: Mapping[str, Sequence[CausalEdge]],
    policy: RunPolicy = DEFAULT_RUN_POLICY,
) -> RunLearning:
    """What the run's outcome does to members written after it (`late`, among
    `members`: the whole run as stored now). Each member's credit and each action →
    outcome edge depends only on its own ends, so crediting late members now gives
    what crediting them with the run would have: the order the journal holds them
    in does not matter."""
    signal = signed_quality(ended.quality, policy)
    credits = credit_run(ended.quality, {m: r for m, r in members.items() if m in late}, {}, policy)
    current = {(e.cause, e.effect): e for edges in out_edges.values() for e in edges}
    changed: list[CausalEdge] = []
    for cause, effect, sighting in run_links(members, signal):
        if cause not in late and effect not in late:
            continue  # sighted when the run ended
        edge = reinforce(current.get((cause, effect)), cause, effect, sighting, ended.block)
        current[(cause, effect)] = edge
        changed.append(edge)
    return RunLearning(credits, tuple(changed), _uplifts(current, changed), None)


def run_recall_counters(
    credits: Sequence[MemoryCredit], recalled: Mapping[str, object] | frozenset[str] | set[str]
) -> tuple[tuple[str, int], tuple[str, int]]:
    """A learned run's increments of the hit-rate counters: every distinct memory
    it recalled, and those a success credited as recalled (they gained strength:
    a success credits the top `recalled_depth` of each reply, which the run used)."""
    hits = sum(1 for c in credits if RECALLED in c.roles and c.strength_delta > 0)
    return ((RUN_RECALLED, len(recalled)), (RUN_RECALLED_HITS, hits))
