"""A bi-temporal fact: a (subject, predicate, object) triple with two times.

Valid time is in blocks: when the fact held in the world (`valid_from` up to, not
including, `valid_until`; None: it still holds). Transaction time is event time in
milliseconds: when the agent learned it (`known_from_ms`, the assert event's time)
and when a later assert closed it (each `Closure`). A closed version is never
deleted by an assert, so "what did I know at time T" can be answered; only a
retraction removes one (the source was wrong, not out of date).

Entity names are normalised as the write path normalises the `entities` field
into `entity:` nexus keys (`grimoire.streams.model.nexus_keys`): a fact's subject
`Alice` and a memory mentioning Alice meet on the key `entity:alice`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from grimoire.streams.facts.exceptions import InvalidFact
from grimoire.streams.model.ids import stable_digest

__all__ = [
    "ENTITY_PREFIX",
    "MAX_NAME_CHARS",
    "Closure",
    "Fact",
    "FactChanges",
    "entity_key",
    "entity_name",
    "fact_id_for",
    "predicate_name",
]

ENTITY_PREFIX: Final = "entity:"
# A nexus key is at most 200 characters (nexus_keys.MAX_KEY_LENGTH), prefix included.
MAX_NAME_CHARS: Final = 200 - len(ENTITY_PREFIX)
_WHITESPACE: Final = re.compile(r"\s+")


def entity_name(raw: str) -> str:
    """The normalised entity name (`nexus_keys` does the same to `entities`):
    trimmed, a leading `@`/`$` and an `entity:` prefix dropped, lowercased,
    whitespace runs as `_`."""
    text = raw.strip()
    if text.lower().startswith(ENTITY_PREFIX):
        text = text[len(ENTITY_PREFIX) :]
    name = _WHITESPACE.sub("_", text.strip().lstrip("@$").strip().lower())
    if not name:
        raise InvalidFact(f"{raw!r} names no entity")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidFact(f"an entity name is at most {MAX_NAME_CHARS} characters")
    return name


def entity_key(name: str) -> str:
    """The nexus key of an (already normalised) entity name."""
    return f"{ENTITY_PREFIX}{name}"


def predicate_name(raw: str) -> str:
    """Predicates compare case-insensitively, whitespace as `_` (`works at` is
    `works_at`)."""
    name = _WHITESPACE.sub("_", raw.strip().lower())
    if not name:
        raise InvalidFact("an empty predicate")
    return name


def fact_id_for(agent_id: str, source_event_id: str) -> str:
    """A fact's id: a hash of its agent and its assert event, so a redelivered or
    replayed assert is the same fact, and a retraction of the event finds it."""
    return "fact-" + stable_digest("fact", agent_id, source_event_id)[:16].hex()


@dataclass(frozen=True, slots=True, order=True)
class Closure:
    """One time a later assert cut this version's validity: from then on
    (transaction time `at_ms`) it was valid until block `valid_until`."""

    at_ms: int
    valid_until: int
    by: str  # the fact id of the assert that closed it


@dataclass(frozen=True, slots=True)
class Fact:
    """One version of a (subject, predicate) relation of one agent.

    `order` is its place among the versions of its (subject, predicate): asserts
    are applied in journal order, which event times need not follow, so the
    timeline is rebuilt (after a retraction) in this order. `born_until`: a fact
    asserted for a time before the current one is stored closed from the start
    (valid up to the next version's `valid_from`). `confidence`: 1.0 for the
    agent's own asserts; an inherited version's is its predecessor's times the
    successor discount (`grimoire.streams.exchange.inherit_knowledge`)."""

    fact_id: str
    agent_id: str
    subject: str
    predicate: str
    object: str
    object_is_entity: bool
    valid_from: int
    known_from_ms: int
    source_event_id: str
    order: int = 0
    born_until: int | None = None
    closures: tuple[Closure, ...] = ()
    confidence: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.confidence <= 1.0:
            raise InvalidFact(f"confidence must be within [0, 1], got {self.confidence}")
        if self.valid_from < 0:
            raise InvalidFact(f"valid_from must be >= 0, got {self.valid_from}")
        if self.born_until is not None and self.born_until < self.valid_from:
            raise InvalidFact("a fact cannot end before it starts")

    @property
    def valid_until(self) -> int | None:
        """The block it stopped holding at (exclusive), as known now; None: active."""
        return self.closures[-1].valid_until if self.closures else self.born_until

    @property
    def superseded_at_ms(self) -> int | None:
        """The transaction time it was last closed at (None: never superseded)."""
        return self.closures[-1].at_ms if self.closures else None

    @property
    def superseded_by(self) -> str | None:
        return self.closures[-1].by if self.closures else None

    @property
    def active(self) -> bool:
        return self.valid_until is None

    @property
    def subject_key(self) -> str:
        return entity_key(self.subject)

    @property
    def object_key(self) -> str | None:
        """The object's nexus key when the object is an entity."""
        return entity_key(self.object) if self.object_is_entity else None

    @property
    def entities(self) -> tuple[str, ...]:
        """The entity names it touches (subject, and object when an entity)."""
        if self.object_is_entity and self.object != self.subject:
            return (self.subject, self.object)
        return (self.subject,)

    def valid_at(self, block: int) -> bool:
        until = self.valid_until
        return self.valid_from <= block and (until is None or block < until)

    def pristine(self) -> Fact:
        """The fact as asserted, before any timeline placed or closed it."""
        return Fact(
            fact_id=self.fact_id,
            agent_id=self.agent_id,
            subject=self.subject,
            predicate=self.predicate,
            object=self.object,
            object_is_entity=self.object_is_entity,
            valid_from=self.valid_from,
            known_from_ms=self.known_from_ms,
            source_event_id=self.source_event_id,
            order=self.order,
            confidence=self.confidence,
        )


@dataclass(frozen=True, slots=True)
class FactChanges:
    """What one assert or retraction does to the stored versions: versions to
    write (new or changed), fact ids to remove."""

    upserts: tuple[Fact, ...] = ()
    removed: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.upserts and not self.removed
