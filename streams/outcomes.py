"""Outcome events (SPEC §7, the minimal part the curator needs): what a tick's
result does to the memories that were used in it.

positive → strength +1, confidence +0.1; negative → confidence -0.15; both reset
the decay origin to the outcome's event time. validated / contradicted count
towards the curator's review; run_ended only closes a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import orjson

from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.fields import (
    INVALID_VALUE,
    OVERSIZE,
    Fields,
    InputLimits,
    plausible_agent_id,
)
from grimoire.streams.ids import content_event_id
from grimoire.streams.normalize import UNSUPPORTED_SCHEMA, Rejection, decode_object

OUTCOME_SCHEMA = "grimoire.outcome/1"
MAX_OUTCOME_MEMORIES = 256


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

    @property
    def effect(self) -> OutcomeEffect:
        return effect_of(self.kind)


def parse_outcome(raw: bytes, limits: InputLimits) -> Outcome | Rejection:
    agent_id: str | None = None
    try:
        data = Fields(decode_object(raw), limits)
        agent_id = plausible_agent_id(data.data, limits)
        schema = data.text("schema")
        if schema and schema != OUTCOME_SCHEMA:
            raise InvalidEvent(UNSUPPORTED_SCHEMA, f"expected {OUTCOME_SCHEMA}", "schema")
        kind_text = data.identifier("outcome", required=True)
        try:
            kind = OutcomeKind(kind_text)
        except ValueError:
            known = ", ".join(k.value for k in OutcomeKind)
            raise InvalidEvent(
                INVALID_VALUE, f"'outcome' must be one of {known}", "outcome"
            ) from None
        memory_ids = data.string_list("memory_ids")
        if len(memory_ids) > MAX_OUTCOME_MEMORIES:
            raise InvalidEvent(OVERSIZE, f"at most {MAX_OUTCOME_MEMORIES} memory_ids", "memory_ids")
        event_id = data.identifier("event_id")
        return Outcome(
            outcome_id=event_id
            or content_event_id(orjson.dumps(data.data, option=orjson.OPT_SORT_KEYS)),
            agent_id=data.identifier("agent_id", required=True),
            ts_ms=data.timestamp_ms("ts"),
            kind=kind,
            memory_ids=tuple(sorted(set(memory_ids))),
            run_id=data.identifier("run_id"),
        )
    except InvalidEvent as exc:
        return Rejection(exc.reason, exc.detail, exc.field, agent_id)
