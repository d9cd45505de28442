"""An agent's actors as stored: a SET of `actor_name` spellings (`Keyspace.actors`),
asked about a query's candidates with one SMISMEMBER."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from grimoire.streams.recall.named import actor_name
from grimoire.tables.codec.hash_values import stored_text

__all__ = ["actors_found", "stored_actor"]


def stored_actor(value: Any) -> str:
    """A memory hash's `actor_id` field (str, bytes or unset) as the actors set
    holds it ("" for none)."""
    return actor_name(stored_text(value))


def actors_found(candidates: Sequence[str], replies: Iterable[object]) -> frozenset[str]:
    """The candidates SMISMEMBER found (its replies are integers 0/1, or booleans
    where the client converts them)."""
    return frozenset(name for name, found in zip(candidates, replies, strict=True) if bool(found))
