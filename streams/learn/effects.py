"""An outcome's effects and a run's credits on the agent's memories, as pure folds.

Applying an outcome (`fold_outcome`) or a run's credits (`fold_credits`) reads what
the store holds for it (`EffectsView`: whether the outcome id was applied before,
and per named memory whether it is the agent's, its stored confidence and its
usage hash's last access) and says what to write (`EffectChanges`). The store
loads the view and commits the changes; the agent's one writer (its journal
partition's apply loop) makes load-then-commit race-free.

The texts are the ones the former Lua scripts wrote, so a replay lands
byte-identical state: confidence is `clamp(stored or 0.5 + delta, 0, 1)` in IEEE
double, written as Lua 5.1's `tostring` writes a number (C's `"%.14g"`); last
access only moves forward in event time. Strength stays an increment the store
executes (`HINCRBYFLOAT`: Redis formats the sum), validated and contradicted are
counter increments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from grimoire.streams.learn.outcomes import Outcome
from grimoire.streams.learn.runs import MemoryCredit

__all__ = [
    "EffectChanges",
    "EffectsView",
    "MemoryChange",
    "MemoryState",
    "credited_ids",
    "fold_credits",
    "fold_outcome",
    "number_text",
]

_DEFAULT_CONFIDENCE = "0.5"


@dataclass(frozen=True, slots=True)
class MemoryState:
    owned: bool  # the memory hash exists with this agent's agent_id
    confidence: str | None = None  # its stored confidence text, None when unset
    last_accessed: str | None = None  # its usage hash's last access text, None when unset


@dataclass(frozen=True, slots=True)
class EffectsView:
    applied: bool  # the outcome id is among the agent's applied outcomes
    memories: Mapping[str, MemoryState]  # per memory id named; an id missing: not owned


@dataclass(frozen=True, slots=True)
class MemoryChange:
    memory_id: str
    confidence: str | None = None  # the new confidence text (HSET)
    strength: float | None = None  # the strength increment (HINCRBYFLOAT)
    validated: int = 0  # HINCRBY validated_count when not 0
    contradicted: int = 0  # HINCRBY contradicted_count when not 0
    last_accessed: str | None = None  # the usage hash's new last access (HSET)
    causal_uplift: str | None = None  # the causal uplift text (HSET)


@dataclass(frozen=True, slots=True)
class EffectChanges:
    outcome_id: str
    # In order, one per owned memory named (again when named again: each applies
    # on top of the one before, as the script did).
    memories: tuple[MemoryChange, ...]
    changed: int  # how many memories it changed (the witness record's count)
    mark_applied: bool = True  # add the outcome id to the applied outcomes


def number_text(value: float) -> str:
    """A number as Lua 5.1's `tostring` writes it (C `"%.14g"`): 1.0 -> "1"."""
    return "%.14g" % value  # noqa: UP031 (C's format, as Lua has it)


def _clamped(stored: str | None, delta: float) -> float:
    confidence = float(stored if stored is not None else _DEFAULT_CONFIDENCE) + delta
    return min(1.0, max(0.0, confidence))


def _forward(stored: str | None, ts_ms: int) -> bool:
    return float(stored if stored is not None else "0") < float(ts_ms)


class _Memories:
    """The view's memories, with the changes applied so far (a memory named twice
    reads its first change)."""

    def __init__(self, view: EffectsView) -> None:
        self._view = view
        self._now: dict[str, MemoryState] = {}

    def get(self, memory_id: str) -> MemoryState:
        now = self._now.get(memory_id)
        if now is not None:
            return now
        return self._view.memories.get(memory_id, MemoryState(owned=False))

    def put(self, memory_id: str, memory: MemoryState) -> None:
        self._now[memory_id] = memory


def fold_outcome(view: EffectsView, outcome: Outcome) -> EffectChanges | None:
    """An outcome's effect on the agent's memories it names; None when it was
    applied before. Every owned memory has its confidence rewritten, a delta of 0
    included."""
    if view.applied:
        return None
    effect = outcome.effect
    delta = float(effect.confidence_delta)
    memories = _Memories(view)
    changes: list[MemoryChange] = []
    for memory_id in outcome.memory_ids:
        stored = memories.get(memory_id)
        if not stored.owned:
            continue
        confidence = number_text(_clamped(stored.confidence, delta))
        accessed = None
        if effect.resets_decay and _forward(stored.last_accessed, outcome.ts_ms):
            accessed = str(outcome.ts_ms)
        changes.append(
            MemoryChange(
                memory_id,
                confidence=confidence,
                strength=effect.strength_delta if effect.strength_delta != 0 else None,
                validated=effect.validated,
                contradicted=effect.contradicted,
                last_accessed=accessed,
            )
        )
        memories.put(
            memory_id,
            MemoryState(
                True, confidence, accessed if accessed is not None else stored.last_accessed
            ),
        )
    return EffectChanges(outcome.outcome_id, tuple(changes), len(changes))


def credited_ids(credits: Sequence[MemoryCredit], uplifts: Mapping[str, float]) -> list[str]:
    """The memories a run's credits and causal uplifts name, in the order they are
    applied (memory id order)."""
    return sorted({credit.memory_id for credit in credits} | set(uplifts))


def fold_credits(
    view: EffectsView,
    outcome: Outcome,
    credits: Sequence[MemoryCredit],
    uplifts: Mapping[str, float],
) -> EffectChanges | None:
    """A run's credits and causal uplifts on the agent's memories, in memory id
    order; None when the outcome was applied before. A memory's confidence (and
    its decay origin, the testing effect) moves only when its delta is not 0."""
    if view.applied:
        return None
    by_id = {credit.memory_id: credit for credit in credits}
    changes: list[MemoryChange] = []
    for memory_id in credited_ids(credits, uplifts):
        stored = view.memories.get(memory_id, MemoryState(owned=False))
        if not stored.owned:
            continue
        credit = by_id.get(memory_id)
        uplift = uplifts.get(memory_id)
        confidence = accessed = None
        strength = None
        validated = contradicted = 0
        if credit is not None:
            delta = float(credit.confidence_delta)
            if delta != 0:
                confidence = number_text(_clamped(stored.confidence, delta))
                if _forward(stored.last_accessed, outcome.ts_ms):
                    accessed = str(outcome.ts_ms)
            if credit.strength_delta != 0:
                strength = credit.strength_delta
            validated, contradicted = credit.validated, credit.contradicted
        changes.append(
            MemoryChange(
                memory_id,
                confidence=confidence,
                strength=strength,
                validated=validated,
                contradicted=contradicted,
                last_accessed=accessed,
                causal_uplift=None if uplift is None else repr(uplift),
            )
        )
    return EffectChanges(outcome.outcome_id, tuple(changes), len(changes))
