"""Memory storage: one Protocol, and the Redis (RediSearch via redisvl) implementation."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from redis.asyncio import Redis
from redis.commands.search.query import Query
from redisvl.exceptions import RedisSearchError
from redisvl.index import AsyncSearchIndex
from redisvl.query import VectorQuery
from redisvl.schema import IndexSchema
from redisvl.schema.fields import TagField

from grimoire.streams.learn.outcomes import Outcome
from grimoire.streams.learn.runs import MemoryCredit
from grimoire.streams.model.field_state import FieldState
from grimoire.streams.model.lexicon import LexicalForm
from grimoire.streams.ports.recall import RecallSource
from grimoire.streams.recall.options import NO_FILTERS
from grimoire.streams.write.admission import NearMemory
from grimoire.streams.write.changes import StateVector, WriteBatch
from grimoire.streams.write.plan import StoredNeighbour, closer, neighbour_similarity
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.held_outcome import held_for, outcomes_from_json, outcomes_to_json
from grimoire.tables.codec.memory_hash import (
    RETURN_FIELDS,
    StoredMemory,
    hash_fields,
    stored_memory,
)
from grimoire.tables.codec.search_replies import keyed_docs, total_results
from grimoire.tables.codec.walk_node import DEFAULT_CAPACITY as DEFAULT_DECODED_NODES
from grimoire.tables.codec.walk_node import DecodedNodes
from grimoire.tables.codec.watermark import WATERMARK_MEMBER, WINDOW_MEMBER
from grimoire.tables.exceptions import SchemaMismatch
from grimoire.tables.journal.witness_due import changed_count_template
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.curator_marks import queue_changed
from grimoire.tables.maintenance.decay_index import DecayIndex
from grimoire.tables.memory.agent_state import AgentStateStore, present_fields
from grimoire.tables.memory.graph import RedisGraph
from grimoire.tables.memory.rebuild import MEMORIES_FIELD, counted_text
from grimoire.tables.memory.recall_source import DEFAULT_KNN_POLICY, KnnPolicy, RedisRecallSource
from grimoire.tables.memory.scripts import RedisScripts
from grimoire.tables.ports.transaction import TransactionPart
from grimoire.tables.queries import KnnQuery, live_filter, tenant_filter
from grimoire.tables.routing import SearchRouting
from grimoire.tables.schema.memory_index import memory_schema
from grimoire.tables.transaction import AgentTransactions, agent_transaction
from grimoire.tables.trust.derivations import batch_edges, queue_edges

logger = logging.getLogger(__name__)

# How many of an agent's most recent usage entries are remembered as applied.
USAGE_SEQ_WINDOW = 10_000


def _request(request: str) -> str:
    """A recall request's member of the applied-usage set (seqs are bare numbers)."""
    return f"r:{request}"


EXACT_NEIGHBOUR_POLICY = "ADHOC_BF"
# What admission reads of each neighbour, from its hash.
_NEIGHBOUR_FIELDS = ("memory_id", "agent_id", "confidence", "kind", "text", "canonical")
# Neighbours read per lookup, so a tie at the top is broken by `closer` (the batch
# planner's own rule), not by the index.
NEIGHBOUR_TIES = 4


@dataclass(frozen=True, slots=True)
class ScoredHit:
    memory: StoredMemory
    score: float  # larger is better in every lane


def schema_differences(schema: IndexSchema, attributes: Sequence[Any]) -> list[str]:
    """How a live index (FT.INFO `attributes`) differs from `schema`: fields missing or
    extra, another type, or a TAG's separator or case sensitivity (what decides
    whether `TENV1` matches `tenV1`)."""
    live: dict[str, list[str]] = {}
    for attribute in attributes:
        tokens = [text_of(token) for token in attribute]
        if "attribute" in tokens:
            live[tokens[tokens.index("attribute") + 1]] = tokens
    found: list[str] = []
    for name in sorted(set(live) - set(schema.fields)):
        found.append(f"{name} is not in the schema")
    for name, wanted in schema.fields.items():
        if name not in live:
            found.append(f"{name} is missing")
            continue
        tokens = live[name]
        kind = tokens[tokens.index("type") + 1].lower() if "type" in tokens else ""
        expected = str(getattr(wanted.type, "value", wanted.type))  # vector's is a plain str
        if kind != expected:
            found.append(f"{name} is {kind or 'untyped'}, not {expected}")
            continue
        if isinstance(wanted, TagField):
            separator = tokens[tokens.index("SEPARATOR") + 1] if "SEPARATOR" in tokens else ","
            if separator != wanted.attrs.separator:
                found.append(f"{name} splits on {separator!r}, not {wanted.attrs.separator!r}")
            if ("CASESENSITIVE" in tokens) != wanted.attrs.case_sensitive:
                sensitive = "case-sensitive" if wanted.attrs.case_sensitive else "case-folding"
                found.append(f"{name} is not {sensitive}")
    return found


