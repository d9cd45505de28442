"""The derivation index (what each stored memory derives from) and the writes a
retraction makes along it: the `DerivationStore` protocol and its Redis
implementation; `grimoire.tables.testing.derivations` is the reference one.

Keys (all under the deployment prefix, per agent):
  {p}:deriv:{agent}:from:{source}   HASH  `role|derived id` -> weight
  {p}:deriv:{agent}:of:{derived}    HASH  `role|source id` -> weight

Each edge is kept in both directions: a retraction reads forward (what derives
from the retracted source) and backward (what else each derived memory stands
on). Roles and weights are `grimoire.streams.trust.retraction.Role`: a share role
(`fold`, `reinforce`) adds its weight on every write, as the aggregate's `count`
and the `reinforced_count` it mirrors do; every other role is set, so rewriting
it changes nothing. Source ids are input event ids or memory ids; the role comes
first in a field and never holds '|', so an id may.

The writers queue their edges in the same pipeline as the writes they describe
(`queue_edges`): the write path (`RedisMemoryWrites.commit`), compaction
(`RedisCompactionStore.write_summaries`) and the curator (`RedisCuratorStore.apply`).
The edges of one batch, plan or cycle are built by `batch_edges`, `summary_edges`
and `curated_edges`, the same for both implementations.

A retraction is applied in one MULTI/EXEC (`apply`): a crash leaves all of it or
none, and the edges it drops go in the same transaction, so re-applying the same
retraction finds nothing left to do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from redis.asyncio import Redis

from grimoire.streams.learn.curator.values import CuratedEntry, CuratorPlan
from grimoire.streams.maintenance.compaction import ClusterPlan
from grimoire.streams.model.lexicon import LexicalForm
from grimoire.streams.trust.retraction import (
    SHARE_ROLES,
    DerivationRole,
    DerivedNode,
    Edge,
    RetractionOp,
    RetractionPlan,
    Step,
)
from grimoire.streams.write.changes import Reinforcement, WriteBatch
from grimoire.tables.codec.curator_state import bookkeeping_from_json, bookkeeping_json
from grimoire.tables.codec.hash_values import stored_list, stored_text, text_of
from grimoire.tables.codec.memory_hash import (
    CURATOR_EVENT_TYPE,
    DERIVATION_FIELDS,
    RETRACTED_DROPPED,
    changed_curated_fields,
    derived_node,
    pinned_fields,
    rebuilt_summary_fields,
    retracted_fields,
)
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.curator_marks import queue_changed
from grimoire.tables.memory.graph import RedisGraph
from grimoire.tables.memory.rebuild import LENGTH_FIELD, MEMORIES_FIELD, counted_text
from grimoire.tables.transaction import agent_transaction

__all__ = [
    "MAINTENANCE_EVENT_TYPES",
    "RedisDerivationStore",
    "batch_edges",
    "curated_edges",
    "edge_field",
    "missing_summary_vectors",
    "parse_edge_field",
    "queue_drop",
    "queue_edges",
    "rebuilt_summaries",
    "summary_edges",
]

logger = logging.getLogger(__name__)

# Records that maintenance makes (summaries, curated entries) derive from memories,
# and their writers record those edges: no input event stands behind them.
MAINTENANCE_EVENT_TYPES: Final = frozenset({"compaction", CURATOR_EVENT_TYPE})
# What a retraction reads of a retracted or rebuilt memory before it writes.
_UNLINK_FIELDS: Final = ("agent_id", "kind", "lexical", "nexus_keys", "hyperedge_ids")


# ---- the edges each writer records ----------------------------------------------


def _reinforcing_source(reinforcement: Reinforcement) -> str:
    """The input event behind a reinforcement, so a retraction naming the event
    finds it; one built without its event (by hand) is recorded under the
    reinforcing candidate's id, the only name it has."""
    return reinforcement.source_event_id or reinforcement.member_id


