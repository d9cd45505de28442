"""A successor inheriting its predecessor's knowledge (docs/design.md §7, "inherited knowledge").

A successor takes on what another agent learned under conditions it never lived
through: the knowledge arrives marked as someone else's (`provenance` =
`predecessor`), at a discount (it has to be re-validated by the successor's own
experience before it weighs as much as its own), and fades slowly unless used
(lineage provenances get the slower half-life, `streams/model/decay.py`).

The rule, applied to an export's lines (docs/export-format.md):

- memories: only live ones (not deleted, archived, quarantined, retracted or
  replaced by a summary). Each gets a new id, `memory_id(successor,
  "predecessor:<predecessor>:<old id>", 0, ts)` (deterministic: importing the same
  file twice writes the same ids; still a UUIDv7 of the memory's event time);
  `agent_id` becomes the successor, `provenance` `predecessor`, `confidence` is
  multiplied by the discount, the usage and validation counters start at 0,
  `predecessor_agent_id` / `predecessor_memory_id` name where it came from, and an
  `aggregate_of` pointing at an inherited memory is remapped (dropped otherwise).
  Everything else (text, vectors, event time, last access, nexus keys, kind,
  layer, quality, importance, hyperedge ids, lineage fields) is kept.
- hyperedges, nexus keys and the decay schedule: remapped to the new ids, members
  that were not inherited dropped (a key left empty is dropped).
- facts and causal edges (`inherit_knowledge.py`): every fact version, under a
  new id derived from the old one, `confidence` multiplied by the discount; the
  causal edges between two inherited memories, between their new ids, `weight`
  multiplied by the discount (an edge naming a memory left behind is dropped).
- the successor's watermark: moved up to the newest inherited memory's event
  time (never back), so the successor counts as an agent with memories (recall
  answers `none` for an agent with no watermark).
- nothing else: usage counters are reset, the predecessor's field state,
  watermark, configuration, decisions, outcomes, learned weights, curator state
  and PLAYBOOK.md, derivation index and maintenance history stay its own
  (curated insights and heuristics are memories, and are inherited as such).
  The walk's node table and the term counts are derived from the inherited
  memories where they are written.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

from grimoire.streams.exchange.format import (
    ExchangeError,
    StateLine,
    hash_line,
    hash_of,
    zset_of,
)
from grimoire.streams.exchange.inherit_knowledge import (
    KNOWLEDGE_FAMILIES,
    KnowledgeRemap,
    causal_uplifts,
)
from grimoire.streams.model.ids import memory_id

__all__ = [
    "COUNTERS",
    "DEFAULT_INHERITANCE_DISCOUNT",
    "PREDECESSOR",
    "Inheritance",
    "InheritanceOptions",
    "successor_memory_id",
]

PREDECESSOR: Final = "predecessor"
DEFAULT_INHERITANCE_DISCOUNT: Final = 0.5
# Usage and validation counters: the successor's own experience starts from zero.
COUNTERS: Final = (
    "included_count_total",
    "included_count_decay",
    "validated_count",
    "contradicted_count",
    "reinforced_count",
)
_NOT_LIVE: Final = ("deleted", "archived", "quarantined", "retracted")
# Families carried over, remapped; everything else stays the predecessor's. The
# facts' and causal graph's are remapped (and discounted) by `inherit_knowledge`.
REMAPPED: Final = frozenset({"hyperedge", "nexus", "decay"}) | KNOWLEDGE_FAMILIES
_FORWARD: Final = b"predecessor:"  # an `aggregate_of` awaiting its remapping
_UPLIFT: Final = b"causal_uplift"  # recall's causal uplift, of the memory's out-edges


@dataclass(frozen=True, slots=True)
class InheritanceOptions:
    discount: float = DEFAULT_INHERITANCE_DISCOUNT  # confidence multiplier, (0, 1]

    def __post_init__(self) -> None:
        if not 0.0 < self.discount <= 1.0:
            raise ValueError(f"the inheritance discount must be within (0, 1], got {self.discount}")


def successor_memory_id(successor: str, predecessor: str, old_id: str, ts_ms: int) -> str:
    return memory_id(successor, f"{PREDECESSOR}:{predecessor}:{old_id}", 0, ts_ms)


@dataclass
class Inheritance:
    """Turns a predecessor's export lines into the successor's, line by line.

    Memory lines come first in an export (`FAMILY_ORDER`), so every inherited id is
    known before a line that names memories is remapped."""

    predecessor: str
    successor: str
    options: InheritanceOptions = field(default_factory=InheritanceOptions)
    ids: dict[bytes, bytes] = field(default_factory=dict)  # old id -> new id
    latest_ts: int | None = None  # the newest inherited memory's event time
    # new id -> the causal uplift its inherited out-edges give (`lines` fills it)
    uplifts: dict[bytes, float] = field(default_factory=dict)
    _past_memories: bool = False

    def __post_init__(self) -> None:
        if not self.successor or self.successor == self.predecessor:
            raise ValueError("a successor needs an agent id of its own")

    def lines(self, lines: Iterable[StateLine]) -> Iterator[StateLine]:
        """The successor's lines, memories first. Inherited memories are held until
        every line is in, so an `aggregate_of` naming a later one is resolved and a
        `causal_uplift` is the one the inherited causal edges give."""
        held: list[StateLine] = []
        rest: list[StateLine] = []
        for line in lines:
            (held if line.type == "memory" else rest).extend(self.line(line))
        self.uplifts = causal_uplifts(line for line in rest if line.type == "causal_edges")
        yield from (self.finish_memory(m) for m in held)
        yield from rest
        if self.latest_ts is not None:
            # The successor now holds memories up to this event time; its watermark
            # is moved up to it, never back (the writer adds it with GT).
            yield StateLine("watermark", "", "score", float(self.latest_ts))

    def line(self, line: StateLine) -> list[StateLine]:
        """One line's successor lines (a memory's `aggregate_of` may still need
        `finish_memory`; `lines` does both)."""
        if line.type == "memory":
            if self._past_memories:
                raise ExchangeError("a memory line after other families (file out of order)")
            inherited = self._memory(line)
            return [] if inherited is None else [inherited]
        self._past_memories = True
        if line.type not in REMAPPED:
            return []
        remapped = self._remap(line)
        return [] if remapped is None else [remapped]

    def _memory(self, line: StateLine) -> StateLine | None:
        if line.kind != "hash":
            raise ExchangeError(f"memory {line.name}: expected a hash")
        fields = hash_of(line)
        if any(fields.get(name.encode()) == b"1" for name in _NOT_LIVE) or fields.get(
            b"replaced_by_summary_id"
        ):
            return None
        try:
            ts_ms = int(float(fields[b"ts"]))
            confidence = float(fields.get(b"confidence", b"0.5"))
        except (KeyError, ValueError):
            raise ExchangeError(f"memory {line.name}: no readable ts or confidence") from None
        new_id = successor_memory_id(self.successor, self.predecessor, line.name, ts_ms)
        self.ids[line.name.encode()] = new_id.encode()
        self.latest_ts = ts_ms if self.latest_ts is None else max(self.latest_ts, ts_ms)
        fields[b"memory_id"] = new_id.encode()
        fields[b"agent_id"] = self.successor.encode()
        fields[b"provenance"] = PREDECESSOR.encode()
        fields[b"confidence"] = repr(confidence * self.options.discount).encode()
        for counter in COUNTERS:
            if counter.encode() in fields:
                fields[counter.encode()] = b"0"
        fields[b"predecessor_agent_id"] = self.predecessor.encode()
        fields[b"predecessor_memory_id"] = line.name.encode()
        aggregate = fields.pop(b"aggregate_of", None)
        if aggregate is not None:
            # Resolved by `finish_memory` once every memory is known.
            fields[b"aggregate_of"] = _FORWARD + aggregate
        return hash_line(line, fields, new_id)

    def finish_memory(self, line: StateLine) -> StateLine:
        """An inherited memory line with its `aggregate_of` remapped (or dropped,
        when its target was not inherited) and its `causal_uplift` the one of its
        inherited out-edges (`uplifts`; none: no uplift stored); once every memory
        line and the causal edges are in."""
        fields = hash_of(line)
        changed = False
        aggregate = fields.get(b"aggregate_of")
        if aggregate is not None and aggregate.startswith(_FORWARD):
            target = self.ids.get(aggregate.removeprefix(_FORWARD))
            if target is None:
                del fields[b"aggregate_of"]
            else:
                fields[b"aggregate_of"] = target
            changed = True
        uplift = self.uplifts.get(line.name.encode())
        if uplift is not None:
            fields[_UPLIFT] = repr(uplift).encode()  # as the memory store writes it
            changed = True
        elif fields.pop(_UPLIFT, None) is not None:
            changed = True
        return hash_line(line, fields) if changed else line

    def _remap(self, line: StateLine) -> StateLine | None:
        if line.type in KNOWLEDGE_FAMILIES:
            return KnowledgeRemap(self.successor, self.options.discount, self.ids).line(line)
        if line.kind == "hash":  # hyperedge: member id -> role
            fields = {self.ids[f]: v for f, v in hash_of(line).items() if f in self.ids}
            return hash_line(line, fields) if fields else None
        if line.kind == "zset":  # nexus key, decay schedule: member id -> score
            members = tuple(sorted((self.ids[m], s) for m, s in zset_of(line) if m in self.ids))
            return StateLine(line.type, line.name, line.kind, members) if members else None
        return None
