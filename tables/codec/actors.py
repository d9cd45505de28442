"""An agent's actors as stored: a SET of `actor_name` spellings (`Keyspace.actors`),
asked about a query's candidates with one SMISMEMBER."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["actors_found"]


def actors_found(candidates: Sequence[str], replies: Iterable[object]) -> frozenset[str]:
    """The candidates SMISMEMBER found (its replies are integers 0/1, or booleans
    where the client converts them)."""
    return frozenset(name for name, found in zip(candidates, replies, strict=True) if bool(found))
