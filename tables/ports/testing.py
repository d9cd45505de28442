"""The ports between the in-memory reference stores of `grimoire.tables.testing`.

The in-memory stores stand in for Redis in the contract suites; where one reads
another's state (the decay store reads the memory store's hashes, as the Redis
decay index reads the memory hashes), it does so through a Protocol here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

__all__ = ["Hash", "MemoryHashes"]

Hash = Mapping[str, str | bytes]


class MemoryHashes(Protocol):
    """The memory and usage hashes as HGETALL would return them; satisfied by
    `grimoire.tables.testing.memory_store.InMemoryMemoryStore`."""

    def record(self, memory_id: str) -> Hash | None: ...

    def usage(self, memory_id: str) -> Hash: ...

    def hashes(self) -> Iterable[Hash]: ...
