"""The in-memory write path (`InMemoryMemoryWrites`, the `MemoryWrites` port), with
`RedisMemoryWrites`' semantics: what was decided, the nearest stored neighbour
(exact), and a batch applied in the order the Redis store pipelines it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grimoire.streams.write.admission import NearMemory
from grimoire.streams.write.changes import WriteBatch
from grimoire.streams.write.plan import StoredNeighbour, closer, neighbour_similarity
from grimoire.streams.write.view import IngestView
from grimoire.tables.codec.actors import stored_actor
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.memory_hash import hash_fields
from grimoire.tables.ports.transaction import TransactionPart
from grimoire.tables.testing.derivations import edge_index
from grimoire.tables.testing.memory_core import Hash, encoded
from grimoire.tables.testing.memory_held_outcomes import InMemoryHeldOutcomes
from grimoire.tables.trust.derivations import batch_edges

__all__ = ["InMemoryMemoryWrites"]


class InMemoryMemoryWrites(InMemoryHeldOutcomes):
    """Each agent's decisions, records, folds and reinforcements, with the outcomes
    held for memories not written yet (`InMemoryHeldOutcomes`)."""

    async def ingest_view(self, pairs: Sequence[tuple[str, str]]) -> IngestView:
        held, decided = self.core.held, self.core.decided
        return IngestView(
            frozenset((a, c) for a, c in pairs if held.get(a, {}).get(c)),
            frozenset((a, c) for a, c in pairs if c in decided.get(a, {})),
            await self.load_fields(list(dict.fromkeys(agent for agent, _ in pairs))),
        )

    async def nearest(self, queries: Sequence[tuple[str, bytes]]) -> list[StoredNeighbour | None]:
        """Exact, ties to the smaller memory id (`plan.closer`), as RedisMemoryStore."""
        found: list[StoredNeighbour | None] = []
        for agent_id, vector in queries:
            query = np.frombuffer(vector, dtype=np.float32)
            best: StoredNeighbour | None = None
            for doc in self.core.live(agent_id):
                if text_of(doc.get("agent_id", "")) != agent_id or "canonical" not in doc:
                    continue
                stored = np.frombuffer(doc["canonical"], dtype=np.float32)
                similarity = neighbour_similarity(query, stored)
                memory_id = text_of(doc["memory_id"])
                if closer(similarity, memory_id, best.neighbour if best else None):
                    best = StoredNeighbour(
                        NearMemory(
                            memory_id=memory_id,
                            similarity=similarity,
                            confidence=float(text_of(doc.get("confidence", "0.5"))),
                            text=text_of(doc.get("text", "")),
                        ),
                        text_of(doc.get("kind", "")),
                    )
            found.append(best)
        return found

    async def commit(self, batch: WriteBatch, also: Sequence[TransactionPart] = ()) -> None:
        """Apply a batch in the order RedisMemoryStore pipelines it."""
        core = self.core
        now_ms = core.clock_ms() if core.clock_ms else 0
        for record in batch.records:
            cand = record.candidate
            fields = hash_fields(record, now_ms)
            _add_actor(core.actors, cand.agent_id, fields)
            core.records.setdefault(record.id, {}).update(encoded(fields))
            core.decay.schedule_new(fields)
            core.link(cand.agent_id, cand.id, cand.ts_ms, cand.keys)
            if cand.hyperedge is not None:
                members = core.hyperedges.setdefault((cand.agent_id, cand.hyperedge.edge_id), {})
                members[cand.id] = str(cand.hyperedge.role)
        for fold in batch.folds:
            seed = hash_fields(fold.seed, now_ms)
            _add_actor(core.actors, fold.agent_id, seed)
            core.decay.schedule_new(seed, keep_existing=True)
            aggregate = core.records.get(fold.aggregate_id)
            if aggregate is None:
                aggregate = encoded(seed)
                aggregate.update({"count": "1", "last_seen": str(fold.ts_ms)})
                core.records[fold.aggregate_id] = aggregate
            aggregate["count"] = str(int(text_of(aggregate.get("count", "0"))) + 1)
            _keep_latest(aggregate, fold.ts_ms)
            keys = fold.seed.candidate.keys
            core.link(fold.agent_id, fold.aggregate_id, fold.ts_ms, keys, latest=True)
            if fold.hyperedge is not None:
                core.join(fold.agent_id, fold.hyperedge, fold.aggregate_id)
        for reinforcement in batch.reinforcements:
            target = core.records.get(reinforcement.target_id)
            if target is None:  # deleted meanwhile: left alone, like the Lua script
                continue
            target["reinforced_count"] = str(int(text_of(target.get("reinforced_count", "0"))) + 1)
            _keep_latest(target, reinforcement.ts_ms)
            if reinforcement.hyperedge is not None:
                core.join(reinforcement.agent_id, reinforcement.hyperedge, reinforcement.target_id)
        for decision in batch.decisions:
            core.decided.setdefault(decision.agent_id, {})[decision.candidate_id] = decision.action
        for vector in batch.state_vectors:
            core.state_vectors[vector.agent_id] = vector
        for state in batch.fields:
            core.fields[state.agent_id] = state
            mark = core.watermarks.get(state.agent_id)  # ZADD GT: only ever moves forward
            if mark is None or state.watermark_ms > mark:
                core.watermarks[state.agent_id] = state.watermark_ms
        for delta in batch.stats:
            core.count(delta.agent_id, delta.counters)
        for name, amount in batch.metrics:
            core.metrics[name] = core.metrics.get(name, 0.0) + amount
        edges = edge_index(self)  # the derivation index kept beside the core
        for agent_id, edge in batch_edges(batch):
            edges.add(agent_id, (edge,))
        for part in also:
            await part.apply_alone()


def _add_actor(actors: dict[str, set[str]], agent_id: str, fields: Mapping[str, Any]) -> None:
    name = stored_actor(fields.get("actor_id"))
    if name:
        actors.setdefault(agent_id, set()).add(name)


def _keep_latest(doc: Hash, ts_ms: int) -> None:
    if float(text_of(doc.get("last_seen", "0"))) < ts_ms:
        doc["last_seen"] = str(ts_ms)
