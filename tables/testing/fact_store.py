"""The reference `FactStore`: versions in a dict per agent, indexes worked out on
every read (the Redis store keeps them; the contract suite holds both to the same
answers)."""

from __future__ import annotations

from collections.abc import Sequence

from grimoire.streams.facts.queries import entity_links, fact_order
from grimoire.streams.facts.values import Fact, FactChanges
from grimoire.tables.journal.witness_due import WitnessDue

__all__ = ["InMemoryFactStore"]


class InMemoryFactStore:
    def __init__(self) -> None:
        self.facts: dict[str, dict[str, Fact]] = {}

    async def fact(self, agent_id: str, fact_id: str) -> Fact | None:
        return self.facts.get(agent_id, {}).get(fact_id)

    async def versions(self, agent_id: str, subject: str, predicate: str) -> list[Fact]:
        found = [
            f
            for f in self.facts.get(agent_id, {}).values()
            if (f.subject, f.predicate) == (subject, predicate)
        ]
        return sorted(found, key=lambda f: (f.order, f.fact_id))

    async def all_versions(self, agent_id: str) -> list[Fact]:
        return sorted(self.facts.get(agent_id, {}).values(), key=fact_order)

    async def of_entities(self, agent_id: str, entities: Sequence[str]) -> list[Fact]:
        wanted = set(entities)
        found = [f for f in self.facts.get(agent_id, {}).values() if wanted & set(f.entities)]
        return sorted(found, key=fact_order)

    async def links(self, agent_id: str, keys: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        every = entity_links(self.facts.get(agent_id, {}).values())
        return {key: every[key] for key in sorted(set(keys)) if key in every}

    async def apply(
        self, agent_id: str, changes: FactChanges, due: WitnessDue | None = None
    ) -> None:
        # No crash can leave a record due here (see grimoire.tables.journal.witness_due).
        stored = self.facts.setdefault(agent_id, {})
        for fact_id in changes.removed:
            stored.pop(fact_id, None)
        for fact in changes.upserts:
            stored[fact.fact_id] = fact
        if not stored:
            del self.facts[agent_id]

    async def put_versions(self, agent_id: str, facts: Sequence[Fact]) -> None:
        await self.apply(agent_id, FactChanges(upserts=tuple(facts)))

    def forget(self, agent_id: str) -> None:
        self.facts.pop(agent_id, None)
