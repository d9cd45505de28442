"""Asserting and retracting facts: the timeline of one (subject, predicate).

Assert (`assert_fact`), with `v` the new fact's `valid_from`:

* The version that holds at block `v` (the latest-starting one whose interval
  contains `v`; ties: the later asserted) is closed at `v`: its `valid_until`
  becomes `v` and the closure is stamped with the new fact's transaction time.
  Usually that is the active version, so the new fact supersedes it.
* An assert for an earlier time than the active version's start (a late
  discovery of an older state) does not touch the active version: the new fact
  is stored closed from the start, valid until the next version begins, and it
  cuts whatever version held at `v` before it. At most one version per
  (subject, predicate) is ever active, and it is the latest-starting one.
* An assert with the same `valid_from` as the active version replaces it: the old
  one keeps an empty interval (it never held, as now known) but stays in the
  transaction-time history.
* A fact id already present (a redelivered assert) changes nothing.

Retract (`retract`): the retracted version is removed and the others are placed
again, in their assert order, as if it had never been asserted. The version it
had closed is open again (or cut only by what else closed it), with the
`valid_until` and `superseded_at_ms` it had before. A retraction rewrites the
transaction-time history too: the source was wrong, not out of date.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from grimoire.streams.facts.exceptions import InvalidFact
from grimoire.streams.facts.values import Closure, Fact, FactChanges

__all__ = ["assert_fact", "next_order", "retract", "timeline"]


def next_order(versions: Sequence[Fact]) -> int:
    """The order a new assert of this (subject, predicate) takes."""
    return max((v.order for v in versions), default=0) + 1


def _check_group(versions: Sequence[Fact], new: Fact) -> None:
    for version in versions:
        if (version.agent_id, version.subject, version.predicate) != (
            new.agent_id,
            new.subject,
            new.predicate,
        ):
            raise InvalidFact(
                f"{version.fact_id} is not a version of ({new.subject}, {new.predicate})"
            )


def _place(current: dict[str, Fact], new: Fact) -> list[Fact]:
    """Insert `new` into `current` (one group, by id); the versions it changed
    (itself first)."""
    v = new.valid_from
    holding = [
        f
        for f in current.values()
        if f.valid_from <= v and (f.valid_until is None or v < f.valid_until)
    ]
    later = [f.valid_from for f in current.values() if f.valid_from > v]
    placed = replace(new, born_until=min(later) if later else None, closures=())
    changed = [placed]
    if holding:
        prev = max(holding, key=lambda f: (f.valid_from, f.order, f.fact_id))
        closure = Closure(at_ms=new.known_from_ms, valid_until=v, by=new.fact_id)
        closed = replace(prev, closures=(*prev.closures, closure))
        current[prev.fact_id] = closed
        changed.append(closed)
    current[placed.fact_id] = placed
    return changed


def assert_fact(versions: Sequence[Fact], new: Fact) -> FactChanges:
    """What asserting `new` does to `versions` (every stored version of its agent,
    subject and predicate); `new` takes the next assert order of its group."""
    _check_group(versions, new)
    if any(v.fact_id == new.fact_id for v in versions):
        return FactChanges()
    current = {v.fact_id: v for v in versions}
    changed = _place(current, replace(new, order=next_order(versions)))
    return FactChanges(upserts=tuple(changed))


def timeline(asserted: Sequence[Fact]) -> dict[str, Fact]:
    """The versions that asserting `asserted` (one group) in their order gives."""
    current: dict[str, Fact] = {}
    for fact in sorted(asserted, key=lambda f: (f.order, f.fact_id)):
        _place(current, fact.pristine())
    return current


def retract(versions: Sequence[Fact], fact_id: str) -> FactChanges:
    """Remove `fact_id` from `versions` (one group) and place the others again;
    nothing when it is not among them."""
    if not any(v.fact_id == fact_id for v in versions):
        return FactChanges()
    rebuilt = timeline([v for v in versions if v.fact_id != fact_id])
    before = {v.fact_id: v for v in versions}
    upserts = tuple(fact for fid, fact in sorted(rebuilt.items()) if before.get(fid) != fact)
    return FactChanges(upserts=upserts, removed=(fact_id,))
