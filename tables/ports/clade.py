"""The ports of clades (docs/clades.md): who belongs to which clade, and what each
agent published to its clades.

Membership (`CladeRegistry`) is the deployment's, managed by an admin key, never
a fold of any journal: it decides where a published entry goes when it is
published. What an agent published and to whom (`PublishedStore`) is the agent's
own state, written by the fold of its `publish` and `unpublish` commands, so a
withdrawal reaches exactly the agents that received the copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["CladeCopies", "CladeRegistry", "Published", "PublishedStore"]


@dataclass(frozen=True, slots=True)
class Published:
    """One published memory: per clade it went to, the agents that got a copy
    through it (a route), as the journaled command that published it said."""

    memory_id: str
    routes: tuple[tuple[str, tuple[str, ...]], ...]  # (clade, recipients), sorted

    @property
    def clades(self) -> tuple[str, ...]:
        return tuple(clade for clade, _ in self.routes)

    @property
    def recipients(self) -> tuple[str, ...]:
        return tuple(sorted({agent for _, agents in self.routes for agent in agents}))


class CladeRegistry(Protocol):
    async def join(self, clade: str, agent_id: str) -> bool:
        """Add the agent to the clade; False when it was a member already."""
        ...

    async def leave(self, clade: str, agent_id: str) -> bool:
        """Remove the agent from the clade; False when it was not a member."""
        ...

    async def members(self, clade: str) -> list[str]:
        """The clade's members, sorted."""
        ...

    async def clades_of(self, agent_id: str) -> list[str]:
        """The clades the agent belongs to, sorted."""
        ...

    async def names(self) -> list[str]:
        """Every clade with at least one member, sorted."""
        ...


class PublishedStore(Protocol):
    async def published(
        self, agent_id: str, memory_ids: Sequence[str] = ()
    ) -> dict[str, Published]:
        """What the agent published (those of `memory_ids`; all when empty)."""
        ...

    async def mark(self, agent_id: str, published: Published) -> None: ...

    async def unmark(self, agent_id: str, memory_ids: Sequence[str]) -> None: ...


class CladeCopies(Protocol):
    """The writes a clade's messages make to memories the fold of the recipient's
    journal holds: a copy's confidence and counts as its origin shared them, and an
    origin entry's clade evidence. Both check the memory is the agent's."""

    async def set_counts(
        self, agent_id: str, memory_id: str, *, confidence: float, validated: int, contradicted: int
    ) -> bool: ...

    async def discard(self, agent_id: str, memory_id: str) -> bool:
        """Remove a withdrawn copy's remains before it is shared again."""
        ...

    async def credit(self, agent_id: str, memory_id: str, *, success: bool) -> bool: ...