def batch_edges(batch: WriteBatch) -> list[tuple[str, Edge]]:
    """(agent, edge) for everything an ingest batch derives: each record from its
    source event, each aggregate from every event folded into it (and from the
    memory its group started from), each reinforced memory from the event that
    reinforced it."""
    edges: list[tuple[str, Edge]] = []
    for record in batch.records:
        cand = record.candidate
        if cand.provenance.event_type in MAINTENANCE_EVENT_TYPES:
            continue
        edges.append(
            (cand.agent_id, Edge(cand.id, cand.provenance.source_event_id, DerivationRole.RECORD))
        )
    for fold in batch.folds:
        event = fold.seed.candidate.provenance.source_event_id
        edges.append((fold.agent_id, Edge(fold.aggregate_id, event, DerivationRole.FOLD)))
        if fold.target_id != fold.aggregate_id:
            # The fold script counts the group's original once, when it creates
            # the aggregate; a set edge counts it once however often it is written.
            edges.append(
                (fold.agent_id, Edge(fold.aggregate_id, fold.target_id, DerivationRole.ORIGIN))
            )
    for reinforcement in batch.reinforcements:
        source = _reinforcing_source(reinforcement)
        edges.append(
            (
                reinforcement.agent_id,
                Edge(reinforcement.target_id, source, DerivationRole.REINFORCE),
            )
        )
    return edges


def summary_edges(clusters: Iterable[ClusterPlan]) -> list[Edge]:
    """Each summary from each memory of its cluster."""
    return [
        Edge(cluster.summary_id, source_id, DerivationRole.COMPACTED)
        for cluster in clusters
        for source_id in cluster.source_ids
    ]


def curated_edges(plan: CuratorPlan, before: Iterable[CuratedEntry] = ()) -> list[Edge]:
    """Each entry a cycle wrote from each piece of its evidence (`source_ids`) it
    did not have `before` the cycle: those edges were written when it got them
    (a retraction drops an edge and its id together), and writing them again with
    the same weight changes nothing but costs two writes each."""
    had = {entry.memory_id: set(entry.source_ids) for entry in before}
    return [
        Edge(change.entry.memory_id, source_id, DerivationRole.EVIDENCE)
        for change in plan.changes
        for source_id in change.entry.source_ids
        if change.new or source_id not in had.get(change.entry.memory_id, ())
    ]


def edge_field(role: DerivationRole, memory_or_source_id: str) -> str:
    return f"{role.value}|{memory_or_source_id}"


def parse_edge_field(raw: Any) -> tuple[DerivationRole, str] | None:
    """A field written by `edge_field`; None for one this version does not know."""
    role, sep, other = text_of(raw).partition("|")
    if not sep:
        return None
    try:
        return DerivationRole(role), other
    except ValueError:
        return None


def queue_edges(pipe: Any, keys: Keyspace, agent_id: str, edges: Iterable[Edge]) -> None:
    """Queue the writes of these edges of one agent on a pipeline."""
    for edge in edges:
        forward = keys.derived_from(agent_id, edge.source_id)
        backward = keys.derivation_sources(agent_id, edge.derived_id)
        to_derived = edge_field(edge.role, edge.derived_id)
        to_source = edge_field(edge.role, edge.source_id)
        if edge.role in SHARE_ROLES:
            pipe.hincrby(forward, to_derived, edge.weight)
            pipe.hincrby(backward, to_source, edge.weight)
        else:
            pipe.hset(forward, to_derived, edge.weight)
            pipe.hset(backward, to_source, edge.weight)


def queue_drop(pipe: Any, keys: Keyspace, agent_id: str, edges: Iterable[Edge]) -> None:
    """Queue the removal of these edges (whatever their weight) on a pipeline."""
    for edge in edges:
        pipe.hdel(
            keys.derived_from(agent_id, edge.source_id), edge_field(edge.role, edge.derived_id)
        )
        pipe.hdel(
            keys.derivation_sources(agent_id, edge.derived_id),
            edge_field(edge.role, edge.source_id),
        )


# ---- the store --------------------------------------------------------------------


def missing_summary_vectors(plan: RetractionPlan, vectors: Mapping[str, bytes]) -> list[str]:
    return [
        step.memory_id for step in plan.of(RetractionOp.REBUILD) if step.memory_id not in vectors
    ]


