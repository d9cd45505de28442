"""Outcome events (docs/design.md §7, the minimal part the curator needs): what a tick's
result does to the memories that were used in it.

positive → strength +1, confidence +0.1; negative → confidence -0.15; both reset
the decay origin to the outcome's event time. validated / contradicted count
towards the curator's review. run_ended with a `quality` is a run's outcome: it
credits or blames every memory of the run's hyperedge by role and what the run
recalled (`grimoire.streams.learn.runs`); without one it only closes the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from grimoire.streams.clade.copies import CladeRoute


class OutcomeKind(StrEnum):
    POSITIVE = "positive"
    NEGATIVE = "negative"
    VALIDATED = "validated"
    CONTRADICTED = "contradicted"
    RUN_ENDED = "run_ended"


@dataclass(frozen=True, slots=True)
class OutcomeEffect:
    confidence_delta: float = 0.0
    strength_delta: float = 0.0
    resets_decay: bool = False
    validated: int = 0
    contradicted: int = 0

    @property
    def touches_memories(self) -> bool:
        return self != NO_EFFECT


NO_EFFECT = OutcomeEffect()
_EFFECTS = {
    OutcomeKind.POSITIVE: OutcomeEffect(0.1, 1.0, True),
    OutcomeKind.NEGATIVE: OutcomeEffect(-0.15, 0.0, True),
    OutcomeKind.VALIDATED: OutcomeEffect(validated=1),
    OutcomeKind.CONTRADICTED: OutcomeEffect(contradicted=1),
    OutcomeKind.RUN_ENDED: NO_EFFECT,
}


def effect_of(kind: OutcomeKind) -> OutcomeEffect:
    return _EFFECTS[kind]


@dataclass(frozen=True, slots=True)
class Outcome:
    outcome_id: str  # the event id, or a hash of the payload: a redelivery is recognised
    agent_id: str
    ts_ms: int
    kind: OutcomeKind
    memory_ids: tuple[str, ...]
    run_id: str = ""
    quality: float | None = None  # a run's result in [0, 1]; >= 0.5 is a success
    # a run's end: where its evidence goes (the agent's clades, journaled with it)
    route: CladeRoute = ()

    @property
    def ends_run(self) -> bool:
        """A run's outcome that learning acts on: run_ended, naming a run, with a quality."""
        return self.kind is OutcomeKind.RUN_ENDED and bool(self.run_id) and self.quality is not None

    @property
    def effect(self) -> OutcomeEffect:
        return effect_of(self.kind)
