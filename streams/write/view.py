"""What the write path reads of its agents before deciding a batch, as one value.

The apply loop reads it in one round trip for the whole batch (the candidates'
held outcomes and recorded decisions, each agent's field state) and hands it to the
decisions, instead of asking the store three times."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from grimoire.streams.model.field_state import FieldState

__all__ = ["IngestView"]


@dataclass(frozen=True, slots=True)
class IngestView:
    """Of the (agent, candidate id) pairs it was read for: those an outcome is held
    for (`held`), those already decided (`decided`); and each of their agents'
    field state (`fields`, the empty state for an agent that has none yet)."""

    held: frozenset[tuple[str, str]] = frozenset()
    decided: frozenset[tuple[str, str]] = frozenset()
    fields: Mapping[str, FieldState] = field(default_factory=dict)
