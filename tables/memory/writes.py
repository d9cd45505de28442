"""The memory store's write path (`RedisMemoryWrites`, the `MemoryWrites` port): what
was decided, the nearest stored neighbours, and a batch's commit in one transaction
per agent, with the outcomes held for memories not written yet."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grimoire.streams.model.lexicon import LexicalForm
from grimoire.streams.write.admission import NearMemory
from grimoire.streams.write.changes import WriteBatch
from grimoire.streams.write.plan import StoredNeighbour, closer, neighbour_similarity
from grimoire.streams.write.view import IngestView
from grimoire.tables.codec.actors import stored_actor
from grimoire.tables.codec.field_state import field_from_json
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.memory_hash import hash_fields
from grimoire.tables.codec.search_replies import keyed_docs
from grimoire.tables.codec.watermark import WATERMARK_MEMBER
from grimoire.tables.memory.held_outcomes import RedisHeldOutcomes
from grimoire.tables.memory.rebuild import counted_text
from grimoire.tables.ports.transaction import TransactionPart
from grimoire.tables.queries import KnnQuery
from grimoire.tables.transaction import AgentTransactions
from grimoire.tables.trust.derivations import batch_edges, queue_edges

__all__ = ["EXACT_NEIGHBOUR_POLICY", "NEIGHBOUR_TIES", "RedisMemoryWrites"]

logger = logging.getLogger(__name__)

EXACT_NEIGHBOUR_POLICY = "ADHOC_BF"
# What admission reads of each neighbour, from its hash.
_NEIGHBOUR_FIELDS = ("memory_id", "agent_id", "confidence", "kind", "text", "canonical")
# Neighbours read per lookup, so a tie at the top is broken by `closer` (the batch
# planner's own rule), not by the index.
NEIGHBOUR_TIES = 4


class RedisMemoryWrites(RedisHeldOutcomes):
    """Writes of the worker owning the agents' journal partition: each agent's
    decisions, records, folds and reinforcements, with the outcomes held for
    memories not written yet (`RedisHeldOutcomes`)."""

    async def ingest_view(self, pairs: Sequence[tuple[str, str]]) -> IngestView:
        """One pipelined round trip: per agent, one HMGET of its held outcomes and
        one of its decisions for its candidates (a command per candidate costs the
        event loop ~10 µs each), and its field state."""
        by_agent: dict[str, list[str]] = {}
        for agent_id, candidate_id in pairs:
            by_agent.setdefault(agent_id, []).append(candidate_id)
        if not by_agent:
            return IngestView()
        keys = self.core.keys
        async with self.core.redis.pipeline(transaction=False) as pipe:
            for agent_id, candidate_ids in by_agent.items():
                pipe.hmget(keys.pending_outcomes(agent_id), candidate_ids)
                pipe.hmget(keys.decided(agent_id), candidate_ids)
                pipe.get(keys.field_state(agent_id))
            replies = await pipe.execute()
        held: set[tuple[str, str]] = set()
        decided: set[tuple[str, str]] = set()
        fields = {}
        for at, (agent_id, candidate_ids) in enumerate(by_agent.items()):
            waiting, recorded, field = replies[3 * at : 3 * at + 3]
            for candidate_id, hold, decision in zip(candidate_ids, waiting, recorded, strict=True):
                if hold is not None:
                    held.add((agent_id, candidate_id))
                if decision is not None:
                    decided.add((agent_id, candidate_id))
            fields[agent_id] = field_from_json(agent_id, field)
        return IngestView(frozenset(held), frozenset(decided), fields)

    async def nearest(self, queries: Sequence[tuple[str, bytes]]) -> list[StoredNeighbour | None]:
        """Nearest live memory of each (agent, canonical vector), in one pipelined round trip.

        A hit owned by anyone but the exact agent counts as no neighbour: admission
        folds and reinforces into what this returns, so the tenant filter is not
        trusted alone (an index built before the case-sensitive `agent_id` TAG
        matches `TENV1` for `tenV1`).
        """
        if not queries:
            return []
        targets = {a: await self.core.routing.target(a) for a in sorted({a for a, _ in queries})}
        async with self.core.redis.pipeline(transaction=False) as pipe:
            for agent_id, vector in queries:
                knn = KnnQuery(
                    agent_id,
                    "canonical",
                    NEIGHBOUR_TIES,
                    # Only the distance: the fields are read from the hashes below (a
                    # cluster master loads no field of another slot's document).
                    (),
                    # Exact, never the graph walk recall uses: admission folds and
                    # merges into this neighbour, and an approximate one would
                    # depend on where the apply loop's batches fell (a neighbour
                    # earlier in the same batch is compared exactly), so a replay
                    # could decide otherwise. Costs grow with the agent's memories.
                    hybrid_policy=EXACT_NEIGHBOUR_POLICY,
                )
                target = targets[agent_id]
                pipe.execute_command(
                    "FT.SEARCH", target.index, *knn.arguments(vector), **target.options
                )
            replies = await pipe.execute()
        hits = [keyed_docs(reply) for reply in replies]
        keys = sorted({key for found in hits for key, _ in found})
        async with self.core.redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hmget(key, list(_NEIGHBOUR_FIELDS))
            rows = dict(zip(keys, await pipe.execute(), strict=True))
        found: list[StoredNeighbour | None] = []
        for (agent_id, vector), matches in zip(queries, hits, strict=True):
            query = np.frombuffer(vector, dtype=np.float32)
            best: StoredNeighbour | None = None
            for key, computed in matches:
                doc = dict(zip(_NEIGHBOUR_FIELDS, rows[key], strict=True))
                if doc["memory_id"] is None:
                    continue  # gone since the index listed it
                owner = text_of(doc["agent_id"] or b"")
                if owner != agent_id:
                    logger.warning(
                        "nearest for %r returned a memory of %r: ignored", agent_id, owner
                    )
                    continue
                # As an in-batch neighbour is read (see `neighbour_similarity`): the
                # index's own distance differs in the last bits.
                stored = doc["canonical"]
                if isinstance(stored, bytes) and len(stored) == len(vector):
                    similarity = neighbour_similarity(
                        query, np.frombuffer(stored, dtype=np.float32)
                    )
                else:
                    similarity = 1.0 - float(text_of(computed["distance"]))
                memory_id = text_of(doc["memory_id"])
                if closer(similarity, memory_id, best.neighbour if best else None):
                    best = StoredNeighbour(
                        NearMemory(
                            memory_id=memory_id,
                            similarity=similarity,
                            confidence=float(text_of(doc["confidence"] or b"0.5")),
                            text=text_of(doc["text"] or b""),
                        ),
                        text_of(doc["kind"] or b""),
                    )
            found.append(best)
        return found

    async def commit(self, batch: WriteBatch, also: Sequence[TransactionPart] = ()) -> None:
        now_ms = self.core.clock_ms() if self.core.clock_ms else 0
        # Each agent's decisions, and with them (`also`) their witness records and
        # outbox events, are stored together or not at all: one MULTI/EXEC for the
        # batch on one Redis, one per agent on a cluster (`AgentTransactions`).
        tx = await AgentTransactions.open(self.core.redis)
        # Who the batch's memories name as their actor, for the recall that asks
        # about them by name (`grimoire.streams.recall.named.without_actors`).
        actors: dict[str, set[str]] = {}
        for record in batch.records:
            cand = record.candidate
            pipe = tx.agent(cand.agent_id)
            fields = hash_fields(record, now_ms)
            _add_actor(actors, cand.agent_id, fields)
            key = self.core.key(cand.agent_id, record.id)
            self.core.scripts.count_new_terms(
                pipe,
                key,
                self.core.graph.keys.terms(cand.agent_id),
                # The form the hash holds: stemmed once per memory, not again here.
                counted_text(LexicalForm.parse(fields["lexical"])),
            )
            pipe.hset(key, mapping=fields)
            self.core.decay.schedule_new(pipe, fields)
            self.core.graph.link(pipe, cand.agent_id, cand.id, cand.ts_ms, cand.keys)
            if cand.hyperedge is not None:
                self.core.graph.bind(
                    pipe, cand.agent_id, cand.hyperedge.edge_id, {cand.id: cand.hyperedge.role}
                )
        for fold in batch.folds:
            pipe = tx.agent(fold.agent_id)
            seed = hash_fields(fold.seed, now_ms)
            _add_actor(actors, fold.agent_id, seed)
            self.core.scripts.fold_aggregate(
                pipe, self.core.key(fold.agent_id, fold.aggregate_id), seed, fold.ts_ms
            )
            self.core.decay.schedule_new(pipe, seed, keep_existing=True)
            seed_cand = fold.seed.candidate
            self.core.graph.link(
                pipe, fold.agent_id, fold.aggregate_id, fold.ts_ms, seed_cand.keys, latest=True
            )
            if fold.hyperedge is not None:
                edge = fold.hyperedge
                self.core.graph.join(
                    pipe, fold.agent_id, edge.edge_id, fold.aggregate_id, edge.role
                )
        for agent_id in sorted(actors):
            tx.agent(agent_id).sadd(self.core.keys.actors(agent_id), *sorted(actors[agent_id]))
        touched: dict[str, set[str]] = {}
        for record in batch.records:
            touched.setdefault(record.candidate.agent_id, set()).add(record.id)
        for fold in batch.folds:
            touched.setdefault(fold.agent_id, set()).add(fold.aggregate_id)
        for agent_id in sorted(touched):
            self.core.graph.sync_nodes(tx.agent(agent_id), agent_id, sorted(touched[agent_id]))
        for reinforcement in batch.reinforcements:
            self.core.scripts.reinforce(
                tx.agent(reinforcement.agent_id),
                self.core.key(reinforcement.agent_id, reinforcement.target_id),
                reinforcement.ts_ms,
            )
            if reinforcement.hyperedge is not None:
                edge = reinforcement.hyperedge
                self.core.graph.join(
                    tx.agent(reinforcement.agent_id),
                    reinforcement.agent_id,
                    edge.edge_id,
                    reinforcement.target_id,
                    edge.role,
                )
        decided: dict[str, dict[str, str]] = {}
        for decision in batch.decisions:  # a later decision of a candidate wins, as in HSET
            decided.setdefault(decision.agent_id, {})[decision.candidate_id] = decision.action
        for agent_id, actions in decided.items():
            self.core.state.record_decisions(tx.agent(agent_id), agent_id, actions)
        for vector in batch.state_vectors:
            self.core.state.save_state_vector(tx.agent(vector.agent_id), vector)
        for state in batch.fields:
            pipe = tx.agent(state.agent_id)
            self.core.state.save_field(pipe, state)
            # ZADD GT keeps the maximum, so a redelivered old batch never moves it back.
            pipe.zadd(
                self.core.keys.watermark(state.agent_id),
                {WATERMARK_MEMBER: state.watermark_ms},
                gt=True,
            )
        if batch.fields:
            # The list of known agents, derived from their watermarks (shared: on a
            # cluster written just before the agents' transactions).
            marks = {state.agent_id: state.watermark_ms for state in batch.fields}
            tx.shared.zadd(self.core.keys.agents, marks, gt=True)
        for delta in batch.stats:
            self.core.state.count(tx.agent(delta.agent_id), delta.agent_id, delta.counters)
        for name, amount in batch.metrics:
            tx.shared.hincrbyfloat(self.core.keys.metrics, name, amount)
        # What each record, fold and reinforcement derives from (a retraction
        # follows these edges), in the same round trip as the writes.
        for agent_id, edge in batch_edges(batch):
            queue_edges(tx.agent(agent_id), self.core.keys, agent_id, (edge,))
        for part in also:
            part.queue(tx)
        await tx.execute()


def _add_actor(actors: dict[str, set[str]], agent_id: str, fields: Mapping[str, Any]) -> None:
    name = stored_actor(fields.get("actor_id"))
    if name:
        actors.setdefault(agent_id, set()).add(name)