class RedisMemoryStore:
    """Memory records as Redis hashes indexed by RediSearch.

    The only writer of an agent's records is the worker owning that agent's
    partition, so check-then-write across two round trips is race-free.
    """

    def __init__(
        self,
        redis: Redis,
        prefix: str,
        dims: int,
        *,
        clock_ms: Any = None,
        knn_policy: KnnPolicy = DEFAULT_KNN_POLICY,
        decoded_nodes: int = DEFAULT_DECODED_NODES,
    ) -> None:
        self._redis = redis
        self.knn_policy = knn_policy
        self._decoded_nodes = DecodedNodes(decoded_nodes)
        # Usage counters change on every recall; kept out of the indexed hash so a
        # touch never makes RediSearch re-index the record and its two vectors.
        self.keys = Keyspace(prefix)
        self._schema = memory_schema(prefix, dims)
        self._dims = dims
        self._index = AsyncSearchIndex(self._schema, redis_client=redis)
        self._clock_ms = clock_ms
        self.graph = RedisGraph(redis, prefix)
        self.state = AgentStateStore(redis, prefix)
        self._scripts = RedisScripts(redis)
        self.decay = DecayIndex(redis, prefix)
        self.routing = SearchRouting(redis, prefix)

    @property
    def index_name(self) -> str:
        return self._schema.index.name

    def key(self, agent_id: str, memory_id: str) -> str:
        return self.keys.memory(agent_id, memory_id)

    async def ensure_schema(self) -> None:
        """The index, created where missing and checked against the schema: the one
        index, or on a cluster each master's (`grimoire.tables.routing`)."""
        for master in await self.routing.master_indexes():
            schema = self._schema
            index = self._index
            if master.index != self.index_name or master.client is not self._redis:
                schema = memory_schema(self.keys.prefix, self._dims, master.index)
                index = AsyncSearchIndex(schema, redis_client=master.client)
            await self._ensure_index(index, schema, master.client)

    async def _ensure_index(self, index: AsyncSearchIndex, schema: IndexSchema, redis: Any) -> None:
        name = schema.index.name
        if not await index.exists():
            try:
                await index.create(overwrite=False)
            except RedisSearchError as exc:
                # Two workers starting together both saw no index: the other one
                # created it first. Checked against the schema below like any other.
                if "already exists" not in str(exc).lower():
                    raise
                logger.info("index %s was created by another worker", name)
            else:
                logger.info("created index %s", name)
                await self._wait_for_initial_scan(redis, name)
                return
        info = await redis.ft(name).info()
        attributes = info.get("attributes") if isinstance(info, dict) else None
        if attributes is None:
            return
        differences = schema_differences(schema, attributes)
        if differences:
            # Never rebuilt silently: dropping the index (not the hashes) and letting
            # the worker create it again is the operator's call (docs/cluster.md
            # "Upgrading a store"); until then the old index may answer for the wrong tenant.
            raise SchemaMismatch(
                f"index {name} differs from memory_index.yaml: " + "; ".join(differences)
            )

    async def _wait_for_initial_scan(self, redis: Any, name: str, timeout_s: float = 60.0) -> None:
        """A new index scans the existing keyspace in the background, and searches
        meanwhile see part of it; wait so the first recall is complete."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while asyncio.get_running_loop().time() < deadline:
            info = await redis.ft(name).info()
            indexing = (
                info.get("indexing", info.get(b"indexing", 0)) if isinstance(info, dict) else 0
            )
            if float(text_of(indexing)) == 0:
                return
            await asyncio.sleep(0.05)
        logger.warning("index %s still scanning after %.0fs", name, timeout_s)

    # ---- write path -------------------------------------------------------------

    async def decided_ids(self, pairs: Sequence[tuple[str, str]]) -> set[str]:
        return await self.state.decided(pairs) if pairs else set()

    async def load_fields(self, agent_ids: Sequence[str]) -> dict[str, FieldState]:
        return await self.state.load_fields(agent_ids)

    async def state_vectors(self, agent_ids: Sequence[str]) -> dict[str, StateVector]:
        return await self.state.state_vectors(agent_ids)

    async def nearest(self, queries: Sequence[tuple[str, bytes]]) -> list[StoredNeighbour | None]:
        """Nearest live memory of each (agent, canonical vector), in one pipelined round trip.

        A hit owned by anyone but the exact agent counts as no neighbour: admission
        folds and reinforces into what this returns, so the tenant filter is not
        trusted alone (an index built before the case-sensitive `agent_id` TAG
        matches `TENV1` for `tenV1`).
        """
        if not queries:
            return []
        targets = {a: await self.routing.target(a) for a in sorted({a for a, _ in queries})}
        async with self._redis.pipeline(transaction=False) as pipe:
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
        async with self._redis.pipeline(transaction=False) as pipe:
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
        now_ms = self._clock_ms() if self._clock_ms else 0
        # Each agent's decisions, and with them (`also`) their witness records and
        # outbox events, are stored together or not at all: one MULTI/EXEC for the
        # batch on one Redis, one per agent on a cluster (`AgentTransactions`).
        tx = await AgentTransactions.open(self._redis)
        for record in batch.records:
            cand = record.candidate
            pipe = tx.agent(cand.agent_id)
            fields = hash_fields(record, now_ms)
            key = self.key(cand.agent_id, record.id)
            self._scripts.count_new_terms(
                pipe,
                key,
                self.graph.keys.terms(cand.agent_id),
                # The form the hash holds: stemmed once per memory, not again here.
                counted_text(LexicalForm.parse(fields["lexical"])),
            )
            pipe.hset(key, mapping=fields)
            self.decay.schedule_new(pipe, fields)
            self.graph.link(pipe, cand.agent_id, cand.id, cand.ts_ms, cand.keys)
            if cand.hyperedge is not None:
                self.graph.bind(
                    pipe, cand.agent_id, cand.hyperedge.edge_id, {cand.id: cand.hyperedge.role}
                )
        for fold in batch.folds:
            pipe = tx.agent(fold.agent_id)
            seed = hash_fields(fold.seed, now_ms)
            self._scripts.fold_aggregate(
                pipe, self.key(fold.agent_id, fold.aggregate_id), seed, fold.ts_ms
            )
            self.decay.schedule_new(pipe, seed, keep_existing=True)
            seed_cand = fold.seed.candidate
            self.graph.link(
                pipe, fold.agent_id, fold.aggregate_id, fold.ts_ms, seed_cand.keys, latest=True
            )
            if fold.hyperedge is not None:
                edge = fold.hyperedge
                self.graph.join(pipe, fold.agent_id, edge.edge_id, fold.aggregate_id, edge.role)
        touched: dict[str, set[str]] = {}
        for record in batch.records:
            touched.setdefault(record.candidate.agent_id, set()).add(record.id)
        for fold in batch.folds:
            touched.setdefault(fold.agent_id, set()).add(fold.aggregate_id)
        for agent_id in sorted(touched):
            self.graph.sync_nodes(tx.agent(agent_id), agent_id, sorted(touched[agent_id]))
        for reinforcement in batch.reinforcements:
            self._scripts.reinforce(
                tx.agent(reinforcement.agent_id),
                self.key(reinforcement.agent_id, reinforcement.target_id),
                reinforcement.ts_ms,
            )
            if reinforcement.hyperedge is not None:
                edge = reinforcement.hyperedge
                self.graph.join(
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
            self.state.record_decisions(tx.agent(agent_id), agent_id, actions)
        for vector in batch.state_vectors:
            self.state.save_state_vector(tx.agent(vector.agent_id), vector)
        for state in batch.fields:
            pipe = tx.agent(state.agent_id)
            self.state.save_field(pipe, state)
            # ZADD GT keeps the maximum, so a redelivered old batch never moves it back.
            pipe.zadd(
                self.keys.watermark(state.agent_id), {WATERMARK_MEMBER: state.watermark_ms}, gt=True
            )
        if batch.fields:
            # The list of known agents, derived from their watermarks (shared: on a
            # cluster written just before the agents' transactions).
            marks = {state.agent_id: state.watermark_ms for state in batch.fields}
            tx.shared.zadd(self.keys.agents, marks, gt=True)
        for delta in batch.stats:
            self.state.count(tx.agent(delta.agent_id), delta.agent_id, delta.counters)
        for name, amount in batch.metrics:
            tx.shared.hincrbyfloat(self.keys.metrics, name, amount)
        # What each record, fold and reinforcement derives from (a retraction
        # follows these edges), in the same round trip as the writes.
        for agent_id, edge in batch_edges(batch):
            queue_edges(tx.agent(agent_id), self.keys, agent_id, (edge,))
        for part in also:
            part.queue(tx)
        await tx.execute()

    # ---- read path --------------------------------------------------------------

    async def get_many(self, agent_id: str, ids: Sequence[str]) -> list[StoredMemory | None]:
        async with self._redis.pipeline(transaction=False) as pipe:
            for memory_id in ids:
                pipe.hmget(self.key(agent_id, memory_id), list(RETURN_FIELDS))
            rows = await pipe.execute()
        found: list[StoredMemory | None] = []
        for row in rows:
            doc = dict(zip(RETURN_FIELDS, row, strict=True))
            ok = doc["memory_id"] is not None and text_of(doc["agent_id"]) == agent_id
            found.append(stored_memory(doc) if ok else None)
        return found

    async def knn(
        self, agent_id: str, vector: Sequence[float], k: int, *, lane: str = "canonical"
    ) -> list[ScoredHit]:
        query = VectorQuery(
            vector=np.asarray(vector, dtype=np.float32).tobytes(),
            vector_field_name=lane,
            return_fields=[],
            filter_expression=live_filter(agent_id),
            num_results=k,
            dtype="float32",
        )
        reply = await self._search(agent_id, *query.get_args(), "PARAMS", *_params(query))
        scored = [
            (self.keys.memory_id_of(key), 1.0 - float(text_of(fields["vector_distance"])))
            for key, fields in keyed_docs(reply)
        ]
        return await self._hits(agent_id, scored)

    async def full_text(self, agent_id: str, terms: Sequence[str], k: int) -> list[ScoredHit]:
        """Any term may match, scored as the recall lane scores it (BM25 from the
        agent's own counts, `RedisRecallSource.full_text`), with every term
        searched, common ones included."""
        if not terms:
            return []
        every_term = replace(self.knn_policy, common_term_docs=None)
        lane = await self._source(agent_id, every_term).full_text(tuple(terms), k, NO_FILTERS)
        return await self._hits(agent_id, [(hit.memory_id, hit.score) for hit in lane])

    async def _hits(self, agent_id: str, scored: Sequence[tuple[str, float]]) -> list[ScoredHit]:
        """A search's (memory id, score) as hits, each record read from its hash (a
        cluster master loads no field of another slot's document)."""
        records = await self.get_many(agent_id, [memory_id for memory_id, _ in scored])
        hits = [
            ScoredHit(record, score)
            for record, (_, score) in zip(records, scored, strict=True)
            if record is not None
        ]
        hits.sort(key=lambda hit: (-hit.score, hit.memory.id))
        return hits

    async def count(self, agent_id: str) -> int:
        query = Query(str(tenant_filter(agent_id))).no_content().paging(0, 0).dialect(2)
        return total_results(await self._search(agent_id, *query.get_args()))

    async def estimated_counts(self, agent_ids: Sequence[str]) -> dict[str, int]:
        """How many memories each agent has had written (the term counts'
        `#memories`: never less than `count` but for retractions): one pipelined
        round trip for many agents, where `count` is a search each."""
        if not agent_ids:
            return {}
        async with self._redis.pipeline(transaction=False) as pipe:
            for agent_id in agent_ids:
                pipe.hget(self.graph.keys.terms(agent_id), MEMORIES_FIELD)
            counts = await pipe.execute()
        return {a: int(text_of(c)) if c else 0 for a, c in zip(agent_ids, counts, strict=True)}

    async def _search(self, agent_id: str, *arguments: Any) -> Any:
        """FT.SEARCH on the index holding `agent_id`'s memories (raw reply)."""
        target = await self.routing.target(agent_id)
        return await self._redis.execute_command(
            "FT.SEARCH", target.index, *arguments, **target.options
        )

    async def metrics(self) -> dict[str, float]:
        raw = await self._redis.hgetall(self.keys.metrics)
        return {text_of(k): float(text_of(v)) for k, v in raw.items()}

    async def watermark(self, agent_id: str) -> int | None:
        score = await self._redis.zscore(self.keys.watermark(agent_id), WATERMARK_MEMBER)
        return None if score is None else int(score)

    async def contrarian_served(self, agent_id: str) -> int | None:
        score = await self._redis.zscore(self.keys.contrarian_window(agent_id), WINDOW_MEMBER)
        return None if score is None else int(score)

    async def serve_contrarian(self, agent_id: str, window: int) -> None:
        """Windows only move forward (GT): a late recall never reopens one."""
        await self._redis.zadd(
            self.keys.contrarian_window(agent_id), {WINDOW_MEMBER: window}, gt=True
        )

    async def apply_usage_once(
        self,
        agent_id: str,
        seq: int,
        memory_ids: Sequence[str],
        as_of_ms: int,
        contrarian_window: int | None,
        request: str | None = None,
    ) -> bool:
        applied = self.keys.applied_usage(agent_id)
        # One writer per agent (its journal partition's apply loop): nothing can
        # slip in between this read and the transaction below.
        if await self._redis.zscore(applied, seq) is not None:
            return False
        if request is not None and await self._redis.zscore(applied, _request(request)):
            return False
        async with agent_transaction(self._redis, agent_id) as pipe:
            self._scripts.touch_in(
                pipe, [self.keys.usage(agent_id, i) for i in memory_ids], as_of_ms
            )
            # A later decay origin can promote a curated entry: its next cycle looks.
            queue_changed(pipe, self.keys, agent_id, memory_ids)
            if contrarian_window is not None:
                pipe.zadd(
                    self.keys.contrarian_window(agent_id),
                    {WINDOW_MEMBER: contrarian_window},
                    gt=True,
                )
            pipe.zadd(applied, {str(seq): seq})
            if request is not None:
                # A recall served again after its worker died journals a second
                # entry under a new seq: the request names them both.
                pipe.zadd(applied, {_request(request): seq})
            # Only recent entries can be read again (after a crash): keep those.
            pipe.zremrangebyscore(applied, "-inf", seq - USAGE_SEQ_WINDOW)
            await pipe.execute()
        return True

    async def usage_answered(self, agent_id: str, request: str, seq: int) -> bool:
        score = await self._redis.zscore(self.keys.applied_usage(agent_id), _request(request))
        return score is not None and int(score) != seq

    async def apply_outcome(self, outcome: Outcome, journal: tuple[int, int] | None = None) -> int:
        """Apply an outcome once, atomically; -1 when it was applied before, else
        how many of the agent's memories it changed (others' ids are ignored)."""
        effect = outcome.effect
        keys = [
            self.keys.applied_outcomes(outcome.agent_id),
            self.keys.witness_due(outcome.agent_id),
        ]
        for memory_id in outcome.memory_ids:
            keys += [
                self.key(outcome.agent_id, memory_id),
                self.keys.usage(outcome.agent_id, memory_id),
            ]
        args = [
            outcome.outcome_id,
            outcome.agent_id,
            outcome.ts_ms,
            effect.confidence_delta,
            effect.strength_delta,
            1 if effect.resets_decay else 0,
            effect.validated,
            effect.contradicted,
            *(changed_count_template(journal) if journal is not None else ("", "")),
        ]
        changed = await self._scripts.apply_outcome(keys, args)
        if effect.touches_memories:
            # The curated entries among them are due at the next cycle; marked on a
            # redelivery (-1) too, so a crash between the script and this mark heals.
            async with self._redis.pipeline(transaction=False) as pipe:
                queue_changed(pipe, self.keys, outcome.agent_id, outcome.memory_ids)
                await pipe.execute()
        if changed > 0 and effect.touches_memories:
            # Confidence or the decay origin moved, so each band crossing did too.
            await self.decay.reschedule(outcome.agent_id, list(outcome.memory_ids), outcome.ts_ms)
        return changed

    async def apply_credits(
        self,
        outcome: Outcome,
        credits: Sequence[MemoryCredit],
        uplifts: Mapping[str, float],
        also: Sequence[TransactionPart] = (),
        counters: Sequence[tuple[str, float]] = (),
        journal: tuple[int, int] | None = None,
    ) -> int:
        marker = self.keys.applied_outcomes(outcome.agent_id)
        # The partition's one writer checks, then writes: nothing runs in between.
        if await self._redis.sismember(marker, outcome.outcome_id):
            return -1
        by_id = {credit.memory_id: credit for credit in credits}
        ids = sorted(set(by_id) | set(uplifts))
        keys = [marker, self.keys.witness_due(outcome.agent_id)]
        args: list[Any] = [
            outcome.outcome_id,
            outcome.agent_id,
            outcome.ts_ms,
            *(changed_count_template(journal) if journal is not None else ("", "")),
        ]
        for memory_id in ids:
            keys += [
                self.key(outcome.agent_id, memory_id),
                self.keys.usage(outcome.agent_id, memory_id),
            ]
            credit = by_id.get(memory_id)
            uplift = uplifts.get(memory_id)
            args += [
                repr(credit.confidence_delta) if credit else "0",
                repr(credit.strength_delta) if credit else "0",
                credit.validated if credit else 0,
                credit.contradicted if credit else 0,
                "" if uplift is None else repr(uplift),
            ]
        tx = await AgentTransactions.open(self._redis)
        pipe = tx.agent(outcome.agent_id)
        self._scripts.apply_credits_in(pipe, keys, args)
        for part in also:
            part.queue(tx)
        self.state.count(pipe, outcome.agent_id, counters)
        queue_changed(pipe, self.keys, outcome.agent_id, ids)
        results = await tx.execute()
        changed = int(results[outcome.agent_id][0])
        if changed > 0:
            await self.decay.reschedule(outcome.agent_id, ids, outcome.ts_ms)
        return changed

    def recall_source(self, agent_id: str) -> RecallSource:
        """A read view bound to one agent, for one request (it caches records)."""
        return self._source(agent_id, self.knn_policy)

    def _source(self, agent_id: str, knn_policy: KnnPolicy) -> RedisRecallSource:
        return RedisRecallSource(
            self._redis,
            routing=self.routing,
            keys=self.keys,
            scripts=self._scripts,
            agent_id=agent_id,
            dims=self._dims,
            knn_policy=knn_policy,
            decoded_nodes=self._decoded_nodes,
        )

    # ---- outcomes that arrive before their memory ---------------------------------

    async def missing_memories(self, pairs: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Those (agent, memory id) pairs with no memory hash at all (another agent's
        memory is not missing: it is someone else's, never this agent's), in one
        round trip whatever the agents."""
        if not pairs:
            return set()
        async with self._redis.pipeline(transaction=False) as pipe:
            for agent_id, memory_id in pairs:
                pipe.exists(self.key(agent_id, memory_id))
            found = await pipe.execute()
        return {pair for pair, exists in zip(pairs, found, strict=True) if not exists}

    async def hold_outcome(self, outcome: Outcome, memory_ids: Sequence[str]) -> None:
        """Keep the part of `outcome` naming each of `memory_ids` until it is written."""
        key = self.keys.pending_outcomes(outcome.agent_id)
        held = await self._redis.hmget(key, list(memory_ids)) if memory_ids else []
        async with agent_transaction(self._redis, outcome.agent_id) as pipe:
            for memory_id, raw in zip(memory_ids, held, strict=True):
                waiting = outcomes_from_json(raw)
                part = held_for(outcome, memory_id)
                if all(o.outcome_id != part.outcome_id for o in waiting):
                    pipe.hset(key, memory_id, outcomes_to_json([*waiting, part]))
            await pipe.execute()

    async def holding(self, pairs: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Those (agent, memory id) pairs an outcome is held for."""
        return await present_fields(self._redis, self.keys.pending_outcomes, pairs)

    async def held_outcomes(self, agent_id: str, memory_ids: Sequence[str]) -> list[Outcome]:
        """The held outcomes of `memory_ids`, in the order they were held (kept until
        `release_held_outcomes`: the caller applies them first, so a crash between
        leaves them held, and applying them again is a no-op per outcome id)."""
        if not memory_ids:
            return []
        held = await self._redis.hmget(self.keys.pending_outcomes(agent_id), list(memory_ids))
        return [o for raw in held for o in outcomes_from_json(raw)]

    async def release_held_outcomes(self, agent_id: str, memory_ids: Sequence[str]) -> None:
        """Forget the held outcomes of `memory_ids` (they were applied)."""
        if memory_ids:
            await self._redis.hdel(self.keys.pending_outcomes(agent_id), *memory_ids)


def _params(query: VectorQuery) -> list[Any]:
    """A redisvl query's PARAMS (count, then name/value pairs) for a raw FT.SEARCH."""
    params = query.params
    return [len(params) * 2, *(part for item in params.items() for part in item)]
