"""The MemoryStore Protocol over plain dicts, with RedisMemoryStore's semantics.

`InMemoryMemoryStore` is every concern's class over one in-memory core
(`grimoire.tables.testing.memory_core`), as `RedisMemoryStore` is over its Redis
core, with the inspection and keyspace writes tests and the other in-memory
references make. Used by unit tests and as the reference the Redis store is
checked against in the store contract test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from grimoire.tables.testing.memory_core import Hash, InMemoryMemoryCore
from grimoire.tables.testing.memory_outcome_effects import InMemoryOutcomeEffects
from grimoire.tables.testing.memory_reads import InMemoryRecallReads
from grimoire.tables.testing.memory_usage import InMemoryUsageLedger
from grimoire.tables.testing.memory_writes import InMemoryMemoryWrites

__all__ = ["InMemoryMemoryStore"]


class InMemoryMemoryStore(
    InMemoryMemoryWrites, InMemoryOutcomeEffects, InMemoryRecallReads, InMemoryUsageLedger
):
    """The whole in-memory memory store: every concern over one core, which it
    builds (`store.core`)."""

    def __init__(self, *, clock_ms: Callable[[], int] | None = None, dims: int = 384) -> None:
        super().__init__(InMemoryMemoryCore(clock_ms=clock_ms, dims=dims))
        # The decay schedule the write path and outcomes keep, as RedisMemoryStore.decay.
        self.decay = self.core.decay

    async def ensure_schema(self) -> None:
        return None

    async def metrics(self) -> dict[str, float]:
        return dict(self.core.metrics)

    # ---- the hashes, and the writes the maintenance stores make to them ---------

    def hashes(self) -> list[Hash]:
        return self.core.hashes()

    def stored_hash(self, memory_id: str) -> Hash | None:
        """The stored memory hash itself (not a copy): writes to it are HSETs."""
        return self.core.stored_hash(memory_id)

    def put_fields(self, memory_id: str, fields: Mapping[str, Any]) -> None:
        self.core.put_fields(memory_id, fields)

    def put_usage(self, memory_id: str, fields: Mapping[str, Any]) -> None:
        self.core.put_usage(memory_id, fields)

    def link(self, agent_id: str, memory_id: str, ts_ms: int, keys: Sequence[str]) -> None:
        self.core.link(agent_id, memory_id, ts_ms, keys)

    def touch(self, memory_id: str, as_of_ms: int) -> None:
        """The usage-accounting script's effect on the memory's usage hash."""
        self.core.touch(memory_id, as_of_ms)

    def usage(self, memory_id: str) -> Hash:
        return self.core.usage(memory_id)

    # ---- inspection (what RedisMemoryStore exposes through .graph and .state) ---

    def record(self, memory_id: str) -> Hash | None:
        """A copy of the record's hash, as HGETALL would return it (str keys)."""
        return self.core.record(memory_id)

    async def degrees(self, agent_id: str, keys: Sequence[str]) -> dict[str, int]:
        return await self.core.degrees(agent_id, keys)

    async def newest(self, agent_id: str, key: str, limit: int) -> list[str]:
        return await self.core.newest(agent_id, key, limit)

    async def nexus(self, agent_id: str, key: str) -> dict[str, int]:
        return await self.core.nexus(agent_id, key)

    async def hyperedge(self, agent_id: str, edge_id: str) -> dict[str, str]:
        return await self.core.hyperedge(agent_id, edge_id)

    async def decisions(self, agent_id: str) -> dict[str, str]:
        return dict(self.core.decided.get(agent_id, {}))

    async def stats(self, agent_id: str) -> dict[str, float]:
        stats = self.core.agent_stats.get(agent_id, {})
        return {name: float(value) for name, value in stats.items()}
