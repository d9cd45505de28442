"""Evidence that aggregates (docs/learning.md): what an agent did in a situation and
how it turned out, counted across runs.

A single episode says how one run went; an agent choosing what to do needs the
record of an action in a situation over every run. When a run ends, each action
it took (a tool its action members called) in its situation (what its trigger
members say) gains one success or one failure. The count lives in an *evidence
entry*: an insight, one per situation x action, whose confidence is the mean of
a Beta posterior over the action's success rate. Recall puts a situation's
entries first, best first, when a query matches the situation
(`grimoire.streams.recall.evidence_first`).

The situation of a run is what the agent named it: the tags of its trigger
memories (e.g. `alert/disk-pressure`) and its regime. A trigger with no tag falls
back on its heaviest typed keys, which identify the situation only when the
trigger's text names no per-occurrence entity (a host, a person on call): name
the situation with a tag to be sure its runs pool.

Everything here is pure: the ids are digests of the agent, situation and action,
so a replay of the journal writes the same entries with the same counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from grimoire.streams.learn.curator.distill import situation_keys
from grimoire.streams.model.ids import memory_id, stable_digest

__all__ = [
    "DEFAULT_EVIDENCE_POLICY",
    "EVIDENCE_EVENT_TYPE",
    "SITUATION_EDGE_PREFIX",
    "EvidenceCount",
    "EvidencePolicy",
    "EvidenceUpdate",
    "NewEvidence",
    "RunMember",
    "action_of",
    "decision_score",
    "evidence_id",
    "evidence_text",
    "plan_evidence",
    "posterior_mean",
    "run_situation",
    "situation_edge",
    "situation_signature",
]

# The provenance event type of an evidence entry: recall tells them apart by it.
EVIDENCE_EVENT_TYPE: Final = "evidence"
# The hyperedge that groups a situation's entries (one member per action).
SITUATION_EDGE_PREFIX: Final = "situation:"
_TOOL: Final = "tool:"
_TAG: Final = "tag:"
_REGIME: Final = "regime:"


@dataclass(frozen=True, slots=True)
class EvidencePolicy:
    """`prior_successes`/`prior_failures`: the Beta prior's pseudo-counts (1, 1 is
    uniform: an action tried once and successful is at 2/3). `fallback_keys`: how
    many typed keys name an untagged situation. `exploration_bonus`: the weight
    of a deterministic optimism for rarely tried actions when recall orders a
    situation's entries (UCB1's `sqrt(ln N / n)`; 0, the default, orders by the
    posterior mean alone). `max_example_chars`: how much of the first trigger an
    entry quotes, so that a query about the situation finds it."""

    prior_successes: float = 1.0
    prior_failures: float = 1.0
    fallback_keys: int = 3
    exploration_bonus: float = 0.0
    max_example_chars: int = 240

    def __post_init__(self) -> None:
        if self.prior_successes <= 0 or self.prior_failures <= 0:
            raise ValueError("the Beta prior's pseudo-counts must be > 0")
        if self.exploration_bonus < 0:
            raise ValueError("exploration_bonus must be >= 0")
        if self.fallback_keys < 1 or self.max_example_chars < 1:
            raise ValueError("fallback_keys and max_example_chars must be >= 1")


DEFAULT_EVIDENCE_POLICY: Final = EvidencePolicy()


@dataclass(frozen=True, slots=True)
class RunMember:
    """What the evidence needs of one memory of the run: its role, keys and text."""

    memory_id: str
    role: str
    nexus_keys: tuple[str, ...]
    text: str
    ts_ms: int


@dataclass(frozen=True, slots=True)
class EvidenceCount:
    """An entry as stored: its successes and failures and its confidence."""

    memory_id: str
    successes: int
    failures: int
    confidence: float


@dataclass(frozen=True, slots=True)
class NewEvidence:
    """An entry the run creates (with no count: the run's count comes as an update,
    in the transaction that marks the outcome applied)."""

    memory_id: str
    situation: tuple[str, ...]
    action: str
    text: str
    ts_ms: int
    confidence: float

    @property
    def edge_id(self) -> str:
        return situation_edge(self.situation)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(sorted({*self.situation, f"{_TOOL}{self.action}"}))


@dataclass(frozen=True, slots=True)
class EvidenceUpdate:
    """One run's count for an entry, and the confidence delta that leaves the
    entry's confidence at its new posterior mean."""

    memory_id: str
    success: bool
    confidence_delta: float


@dataclass(frozen=True, slots=True)
class EvidencePlan:
    created: tuple[NewEvidence, ...]
    updates: tuple[EvidenceUpdate, ...]

    @property
    def entry_ids(self) -> tuple[str, ...]:
        return tuple(update.memory_id for update in self.updates)


