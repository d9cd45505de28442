"""The in-memory clade registry and published store: the reference the Redis ones
are held to (the contract suite runs both)."""

from __future__ import annotations

from collections.abc import Sequence

from grimoire.tables.clade.store import valid_clade_name
from grimoire.tables.ports.clade import Published

__all__ = ["InMemoryCladeRegistry", "InMemoryPublishedStore"]


class InMemoryCladeRegistry:
    def __init__(self) -> None:
        self._members: dict[str, set[str]] = {}

    async def join(self, clade: str, agent_id: str) -> bool:
        if not valid_clade_name(clade):
            raise ValueError(f"not a clade name: {clade!r}")
        members = self._members.setdefault(clade, set())
        added = agent_id not in members
        members.add(agent_id)
        return added

    async def leave(self, clade: str, agent_id: str) -> bool:
        members = self._members.get(clade, set())
        removed = agent_id in members
        members.discard(agent_id)
        if not members:
            self._members.pop(clade, None)
        return removed

    async def members(self, clade: str) -> list[str]:
        return sorted(self._members.get(clade, ()))

    async def clades_of(self, agent_id: str) -> list[str]:
        return sorted(c for c, members in self._members.items() if agent_id in members)

    async def names(self) -> list[str]:
        return sorted(self._members)


class InMemoryPublishedStore:
    def __init__(self) -> None:
        self._published: dict[str, dict[str, Published]] = {}

    async def published(
        self, agent_id: str, memory_ids: Sequence[str] = ()
    ) -> dict[str, Published]:
        held = self._published.get(agent_id, {})
        wanted = sorted(set(memory_ids)) if memory_ids else sorted(held)
        return {m: held[m] for m in wanted if m in held}

    async def mark(self, agent_id: str, published: Published) -> None:
        self._published.setdefault(agent_id, {})[published.memory_id] = published

    async def unmark(self, agent_id: str, memory_ids: Sequence[str]) -> None:
        held = self._published.get(agent_id, {})
        for memory_id in memory_ids:
            held.pop(memory_id, None)
