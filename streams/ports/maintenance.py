"""What the maintenance planners read from a stored entry.

A decay pass (and the curator) computes an effective confidence from a handful
of stored fields; `DecayInputs` names them, so a decay index entry, a curated
entry or any other record carrying them can be planned against.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["DecayInputs"]


class DecayInputs(Protocol):
    """The stored fields an effective confidence is computed from (a decay entry, a
    curated entry)."""

    @property
    def confidence(self) -> float: ...
    @property
    def last_accessed_ms(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def decay_class(self) -> str | None: ...
    @property
    def provenance(self) -> str: ...
    @property
    def quality(self) -> float: ...
    @property
    def strength(self) -> float: ...
