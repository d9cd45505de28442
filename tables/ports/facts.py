"""The port of the bi-temporal fact store.

Every stored version of an agent's facts and their indexes (by relation, by
entity, the active entity links the recall walk crosses) are read and written
through `FactStore`; the fact values themselves are `grimoire.streams.facts`'.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from grimoire.streams.facts.values import Fact, FactChanges

if TYPE_CHECKING:
    # Type-only: keeps this port from loading the Redis witness-due store.
    from grimoire.tables.journal.witness_due import WitnessDue

__all__ = ["FactStore"]


class FactStore(Protocol):
    async def fact(self, agent_id: str, fact_id: str) -> Fact | None: ...

    async def versions(self, agent_id: str, subject: str, predicate: str) -> list[Fact]:
        """Every stored version of one relation, in assert order."""
        ...

    async def all_versions(self, agent_id: str) -> list[Fact]:
        """Every stored version of the agent, in `fact_order`."""
        ...

    async def of_entities(self, agent_id: str, entities: Sequence[str]) -> list[Fact]:
        """The versions any of `entities` (normalised names) is subject or object
        of, in `fact_order`."""
        ...

    async def links(self, agent_id: str, keys: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        """Per `entity:` key, its active entity links (linked key, fact id),
        sorted; keys without any are left out."""
        ...

    async def apply(
        self, agent_id: str, changes: FactChanges, due: WitnessDue | None = None
    ) -> None:
        """Write an assert's or a retraction's changes, indexes included; with `due`,
        the witness record it leaves due, in the same transaction (`WitnessDue`)."""
        ...

    async def put_versions(self, agent_id: str, facts: Sequence[Fact]) -> None:
        """Store versions as they are (an import): `apply` with upserts only."""
        ...
