"""The reference `DerivationStore`: RedisDerivationStore's semantics over an
`InMemoryMemoryStore`'s records (and an `InMemoryCuratorStore`'s bookkeeping and
playbooks).

The edges live in an `EdgeIndex` kept beside each in-memory memory store
(`edge_index`), where its writers put them as the Redis ones queue theirs: the
memory store's `commit`, the compaction store's `write_summaries` and the curator
store's `apply`. A retraction writes the records the way the Redis store writes
the hashes (values encoded as redis-py writes them). The walk's node table and
the term counts are not kept in memory (the in-memory recall source derives
both from the records on every read), so there is nothing to unlink there.

Used by unit tests and as the reference the Redis store is checked against in
`tests/integration/test_derivations_contract.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from grimoire.streams.trust.retraction import (
    SHARE_ROLES,
    DerivationRole,
    DerivedNode,
    Edge,
    RetractionOp,
    RetractionPlan,
    Step,
)
from grimoire.tables.codec.curator_state import bookkeeping_from_json, bookkeeping_json
from grimoire.tables.codec.hash_values import stored_list, stored_text
from grimoire.tables.codec.memory_hash import (
    DERIVATION_FIELDS,
    RETRACTED_DROPPED,
    changed_curated_fields,
    derived_node,
    pinned_fields,
    retracted_fields,
)
from grimoire.tables.testing.curator_marks import curator_indexes
from grimoire.tables.trust.derivations import rebuilt_summaries

if TYPE_CHECKING:
    from grimoire.tables.testing.curator_store import InMemoryCuratorStore
    from grimoire.tables.testing.memory_core import InMemoryMemoryConcern, InMemoryMemoryCore
    from grimoire.tables.testing.memory_store import InMemoryMemoryStore

__all__ = ["EdgeIndex", "InMemoryDerivationStore", "edge_index"]

logger = logging.getLogger(__name__)

_Side = dict[tuple[str, str], dict[tuple[DerivationRole, str], int]]


class EdgeIndex:
    """Both directions of every agent's edges, as the two Redis hashes per id hold them."""

    def __init__(self) -> None:
        self._from: _Side = {}  # (agent, source) -> (role, derived) -> weight
        self._of: _Side = {}  # (agent, derived) -> (role, source) -> weight

    def add(self, agent_id: str, edges: Iterable[Edge]) -> None:
        for edge in edges:
            forward = self._from.setdefault((agent_id, edge.source_id), {})
            backward = self._of.setdefault((agent_id, edge.derived_id), {})
            to_derived, to_source = (edge.role, edge.derived_id), (edge.role, edge.source_id)
            if edge.role in SHARE_ROLES:  # HINCRBY
                forward[to_derived] = forward.get(to_derived, 0) + edge.weight
                backward[to_source] = backward.get(to_source, 0) + edge.weight
            else:  # HSET
                forward[to_derived] = edge.weight
                backward[to_source] = edge.weight

    def drop(self, agent_id: str, edges: Iterable[Edge]) -> None:
        for edge in edges:
            for side, key, field in (
                (self._from, (agent_id, edge.source_id), (edge.role, edge.derived_id)),
                (self._of, (agent_id, edge.derived_id), (edge.role, edge.source_id)),
            ):
                members = side.get(key)
                if members is not None:
                    members.pop(field, None)
                    if not members:  # an emptied hash is no key in Redis
                        del side[key]

    def derived_from(self, agent_id: str, source_ids: Iterable[str]) -> list[Edge]:
        return sorted(
            Edge(derived, source, role, weight)
            for source in set(source_ids)
            for (role, derived), weight in self._from.get((agent_id, source), {}).items()
        )

    def sources_of(self, agent_id: str, derived_ids: Iterable[str]) -> list[Edge]:
        return sorted(
            Edge(derived, source, role, weight)
            for derived in set(derived_ids)
            for (role, source), weight in self._of.get((agent_id, derived), {}).items()
        )

    def edges(self, agent_id: str) -> list[Edge]:
        """Every edge of the agent (inspection)."""
        return sorted(
            Edge(derived, source, role, weight)
            for (agent, source), members in self._from.items()
            if agent == agent_id
            for (role, derived), weight in members.items()
        )


_INDEXES: WeakKeyDictionary[InMemoryMemoryCore, EdgeIndex] = WeakKeyDictionary()


def edge_index(memory: InMemoryMemoryConcern) -> EdgeIndex:
    """The edge index kept beside an in-memory memory store (created on first use),
    as the Redis keyspace keeps the derivation hashes beside the memory hashes.

    Keyed by the store's core, so the store and each concern built over that core
    (the write path's commit among them) find the same one."""
    found = _INDEXES.get(memory.core)
    if found is None:
        found = _INDEXES[memory.core] = EdgeIndex()
    return found