def run_situation(
    triggers: Iterable[RunMember], policy: EvidencePolicy = DEFAULT_EVIDENCE_POLICY
) -> tuple[str, ...]:
    """The situation the run's trigger members name: their tags and regime; with no
    tag, their `fallback_keys` heaviest situation keys. () when nothing names it."""
    keys = sorted({key for member in triggers for key in member.nexus_keys})
    named = [key for key in keys if key.startswith((_TAG, _REGIME))]
    if any(key.startswith(_TAG) for key in named):
        return tuple(named)
    return situation_keys(keys, policy.fallback_keys)


def situation_signature(situation: Sequence[str]) -> str:
    return stable_digest("evidence-situation/1", *sorted(situation)).hex()[:24]


def situation_edge(situation: Sequence[str]) -> str:
    return f"{SITUATION_EDGE_PREFIX}{situation_signature(situation)}"


def evidence_id(agent_id: str, situation: Sequence[str], action: str) -> str:
    """Same agent, situation and action: same entry, on every replay (event time 0
    in the id: an entry is one per situation x action, not per event)."""
    return memory_id(agent_id, f"evidence/{situation_signature(situation)}/{action}", 0, 0)


def posterior_mean(
    successes: float, failures: float, policy: EvidencePolicy = DEFAULT_EVIDENCE_POLICY
) -> float:
    a, b = policy.prior_successes, policy.prior_failures
    return (a + successes) / (a + b + successes + failures)


def decision_score(
    successes: float,
    failures: float,
    situation_trials: float,
    policy: EvidencePolicy = DEFAULT_EVIDENCE_POLICY,
) -> float:
    """The order recall gives a situation's entries: the posterior mean, plus the
    exploration bonus `c * sqrt(ln(N + 1) / (n + 1))` (N: the situation's runs, n:
    this action's) when the policy has one."""
    mean = posterior_mean(successes, failures, policy)
    if policy.exploration_bonus <= 0:
        return mean
    tried = successes + failures
    return mean + policy.exploration_bonus * math.sqrt(math.log(situation_trials + 1) / (tried + 1))


def evidence_text(
    situation: Sequence[str],
    action: str,
    example: str,
    policy: EvidencePolicy = DEFAULT_EVIDENCE_POLICY,
) -> str:
    """What the entry says, fixed at creation (its counts are fields, so the text
    and its vector never change): the action, the situation's keys and the first
    trigger that met it, which is what a query about the situation resembles."""
    named = ", ".join(_shown(key) for key in situation) or "an unnamed situation"
    quoted = " ".join(example.split())[: policy.max_example_chars]
    text = f"Evidence for action {action} in {named}."
    return f"{text} Situation seen: {quoted}" if quoted else text


def _shown(key: str) -> str:
    for prefix in (_TAG, _REGIME):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def action_of(nexus_keys: Iterable[str]) -> str:
    """The action (tool) an evidence entry's keys name ("" when none)."""
    return next((key[len(_TOOL) :] for key in nexus_keys if key.startswith(_TOOL)), "")


def run_actions(actions: Iterable[RunMember]) -> tuple[str, ...]:
    """The tools the run's action members called, sorted: each is an action."""
    return tuple(
        sorted(
            {
                key[len(_TOOL) :]
                for member in actions
                for key in member.nexus_keys
                if key.startswith(_TOOL)
            }
        )
    )


def plan_evidence(
    agent_id: str,
    *,
    success: bool,
    members: Sequence[RunMember],
    stored: Mapping[str, EvidenceCount],
    policy: EvidencePolicy = DEFAULT_EVIDENCE_POLICY,
) -> EvidencePlan:
    """A run's evidence: one count per action in its situation. `stored` holds the
    entries that exist (by id, at least those of this situation's actions). A run
    with no named situation or no tool call counts nothing."""
    ordered = sorted(members, key=lambda m: (m.ts_ms, m.memory_id))
    triggers = [m for m in ordered if m.role == "trigger"]
    situation = run_situation(triggers, policy)
    actions = run_actions(m for m in ordered if m.role == "action")
    if not situation or not actions:
        return EvidencePlan((), ())
    example = triggers[0].text if triggers else ""
    created: list[NewEvidence] = []
    updates: list[EvidenceUpdate] = []
    prior = posterior_mean(0, 0, policy)
    for action in actions:
        entry_id = evidence_id(agent_id, situation, action)
        count = stored.get(entry_id)
        if count is None:
            created.append(
                NewEvidence(
                    entry_id,
                    situation,
                    action,
                    evidence_text(situation, action, example, policy),
                    ordered[0].ts_ms,
                    prior,
                )
            )
            count = EvidenceCount(entry_id, 0, 0, prior)
        successes = count.successes + (1 if success else 0)
        failures = count.failures + (0 if success else 1)
        after = posterior_mean(successes, failures, policy)
        updates.append(EvidenceUpdate(entry_id, success, round(after - count.confidence, 12)))
    return EvidencePlan(tuple(created), tuple(updates))
