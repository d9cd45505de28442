"""The MemoryStore Protocol over plain dicts, with RedisMemoryStore's semantics.

Records are kept as the flat hash Redis would hold (values encoded the way
redis-py encodes them: str, or bytes for vectors), so field-level behaviour
(HSET overwrites, the aggregate fold and reinforce scripts, tag filters on
"deleted"/"quarantined") is the same. Used by unit tests and as the reference
the Redis store is checked against in the store contract test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from grimoire.streams.journal.usage import UsageChanges, UsageView
from grimoire.streams.learn.effects import (
    EffectChanges,
    EffectsView,
    MemoryState,
    credited_ids,
    fold_credits,
    fold_outcome,
)
from grimoire.streams.learn.outcomes import Outcome
from grimoire.streams.learn.runs import MemoryCredit
from grimoire.streams.model.field_state import FieldState
from grimoire.streams.model.lexicon import LexicalForm
from grimoire.streams.model.records import HyperedgeRef
from grimoire.streams.ports.recall import RecallSource
from grimoire.streams.write.admission import NearMemory
from grimoire.streams.write.changes import StateVector, WriteBatch
from grimoire.streams.write.plan import StoredNeighbour, closer, neighbour_similarity
from grimoire.tables.codec.actors import stored_actor
from grimoire.tables.codec.held_outcome import held_for
from grimoire.tables.codec.memory_hash import (
    RETURN_FIELDS,
    StoredMemory,
    hash_fields,
    stored_memory,
)
from grimoire.tables.memory.reads import ScoredHit
from grimoire.tables.ports.transaction import TransactionPart
from grimoire.tables.testing.curator_marks import curator_indexes
from grimoire.tables.testing.decay_store import InMemoryDecayStore
from grimoire.tables.testing.derivations import edge_index
from grimoire.tables.testing.recall_source import InMemoryRecallSource
from grimoire.tables.trust.derivations import batch_edges

Hash = dict[str, str | bytes]
LANES = ("canonical", "eidolon")


def _encode(value: Any) -> str | bytes:
    """A value as Redis stores it (redis-py writes numbers with repr, bytes as-is)."""
    if isinstance(value, bytes | str):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"cannot store {type(value).__name__} in a hash")
    return repr(value)


def _encoded(fields: Mapping[str, Any]) -> Hash:
    return {name: _encode(value) for name, value in fields.items()}


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _cosine(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> float:
    norms = float(np.linalg.norm(a)) * float(np.linalg.norm(b))
    return float(np.dot(a.astype(np.float64), b.astype(np.float64))) / norms if norms else 0.0


class InMemoryMemoryStore:
    def __init__(self, *, clock_ms: Callable[[], int] | None = None, dims: int = 384) -> None:
        self._clock_ms = clock_ms
        self._dims = dims
        self._records: dict[str, Hash] = {}
        self._nexus: dict[tuple[str, str], dict[str, int]] = {}
        self._hyperedges: dict[tuple[str, str], dict[str, str]] = {}
        self._decided: dict[str, dict[str, str]] = {}
        self._fields: dict[str, FieldState] = {}
        self._state_vectors: dict[str, StateVector] = {}
        self._watermarks: dict[str, int] = {}
        self._contrarian: dict[str, int] = {}
        self._usage_applied: dict[str, set[int]] = {}
        self._usage_requests: dict[str, dict[str, int]] = {}  # agent -> request -> seq
        self._stats: dict[str, dict[str, float]] = {}
        self._metrics: dict[str, float] = {}
        self._usage: dict[str, Hash] = {}
        self._outcomes: dict[str, set[str]] = {}
        self._held: dict[str, dict[str, list[Outcome]]] = {}
        self._actors: dict[str, set[str]] = {}
        # The decay schedule the write path and outcomes keep, as RedisMemoryStore.decay.
        self.decay = InMemoryDecayStore(self)

    async def ensure_schema(self) -> None:
        return None

    # ---- write path -------------------------------------------------------------

    async def decided_ids(self, pairs: Sequence[tuple[str, str]]) -> set[str]:
        return {cid for agent, cid in pairs if cid in self._decided.get(agent, {})}

    async def load_fields(self, agent_ids: Sequence[str]) -> dict[str, FieldState]:
        return {a: self._fields.get(a, FieldState(agent_id=a)) for a in agent_ids}

    async def state_vectors(self, agent_ids: Sequence[str]) -> dict[str, StateVector]:
        return {a: self._state_vectors[a] for a in agent_ids if a in self._state_vectors}

    async def nearest(self, queries: Sequence[tuple[str, bytes]]) -> list[StoredNeighbour | None]:
        """Exact, ties to the smaller memory id (`plan.closer`), as RedisMemoryStore."""
        found: list[StoredNeighbour | None] = []
        for agent_id, vector in queries:
            query = np.frombuffer(vector, dtype=np.float32)
            best: StoredNeighbour | None = None
            for doc in self._live(agent_id):
                if _text(doc.get("agent_id", "")) != agent_id or "canonical" not in doc:
                    continue
                stored = np.frombuffer(doc["canonical"], dtype=np.float32)
                similarity = neighbour_similarity(query, stored)
                memory_id = _text(doc["memory_id"])
                if closer(similarity, memory_id, best.neighbour if best else None):
                    best = StoredNeighbour(
                        NearMemory(
                            memory_id=memory_id,
                            similarity=similarity,
                            confidence=float(_text(doc.get("confidence", "0.5"))),
                            text=_text(doc.get("text", "")),
                        ),
                        _text(doc.get("kind", "")),
                    )
            found.append(best)
        return found

    def _join(self, agent_id: str, edge: HyperedgeRef, member: str) -> None:
        """A member joins a hyperedge, keeping a role it has there (HSETNX)."""
        self._hyperedges.setdefault((agent_id, edge.edge_id), {}).setdefault(member, str(edge.role))

    async def commit(self, batch: WriteBatch, also: Sequence[TransactionPart] = ()) -> None:
        """Apply a batch in the order RedisMemoryStore pipelines it."""
        now_ms = self._clock_ms() if self._clock_ms else 0
        for record in batch.records:
            cand = record.candidate
            fields = hash_fields(record, now_ms)
            self._add_actor(cand.agent_id, fields)
            self._records.setdefault(record.id, {}).update(_encoded(fields))
            self.decay.schedule_new(fields)
            self._link(cand.agent_id, cand.id, cand.ts_ms, cand.keys)
            if cand.hyperedge is not None:
                edge = self._hyperedges.setdefault((cand.agent_id, cand.hyperedge.edge_id), {})
                edge[cand.id] = str(cand.hyperedge.role)
        for fold in batch.folds:
            seed = hash_fields(fold.seed, now_ms)
            self._add_actor(fold.agent_id, seed)
            self.decay.schedule_new(seed, keep_existing=True)
            aggregate = self._records.get(fold.aggregate_id)
            if aggregate is None:
                aggregate = _encoded(seed)
                aggregate.update({"count": "1", "last_seen": str(fold.ts_ms)})
                self._records[fold.aggregate_id] = aggregate
            aggregate["count"] = str(int(_text(aggregate.get("count", "0"))) + 1)
            _keep_latest(aggregate, fold.ts_ms)
            keys = fold.seed.candidate.keys
            self._link(fold.agent_id, fold.aggregate_id, fold.ts_ms, keys, latest=True)
            if fold.hyperedge is not None:
                self._join(fold.agent_id, fold.hyperedge, fold.aggregate_id)
        for reinforcement in batch.reinforcements:
            target = self._records.get(reinforcement.target_id)
            if target is None:  # deleted meanwhile: left alone, like the Lua script
                continue
            target["reinforced_count"] = str(int(_text(target.get("reinforced_count", "0"))) + 1)
            _keep_latest(target, reinforcement.ts_ms)
            if reinforcement.hyperedge is not None:
                self._join(reinforcement.agent_id, reinforcement.hyperedge, reinforcement.target_id)
        for decision in batch.decisions:
            self._decided.setdefault(decision.agent_id, {})[decision.candidate_id] = decision.action
        for vector in batch.state_vectors:
            self._state_vectors[vector.agent_id] = vector
        for state in batch.fields:
            self._fields[state.agent_id] = state
            mark = self._watermarks.get(state.agent_id)  # ZADD GT: only ever moves forward
            if mark is None or state.watermark_ms > mark:
                self._watermarks[state.agent_id] = state.watermark_ms
        for delta in batch.stats:
            counters = self._stats.setdefault(delta.agent_id, {})
            for name, amount in delta.counters:
                counters[name] = counters.get(name, 0.0) + amount
        for name, amount in batch.metrics:
            self._metrics[name] = self._metrics.get(name, 0.0) + amount
        edges = edge_index(self)  # the derivation index kept beside this store
        for agent_id, edge in batch_edges(batch):
            edges.add(agent_id, (edge,))
        for part in also:
            await part.apply_alone()

    def _add_actor(self, agent_id: str, fields: Mapping[str, Any]) -> None:
        name = stored_actor(fields.get("actor_id"))
        if name:
            self._actors.setdefault(agent_id, set()).add(name)

    async def actors_named(self, agent_id: str, candidates: Sequence[str]) -> frozenset[str]:
        return frozenset(self._actors.get(agent_id, set()).intersection(candidates))

    def _link(
        self,
        agent_id: str,
        memory_id: str,
        ts_ms: int,
        keys: Sequence[str],
        *,
        latest: bool = False,
    ) -> None:
        for key in keys:  # ZADD: the latest write sets the score; ZADD GT only raises it
            members = self._nexus.setdefault((agent_id, key), {})
            if latest and memory_id in members:
                members[memory_id] = max(members[memory_id], ts_ms)
            else:
                members[memory_id] = ts_ms

    # ---- read path --------------------------------------------------------------

    def _live(self, agent_id: str) -> list[Hash]:
        return [
            doc
            for doc in self._records.values()
            if _text(doc.get("agent_id", "")) == agent_id
            and _text(doc.get("deleted", "")) != "1"
            and _text(doc.get("quarantined", "")) != "1"
            and _text(doc.get("archived", "")) != "1"
        ]

    def _search(
        self, agent_id: str, vector: np.ndarray[Any, Any], lane: str, k: int
    ) -> list[tuple[float, Hash]]:
        if lane not in LANES:
            raise ValueError(f"unknown vector lane {lane!r}")
        scored = [
            (_cosine(vector, np.frombuffer(stored, dtype=np.float32)), doc)
            for doc in self._live(agent_id)
            if isinstance(stored := doc.get(lane), bytes) and stored  # absent: not in the lane
        ]
        scored.sort(key=lambda item: (-item[0], _text(item[1]["memory_id"])))
        return scored[:k]

    async def get_many(self, agent_id: str, ids: Sequence[str]) -> list[StoredMemory | None]:
        found: list[StoredMemory | None] = []
        for memory_id in ids:
            doc = self._records.get(memory_id)
            ok = doc is not None and _text(doc.get("agent_id", "")) == agent_id
            found.append(_stored(doc) if doc is not None and ok else None)
        return found

    async def knn(
        self, agent_id: str, vector: Sequence[float], k: int, *, lane: str = "canonical"
    ) -> list[ScoredHit]:
        query = np.asarray(vector, dtype=np.float32)
        return [ScoredHit(_stored(doc), s) for s, doc in self._search(agent_id, query, lane, k)]

    async def full_text(self, agent_id: str, terms: Sequence[str], k: int) -> list[ScoredHit]:
        """Any term may match; the score counts the distinct query terms a text contains."""
        wanted = set(terms)
        hits = []
        for doc in self._live(agent_id):
            matches = len(wanted & set(LexicalForm.parse(_text(doc.get("lexical", ""))).words))
            if matches:
                hits.append(ScoredHit(_stored(doc), float(matches)))
        hits.sort(key=lambda hit: (-hit.score, hit.memory.id))
        return hits[:k]

    async def count(self, agent_id: str) -> int:
        """Every record of the agent, quarantined and deleted ones included (tenant filter)."""
        return sum(_text(d.get("agent_id", "")) == agent_id for d in self._records.values())

    async def watermark(self, agent_id: str) -> int | None:
        return self._watermarks.get(agent_id)

    async def contrarian_served(self, agent_id: str) -> int | None:
        return self._contrarian.get(agent_id)

    async def serve_contrarian(self, agent_id: str, window: int) -> None:
        self._contrarian[agent_id] = max(window, self._contrarian.get(agent_id, window))

    async def usage_view(self, agent_id: str, seq: int, request: str | None) -> UsageView:
        answered = self._usage_requests.get(agent_id, {})
        return UsageView(
            seq_applied=seq in self._usage_applied.get(agent_id, set()),
            request_seq=None if request is None else answered.get(request),
        )

    async def commit_usage(self, changes: UsageChanges) -> None:
        agent_id = changes.agent_id
        for memory_id in changes.memory_ids:
            self.touch(memory_id, changes.as_of_ms)
        curator_indexes(self).changed(agent_id, changes.memory_ids)
        if changes.contrarian_window is not None:
            await self.serve_contrarian(agent_id, changes.contrarian_window)
        applied = self._usage_applied.setdefault(agent_id, set())
        answered = self._usage_requests.setdefault(agent_id, {})
        applied.add(changes.seq)
        if changes.request is not None:
            answered[changes.request] = changes.seq
        # Redis's ZREMRANGEBYSCORE over the applied marks, entries and requests alike.
        applied.difference_update([s for s in applied if s < changes.forget_below])
        for request in [r for r, s in answered.items() if s < changes.forget_below]:
            del answered[request]

    async def metrics(self) -> dict[str, float]:
        return dict(self._metrics)

    def recall_source(self, agent_id: str) -> RecallSource:
        return InMemoryRecallSource(self, agent_id, self._dims)

    def hashes(self) -> list[Hash]:
        return list(self._records.values())

    # ---- writes the maintenance stores make to the same keyspace ----------------
    # (HSET on a memory or usage hash, ZADD into the nexus index: RedisCuratorStore
    # and RedisCompactionStore write those keys directly, so their in-memory
    # references write them here.)

    def stored_hash(self, memory_id: str) -> Hash | None:
        """The stored memory hash itself (not a copy): writes to it are HSETs."""
        return self._records.get(memory_id)

    def put_fields(self, memory_id: str, fields: Mapping[str, Any]) -> None:
        self._records.setdefault(memory_id, {}).update(_encoded(fields))

    def put_usage(self, memory_id: str, fields: Mapping[str, Any]) -> None:
        self._usage.setdefault(memory_id, {}).update(_encoded(fields))

    def link(self, agent_id: str, memory_id: str, ts_ms: int, keys: Sequence[str]) -> None:
        self._link(agent_id, memory_id, ts_ms, keys)

    def touch(self, memory_id: str, as_of_ms: int) -> None:
        """The usage-accounting script's effect on the memory's usage hash."""
        usage = self._usage.setdefault(memory_id, {})
        usage["included_count_total"] = str(int(_text(usage.get("included_count_total", "0"))) + 1)
        decayed = float(_text(usage.get("included_count_decay", "0"))) + 1
        usage["included_count_decay"] = repr(decayed)
        if float(_text(usage.get("last_accessed", "0"))) < as_of_ms:
            usage["last_accessed"] = str(as_of_ms)

    def _effects_view(self, outcome: Outcome, memory_ids: Sequence[str]) -> EffectsView:
        """What the store holds for an outcome's effects (grimoire.streams.learn.effects)."""
        memories: dict[str, MemoryState] = {}
        for memory_id in memory_ids:
            doc = self._records.get(memory_id)
            owned = doc is not None and _text(doc.get("agent_id", "")) == outcome.agent_id
            confidence = doc.get("confidence") if doc is not None else None
            accessed = self._usage.get(memory_id, {}).get("last_accessed")
            memories[memory_id] = MemoryState(
                owned,
                None if confidence is None else _text(confidence),
                None if accessed is None else _text(accessed),
            )
        applied = outcome.outcome_id in self._outcomes.get(outcome.agent_id, set())
        return EffectsView(applied, memories)

    def _commit_effects(self, agent_id: str, changes: EffectChanges) -> None:
        """The changes' writes, as RedisOutcomeEffects commits them."""
        if changes.mark_applied:
            self._outcomes.setdefault(agent_id, set()).add(changes.outcome_id)
        for change in changes.memories:
            doc = self._records[change.memory_id]
            if change.confidence is not None:
                doc["confidence"] = change.confidence
            if change.last_accessed is not None:
                usage = self._usage.setdefault(change.memory_id, {})
                usage["last_accessed"] = change.last_accessed
            if change.strength is not None:
                strength = float(_text(doc.get("strength", "1"))) + change.strength
                doc["strength"] = repr(strength)
            for name, amount in (
                ("validated_count", change.validated),
                ("contradicted_count", change.contradicted),
            ):
                if amount:
                    doc[name] = str(int(_text(doc.get(name, "0"))) + amount)
            if change.causal_uplift is not None:
                doc["causal_uplift"] = change.causal_uplift

    async def apply_outcome(self, outcome: Outcome, journal: tuple[int, int] | None = None) -> int:
        """The outcome's fold (grimoire.streams.learn.effects), loaded and committed
        here."""
        effect = outcome.effect
        changes = fold_outcome(self._effects_view(outcome, outcome.memory_ids), outcome)
        changed = -1
        if changes is not None:
            self._commit_effects(outcome.agent_id, changes)
            changed = changes.changed
        if effect.touches_memories:  # marked on a redelivery too, as Redis does
            curator_indexes(self).changed(outcome.agent_id, outcome.memory_ids)
        if changed > 0 and effect.touches_memories:
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
        """The credits' fold (grimoire.streams.learn.effects), loaded and committed
        here."""
        ids = credited_ids(credits, uplifts)
        changes = fold_credits(self._effects_view(outcome, ids), outcome, credits, uplifts)
        if changes is None:
            return -1
        self._commit_effects(outcome.agent_id, changes)
        stats = self._stats.setdefault(outcome.agent_id, {})
        for name, amount in counters:
            stats[name] = stats.get(name, 0) + amount
        for part in also:
            await part.apply_alone()
        curator_indexes(self).changed(outcome.agent_id, ids)
        if changes.changed > 0:
            await self.decay.reschedule(outcome.agent_id, ids, outcome.ts_ms)
        return changes.changed

    def usage(self, memory_id: str) -> Hash:
        return dict(self._usage.get(memory_id, {}))

    # ---- inspection (what RedisMemoryStore exposes through .graph and .state) ---

    def record(self, memory_id: str) -> Hash | None:
        """A copy of the record's hash, as HGETALL would return it (str keys)."""
        doc = self._records.get(memory_id)
        return dict(doc) if doc is not None else None

    async def degrees(self, agent_id: str, keys: Sequence[str]) -> dict[str, int]:
        return {key: len(self._nexus.get((agent_id, key), {})) for key in keys}

    async def newest(self, agent_id: str, key: str, limit: int) -> list[str]:
        members = self._nexus.get((agent_id, key), {})
        ranked = sorted(members.items(), key=lambda item: (item[1], item[0]), reverse=True)
        return [memory_id for memory_id, _ in ranked[: max(limit, 0)]]

    async def nexus(self, agent_id: str, key: str) -> dict[str, int]:
        return dict(self._nexus.get((agent_id, key), {}))

    async def hyperedge(self, agent_id: str, edge_id: str) -> dict[str, str]:
        return dict(self._hyperedges.get((agent_id, edge_id), {}))

    async def decisions(self, agent_id: str) -> dict[str, str]:
        return dict(self._decided.get(agent_id, {}))

    async def stats(self, agent_id: str) -> dict[str, float]:
        return {name: float(value) for name, value in self._stats.get(agent_id, {}).items()}

    # ---- outcomes that arrive before their memory -------------------------------

    async def missing_memories(self, pairs: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        return {(a, m) for a, m in pairs if m not in self._records}

    async def hold_outcome(self, outcome: Outcome, memory_ids: Sequence[str]) -> None:
        held = self._held.setdefault(outcome.agent_id, {})
        for memory_id in memory_ids:
            waiting = held.setdefault(memory_id, [])
            part = held_for(outcome, memory_id)
            if all(o.outcome_id != part.outcome_id for o in waiting):
                waiting.append(part)

    async def holding(self, pairs: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        return {(a, m) for a, m in pairs if self._held.get(a, {}).get(m)}

    async def held_outcomes(self, agent_id: str, memory_ids: Sequence[str]) -> list[Outcome]:
        held = self._held.get(agent_id, {})
        return [o for memory_id in memory_ids for o in held.get(memory_id, [])]

    async def release_held_outcomes(self, agent_id: str, memory_ids: Sequence[str]) -> None:
        held = self._held.get(agent_id, {})
        for memory_id in memory_ids:
            held.pop(memory_id, None)


def _keep_latest(doc: Hash, ts_ms: int) -> None:
    if float(_text(doc.get("last_seen", "0"))) < ts_ms:
        doc["last_seen"] = str(ts_ms)


def _stored(doc: Hash) -> StoredMemory:
    return stored_memory({name: doc[name] for name in RETURN_FIELDS if name in doc})
