"""The fold's ordering rules, as pure functions of the journal.

- An input re-appended to the journal (the sequencing stage crashed after writing
  it and before committing its source offset) is applied once: every source
  partition's inputs reach the journal in offset order, so an entry whose source
  offset is at or below the agent's high-water mark for that source partition was
  applied already.
  Recall usage entries are the exception: several recalls of one partition may be
  served at once, so their entries can arrive out of source order; they are
  applied as they come (a counter, never a decision).
- Consecutive ingest entries fold as one run (one embedding batch); anything else
  is applied alone, in its place, so a run never jumps over an outcome or a
  maintenance command.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from grimoire.streams.journal.entry import INGEST_KINDS, EntryKind, SourceRef

__all__ = ["Marks", "Run", "SourceMarks", "mark_key", "runs"]

E = TypeVar("E")

# (agent id, source topic, source partition) -> the highest source offset applied.
# Keyed by agent: one agent's inputs from a source partition reach its journal
# partition in offset order, whatever else that source partition feeds, and the
# fold may apply different agents' entries side by side, each agent's in order
# (a slow maintenance pass of one agent holds up no other), so each agent's
# progress is its own.
Marks = Mapping[tuple[str, str, int], int]


def mark_key(source: SourceRef, agent_id: str) -> tuple[str, str, int]:
    return (agent_id, source.topic, source.partition)


@dataclass
class SourceMarks:
    """The high-water marks one apply pass reads, checks and moves forward."""

    marks: dict[tuple[str, str, int], int]

    def is_applied(self, kind: EntryKind, source: SourceRef | None, agent_id: str) -> bool:
        if source is None or kind is EntryKind.USAGE:
            return False
        mark = self.marks.get(mark_key(source, agent_id))
        return mark is not None and source.offset <= mark

    def advance(self, kind: EntryKind, source: SourceRef | None, agent_id: str) -> None:
        if source is None or kind is EntryKind.USAGE:
            return
        key = mark_key(source, agent_id)
        if source.offset > self.marks.get(key, -1):
            self.marks[key] = source.offset

    def moved(self, before: Marks) -> dict[tuple[str, str, int], int]:
        return {k: v for k, v in self.marks.items() if before.get(k) != v}


@dataclass(frozen=True, slots=True)
class Run(Generic[E]):
    """Entries applied together: a run of ingest entries, or one other entry."""

    kind: EntryKind
    items: tuple[E, ...]

    @property
    def is_ingest(self) -> bool:
        return self.kind in INGEST_KINDS


def runs(items: Iterable[tuple[EntryKind, E]], *, max_run: int) -> list[Run[E]]:
    """Split `items` (in journal order) into runs; a run of ingest entries holds at
    most `max_run` of them (its kind is the first entry's)."""
    out: list[Run[E]] = []
    pending: list[E] = []
    pending_kind: EntryKind | None = None
    for kind, item in items:
        if kind in INGEST_KINDS:
            if pending_kind is None:
                pending_kind = kind
            pending.append(item)
            if len(pending) >= max_run:
                out.append(Run(pending_kind, tuple(pending)))
                pending, pending_kind = [], None
            continue
        if pending_kind is not None:
            out.append(Run(pending_kind, tuple(pending)))
            pending, pending_kind = [], None
        out.append(Run(kind, (item,)))
    if pending_kind is not None:
        out.append(Run(pending_kind, tuple(pending)))
    return out