def rebuilt_summaries(
    plan: RetractionPlan, vectors: Mapping[str, bytes], dims: int
) -> dict[str, dict[str, Any]]:
    """The new hash fields of each summary the plan rebuilds, by memory id; a
    ValueError when a rebuilt summary has no vector. Every store builds them before
    it writes anything, so a missing or bad vector leaves the retraction unapplied."""
    if missing := missing_summary_vectors(plan, vectors):
        raise ValueError(f"retraction of {plan.source_id} lacks vectors for {missing}")
    return {
        step.memory_id: rebuilt_summary_fields(step.summary, vectors[step.memory_id], dims)
        for step in plan.of(RetractionOp.REBUILD)
        if step.summary is not None
    }


class RedisDerivationStore:
    """`DerivationStore` over the memory hashes, the nexus index and the keys above."""

    def __init__(self, redis: Redis, prefix: str, *, dims: int = 384) -> None:
        self._redis = redis
        self._dims = dims
        self.keys = Keyspace(prefix)
        self._graph = RedisGraph(redis, prefix)

    # ---- edges ------------------------------------------------------------------

    async def _edges(
        self, ids: Sequence[str], key: Callable[[str], str], *, forward: bool
    ) -> list[Edge]:
        wanted = sorted(set(ids))
        if not wanted:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for one in wanted:
                pipe.hgetall(key(one))
            rows = await pipe.execute()
        edges = set()
        for one, row in zip(wanted, rows, strict=True):
            for raw, weight in row.items():
                parsed = parse_edge_field(raw)
                if parsed is None:
                    continue
                role, other = parsed
                derived, source = (other, one) if forward else (one, other)
                edges.add(Edge(derived, source, role, int(text_of(weight))))
        return sorted(edges)

    async def derived_from(self, agent_id: str, source_ids: Sequence[str]) -> list[Edge]:
        return await self._edges(
            source_ids, lambda i: self.keys.derived_from(agent_id, i), forward=True
        )

    async def sources_of(self, agent_id: str, derived_ids: Sequence[str]) -> list[Edge]:
        return await self._edges(
            derived_ids, lambda i: self.keys.derivation_sources(agent_id, i), forward=False
        )

    async def add(self, agent_id: str, edges: Sequence[Edge]) -> None:
        if not edges:
            return
        async with agent_transaction(self._redis, agent_id) as pipe:
            queue_edges(pipe, self.keys, agent_id, edges)
            await pipe.execute()

    # ---- reads ------------------------------------------------------------------

    async def nodes(self, agent_id: str, memory_ids: Sequence[str]) -> dict[str, DerivedNode]:
        wanted = sorted(set(memory_ids))
        if not wanted:
            return {}
        async with self._redis.pipeline(transaction=False) as pipe:
            for memory_id in wanted:
                pipe.hmget(self.keys.memory(agent_id, memory_id), list(DERIVATION_FIELDS))
                pipe.hget(self.keys.usage(agent_id, memory_id), "last_accessed")
            pipe.hmget(self.keys.curator_entries(agent_id), wanted)
            replies = await pipe.execute()
        books = replies[-1]
        found: dict[str, DerivedNode] = {}
        for index, memory_id in enumerate(wanted):
            row, accessed = replies[2 * index], replies[2 * index + 1]
            doc = dict(zip(DERIVATION_FIELDS, row, strict=True))
            if doc["memory_id"] is None or stored_text(doc["agent_id"]) != agent_id:
                continue
            book = bookkeeping_from_json(books[index])
            found[memory_id] = derived_node(doc, accessed, book)
        return found

    async def degrees(self, agent_id: str, keys: Sequence[str]) -> dict[str, int]:
        return await self._graph.degrees(agent_id, keys) if keys else {}

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
        rebuilt = rebuilt_summaries(plan, vectors, self._dims)
        stored = await self._unlink_fields(
            agent_id, sorted({step.memory_id for step in plan.steps})
        )
        keys = self.keys
        async with agent_transaction(self._redis, agent_id) as pipe:
            for step in plan.steps:
                before = stored.get(step.memory_id)
                if before is None or stored_text(before["agent_id"]) != agent_id:
                    continue  # gone, or another agent's: never written here
                memory = keys.memory(agent_id, step.memory_id)
                if step.op is RetractionOp.RETRACT:
                    self._queue_retract(pipe, agent_id, step, before, at_ms)
                elif step.op is RetractionOp.REDUCE and step.count is not None:
                    pipe.hset(memory, "count", step.count)
                elif step.op is RetractionOp.UNREINFORCE and step.reinforced_count is not None:
                    pipe.hset(memory, "reinforced_count", step.reinforced_count)
                elif step.op is RetractionOp.REBUILD and step.summary is not None:
                    old_keys = set(stored_list(before["nexus_keys"]))
                    pipe.hset(memory, mapping=rebuilt[step.memory_id])
                    for key in sorted(old_keys - set(step.summary.keys)):
                        pipe.zrem(keys.nexus(agent_id, key), step.memory_id)
                    for key in step.summary.keys:
                        pipe.zadd(keys.nexus(agent_id, key), {step.memory_id: step.summary.ts_ms})
                elif step.op is RetractionOp.DEMOTE and step.entry is not None:
                    pipe.hset(memory, mapping=changed_curated_fields(step.entry, None))
                    pipe.hset(
                        keys.curator_entries(agent_id),
                        step.memory_id,
                        bookkeeping_json(step.entry),
                    )
                    # Lower confidence: its demotion or low count may come sooner.
                    queue_changed(pipe, keys, agent_id, (step.memory_id,))
            queue_drop(pipe, keys, agent_id, plan.dropped)
            self._graph.sync_nodes(pipe, agent_id, sorted(rebuilt))
            if playbook is not None:
                pipe.set(keys.playbook(agent_id), playbook)
            await pipe.execute()

    async def _unlink_fields(
        self, agent_id: str, memory_ids: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """What a retraction must know of a memory before it writes (present ones only)."""
        if not memory_ids:
            return {}
        async with self._redis.pipeline(transaction=False) as pipe:
            for memory_id in memory_ids:
                pipe.hmget(self.keys.memory(agent_id, memory_id), list(_UNLINK_FIELDS))
            rows = await pipe.execute()
        found = {}
        for memory_id, row in zip(memory_ids, rows, strict=True):
            doc = dict(zip(_UNLINK_FIELDS, row, strict=True))
            if doc["agent_id"] is not None:
                found[memory_id] = doc
        return found

    def _queue_retract(
        self, pipe: Any, agent_id: str, step: Step, before: Mapping[str, Any], at_ms: int
    ) -> None:
        keys, memory_id = self.keys, step.memory_id
        pipe.hset(keys.memory(agent_id, memory_id), mapping=retracted_fields(at_ms))
        pipe.hdel(keys.memory(agent_id, memory_id), *RETRACTED_DROPPED)
        for key in stored_list(before["nexus_keys"]):
            pipe.zrem(keys.nexus(agent_id, key), memory_id)
        for edge in stored_list(before["hyperedge_ids"]):
            pipe.hdel(keys.hyperedge(agent_id, edge), memory_id)
        pipe.hdel(keys.nodes(agent_id), memory_id)
        if step.uncount_terms:
            terms = keys.terms(agent_id)
            counted = counted_text(LexicalForm.parse(stored_text(before["lexical"])))
            for term in counted.terms:
                pipe.hincrby(terms, term, -1)
            pipe.hincrby(terms, MEMORIES_FIELD, -1)
            pipe.hincrby(terms, LENGTH_FIELD, -counted.length)
        if step.curated:
            pipe.hdel(keys.curator_entries(agent_id), memory_id)

    async def set_pinned(self, agent_id: str, memory_id: str, pinned: bool) -> bool:
        key = self.keys.memory(agent_id, memory_id)
        owner = await self._redis.hget(key, "agent_id")
        if owner is None or text_of(owner) != agent_id:
            return False
        await self._redis.hset(key, mapping=pinned_fields(pinned))
        return True
