"""Errors of the facts core."""

from __future__ import annotations

from grimoire.streams.exceptions import StreamsError

__all__ = ["FactError", "InvalidFact"]


class FactError(StreamsError):
    """Root of the facts core's errors."""


class InvalidFact(FactError, ValueError):
    """A fact that cannot be stored: an empty entity, a bad interval."""