class InMemoryDerivationStore:
    """`DerivationStore` over an `InMemoryMemoryStore` (and the curator store that
    keeps its curated entries' bookkeeping and playbooks, when there is one)."""

    def __init__(
        self,
        memory: InMemoryMemoryStore,
        curator: InMemoryCuratorStore | None = None,
        *,
        dims: int = 384,
    ) -> None:
        self.memory = memory
        self.curator = curator
        self.index = edge_index(memory)
        self._dims = dims

    # ---- edges ------------------------------------------------------------------

    async def derived_from(self, agent_id: str, source_ids: Sequence[str]) -> list[Edge]:
        return self.index.derived_from(agent_id, source_ids)

    async def sources_of(self, agent_id: str, derived_ids: Sequence[str]) -> list[Edge]:
        return self.index.sources_of(agent_id, derived_ids)

    async def add(self, agent_id: str, edges: Sequence[Edge]) -> None:
        self.index.add(agent_id, edges)

    # ---- reads ------------------------------------------------------------------

    async def nodes(self, agent_id: str, memory_ids: Sequence[str]) -> dict[str, DerivedNode]:
        books = self.curator.bookkeeping(agent_id) if self.curator is not None else {}
        found: dict[str, DerivedNode] = {}
        for memory_id in sorted(set(memory_ids)):
            doc = self.memory.record(memory_id)
            if doc is None or stored_text(doc.get("agent_id")) != agent_id:
                continue
            row = {name: doc[name] for name in DERIVATION_FIELDS if name in doc}
            if "memory_id" not in row:
                continue
            accessed = self.memory.usage(memory_id).get("last_accessed")
            book = bookkeeping_from_json(books.get(memory_id))
            found[memory_id] = derived_node(row, accessed, book)
        return found

    async def degrees(self, agent_id: str, keys: Sequence[str]) -> dict[str, int]:
        return await self.memory.degrees(agent_id, keys) if keys else {}

    # ---- writes -----------------------------------------------------------------

    async def apply(
        self,
        agent_id: str,
        plan: RetractionPlan,
        vectors: Mapping[str, bytes],
        *,
        at_ms: int,
        playbook: str | None = None,
    ) -> None:
        """RedisDerivationStore.apply's writes, in its order; nothing awaits in
        between, so the retraction lands whole like its MULTI/EXEC."""
        rebuilt = rebuilt_summaries(plan, vectors, self._dims)
        for step in plan.steps:
            doc = self.memory.stored_hash(step.memory_id)
            if doc is None or stored_text(doc.get("agent_id")) != agent_id:
                continue
            if step.op is RetractionOp.RETRACT:
                self._retract(agent_id, step, at_ms)
            elif step.op is RetractionOp.REDUCE and step.count is not None:
                self.memory.put_fields(step.memory_id, {"count": step.count})
            elif step.op is RetractionOp.UNREINFORCE and step.reinforced_count is not None:
                self.memory.put_fields(step.memory_id, {"reinforced_count": step.reinforced_count})
            elif step.op is RetractionOp.REBUILD and step.summary is not None:
                old_keys = set(stored_list(doc.get("nexus_keys")))
                self.memory.put_fields(step.memory_id, rebuilt[step.memory_id])
                self._unlink(agent_id, step.memory_id, old_keys - set(step.summary.keys))
                self.memory.link(agent_id, step.memory_id, step.summary.ts_ms, step.summary.keys)
            elif step.op is RetractionOp.DEMOTE and step.entry is not None:
                self.memory.put_fields(step.memory_id, changed_curated_fields(step.entry, None))
                self._books(agent_id)[step.memory_id] = bookkeeping_json(step.entry)
                curator_indexes(self.memory).changed(agent_id, (step.memory_id,))
        self.index.drop(agent_id, plan.dropped)
        if playbook is not None and self.curator is not None:
            self.curator._playbooks[agent_id] = playbook

    def _books(self, agent_id: str) -> dict[str, bytes]:
        # The curator store's own entries hash (RedisCuratorStore's entries key).
        if self.curator is None:
            return {}
        return self.curator._books.setdefault(agent_id, {})

    def _unlink(self, agent_id: str, memory_id: str, keys: Iterable[str]) -> None:
        """ZREM from these nexus keys (the memory store's own index)."""
        nexus = self.memory.core.links
        for key in keys:
            members = nexus.get((agent_id, key))
            if members is not None:
                members.pop(memory_id, None)
                if not members:
                    del nexus[(agent_id, key)]

    def _retract(self, agent_id: str, step: Step, at_ms: int) -> None:
        memory_id = step.memory_id
        doc = self.memory.stored_hash(memory_id)
        assert doc is not None
        keys = stored_list(doc.get("nexus_keys"))
        edges = stored_list(doc.get("hyperedge_ids"))
        self.memory.put_fields(memory_id, retracted_fields(at_ms))
        for name in RETRACTED_DROPPED:
            doc.pop(name, None)
        self._unlink(agent_id, memory_id, keys)
        for edge in edges:
            members = self.memory.core.hyperedges.get((agent_id, edge))
            if members is not None:
                members.pop(memory_id, None)
                if not members:
                    del self.memory.core.hyperedges[(agent_id, edge)]
        if step.curated:
            self._books(agent_id).pop(memory_id, None)

    async def set_pinned(self, agent_id: str, memory_id: str, pinned: bool) -> bool:
        doc = self.memory.stored_hash(memory_id)
        if doc is None or stored_text(doc.get("agent_id")) != agent_id:
            return False
        self.memory.put_fields(memory_id, pinned_fields(pinned))
        return True
