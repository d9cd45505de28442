"""Queries over facts, as pure functions of the versions read.

* `valid_at(facts, block)`: the versions that hold at a block, as known now.
* `as_known_at(facts, ts_ms, block=None)`: what the agent knew at transaction
  time `ts_ms`: versions asserted at or before it, each with only the closures
  recorded at or before it (a version closed later was still open then); with
  `block`, only those that held at that block as known then.
* `neighbours(facts, entity, hops)`: entities within `hops` links of `entity`
  over facts whose object is an entity (subject ↔ object, either direction),
  active facts only, or those valid at `at_block`.
* `entity_links(facts)`: for each entity key, the entity keys active facts link
  it to (what recall's walk follows).

Every result is in a stable order, so answers and replays compare byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from grimoire.streams.facts.exceptions import InvalidFact
from grimoire.streams.facts.values import Fact, entity_name

__all__ = [
    "MAX_HOPS",
    "ReachedEntity",
    "as_known_at",
    "entity_links",
    "fact_order",
    "neighbours",
    "reachable_entities",
    "valid_at",
]

MAX_HOPS = 4


def fact_order(fact: Fact) -> tuple[str, str, int, int, str]:
    """How facts are listed: by subject, predicate, start, assert order."""
    return (fact.subject, fact.predicate, fact.valid_from, fact.order, fact.fact_id)


def _sorted(facts: Iterable[Fact]) -> list[Fact]:
    return sorted(facts, key=fact_order)


def valid_at(facts: Iterable[Fact], block: int) -> list[Fact]:
    return _sorted(f for f in facts if f.valid_at(block))


def as_known_at(facts: Iterable[Fact], ts_ms: int, block: int | None = None) -> list[Fact]:
    known = []
    for fact in facts:
        if fact.known_from_ms > ts_ms:
            continue
        closures = tuple(c for c in fact.closures if c.at_ms <= ts_ms)
        then = fact if closures == fact.closures else replace(fact, closures=closures)
        if block is None or then.valid_at(block):
            known.append(then)
    return _sorted(known)


@dataclass(frozen=True, slots=True)
class ReachedEntity:
    """An entity `hops` links away, and the facts that reach it from the layer
    before (sorted ids)."""

    entity: str
    hops: int
    via: tuple[str, ...]


def _linking(fact: Fact, at_block: int | None) -> bool:
    if not fact.object_is_entity or fact.object == fact.subject:
        return False
    return fact.active if at_block is None else fact.valid_at(at_block)


def neighbours(
    facts: Iterable[Fact], entity: str, *, hops: int = 1, at_block: int | None = None
) -> list[ReachedEntity]:
    """Breadth first from `entity` (normalised here), sorted by (hops, entity);
    the start itself is not listed."""
    if hops < 0 or hops > MAX_HOPS:
        raise InvalidFact(f"hops must be within 0..{MAX_HOPS}, got {hops}")
    start = entity_name(entity)
    adjacent: dict[str, dict[str, set[str]]] = {}
    for fact in facts:
        if _linking(fact, at_block):
            a, b = fact.subject, fact.object
            adjacent.setdefault(a, {}).setdefault(b, set()).add(fact.fact_id)
            adjacent.setdefault(b, {}).setdefault(a, set()).add(fact.fact_id)
    seen = {start}
    frontier = [start]
    found: list[ReachedEntity] = []
    for hop in range(1, hops + 1):
        reached: dict[str, set[str]] = {}
        for here in frontier:
            for there, via in adjacent.get(here, {}).items():
                if there not in seen:
                    reached.setdefault(there, set()).update(via)
        layer = sorted(reached)
        found.extend(ReachedEntity(e, hop, tuple(sorted(reached[e]))) for e in layer)
        seen.update(layer)
        frontier = layer
        if not frontier:
            break
    return found


def entity_links(facts: Iterable[Fact]) -> dict[str, list[tuple[str, str]]]:
    """entity key -> [(linked entity key, fact id)], sorted, from active facts
    whose object is an entity (both directions)."""
    links: dict[str, set[tuple[str, str]]] = {}
    for fact in facts:
        if not _linking(fact, None):
            continue
        subject, obj = fact.subject_key, fact.object_key
        assert obj is not None
        links.setdefault(subject, set()).add((obj, fact.fact_id))
        links.setdefault(obj, set()).add((subject, fact.fact_id))
    return {key: sorted(pairs) for key, pairs in sorted(links.items())}


def reachable_entities(facts: Sequence[Fact], entities: Iterable[str]) -> set[str]:
    """The entity names `facts` link `entities` to, in one step (either direction,
    any validity): what a store reads next when it gathers a k-hop neighbourhood."""
    wanted = set(entities)
    found: set[str] = set()
    for fact in facts:
        if not fact.object_is_entity:
            continue
        if fact.subject in wanted:
            found.add(fact.object)
        if fact.object in wanted:
            found.add(fact.subject)
    return found - wanted
