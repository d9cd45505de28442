"""What recall reads from outside the core: one agent's records, lanes and graph.

A `RecallSource` is bound to one agent when it is made, so tenancy is decided
once, in the storage layer's query builders, and nothing in the recall flow can
ask for another agent's memories. The walk reads the graph through `GraphView`
(a graph that is also `KeyLinks` lets it cross facts' entity links); MMR and
packing accept anything `Ranked`. The values these ports carry (`RecallRecord`,
`LaneHit`, `Anchor`, `NodeInfo`) stay in `grimoire.streams.recall`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    # Type-only: each of these imports this module at import time (options
    # through the walk), so a runtime import here would be a cycle.
    from grimoire.streams.recall.options import ProvenanceFilters
    from grimoire.streams.recall.ports import Anchor, LaneHit, RecallRecord, Vector
    from grimoire.streams.recall.walk.daimoi import NodeInfo

__all__ = ["GraphView", "KeyLinks", "Ranked", "RecallSource"]


class GraphView(Protocol):
    """Batched read access to one agent's memory graph (one that is also a
    `KeyLinks` lets the walk cross facts' entity links)."""

    async def nodes(self, memory_ids: Sequence[str]) -> dict[str, NodeInfo]:
        """Known memories among `memory_ids` (missing ones are left out)."""
        ...

    async def degrees(self, keys: Sequence[str]) -> dict[str, int]:
        """How many memories carry each key (missing keys count as 0)."""
        ...

    async def newest(self, keys: Sequence[str], limit: int) -> dict[str, list[str]]:
        """Per key, up to `limit` memory ids carrying it, newest first."""
        ...

    async def neighbourhood(
        self, keys: Sequence[str], limit: int
    ) -> tuple[dict[str, int], dict[str, list[str]]]:
        """`degrees` and `newest` of the same keys in one round trip."""
        ...


class RecallSource(GraphView, Protocol):
    """One agent's memories as recall reads them. Every method takes a batch."""

    async def knn(
        self, lane: str, vector: Vector, k: int, filters: ProvenanceFilters
    ) -> list[LaneHit]: ...

    async def full_text(
        self, terms: Sequence[str], k: int, filters: ProvenanceFilters
    ) -> list[LaneHit]: ...

    async def lexical(self, terms: Sequence[str], memory_ids: Sequence[str]) -> dict[str, float]:
        """The full-text lane's score of each of `memory_ids` holding any of `terms`."""
        ...

    async def adjacent(self, anchors: Sequence[Anchor]) -> dict[str, tuple[str, ...]]:
        """Each anchor's members just before and just after it on its nexus key."""
        ...

    async def records(self, memory_ids: Sequence[str]) -> dict[str, RecallRecord]:
        """Known records among `memory_ids`, with their canonical vectors."""
        ...

    async def hyperedges(self, edge_ids: Sequence[str]) -> dict[str, Mapping[str, str]]:
        """Members (memory id → role) of each known hyperedge."""
        ...

    async def touch(self, memory_ids: Sequence[str], as_of_ms: int) -> None:
        """Usage accounting for memories included in a reply (docs/design.md §5 step 5)."""
        ...


@runtime_checkable
class KeyLinks(Protocol):
    """A graph whose entity keys facts link to other entity keys."""

    async def linked_keys(self, keys: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        """Per `entity:` key, the (linked entity key, fact id) pairs of its active
        facts, sorted; keys without any may be left out."""
        ...

    @property
    def may_link(self) -> bool:
        """False once the graph knows it holds no links at all: a walk then stops
        looking (most agents record no facts)."""
        ...


class Ranked(Protocol):
    """Anything MMR and packing order: an id and a score (larger is better)."""

    @property
    def memory_id(self) -> str: ...

    @property
    def score(self) -> float: ...
