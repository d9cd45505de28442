"""Learning's state: what runs recalled, the learned weights, the causal graph.

Keys (all per agent, see `Keyspace`):
    run-recalls   HASH run id → the run's recalled memories and their factor values
    learned-weights  STRING the learned rerank weights
    causal        HASH cause<US>effect → weight|evidence|last block
    causal-out    HASH cause → its effects;  causal-in  HASH effect → its causes

Only the apply loop writes here, in journal order. What a run's outcome changes
is built as a `TransactionPart` (`outcome_part`) so the memory store commits it
with the run's credits in one MULTI/EXEC.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from grimoire.streams.learn.causal import CausalEdge
from grimoire.streams.learn.hedge import LearnedWeights
from grimoire.streams.learn.runs import EndedRun
from grimoire.tables.codec.learning import (
    edge_field,
    edge_from_stored,
    edge_value,
    ended_from_stored,
    ended_value,
    ids_from_stored,
    ids_value,
    recalls_from_stored,
    recalls_value,
    weights_from_stored,
    weights_value,
)
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.ports.learn import Recalls
from grimoire.tables.ports.transaction import TransactionPart
from grimoire.tables.transaction import AgentTransactions, agent_transaction

__all__ = ["LearningWrite", "RedisLearningStore"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LearningWrite:
    """What one outcome changes in the learning store (absolute values)."""

    agent_id: str
    run_id: str = ""  # its recalls are dropped once learned from
    edges: tuple[CausalEdge, ...] = ()
    weights: LearnedWeights | None = None
    ended: EndedRun | None = None  # the run's outcome, kept for members written later


class _RedisPart:
    def __init__(
        self, agent_id: str, ops: list[tuple[str, tuple[Any, ...], dict[str, Any]]], redis: Redis
    ):
        self._agent = agent_id
        self._ops = ops
        self._redis = redis

    def queue(self, tx: AgentTransactions) -> None:
        self._queue_on(tx.agent(self._agent))

    def _queue_on(self, pipe: Any) -> None:
        for name, args, kwargs in self._ops:
            getattr(pipe, name)(*args, **kwargs)

    async def apply_alone(self) -> None:
        async with agent_transaction(self._redis, self._agent) as pipe:
            self._queue_on(pipe)
            await pipe.execute()


class RedisLearningStore:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self.keys = Keyspace(prefix)

    async def record_recalls(self, agent_id: str, run_id: str, recalls: Mapping[str, Any]) -> None:
        if not run_id or not recalls:
            return
        key = self.keys.run_recalls(agent_id)
        held = recalls_from_stored(await self._redis.hget(key, run_id))
        merged = {**{m: dict(f) for m, f in recalls.items()}, **held}
        if merged != held:
            await self._redis.hset(key, run_id, recalls_value(merged))

    async def run_recalls(self, agent_id: str, run_id: str) -> Recalls:
        if not run_id:
            return {}
        return recalls_from_stored(await self._redis.hget(self.keys.run_recalls(agent_id), run_id))

    async def learned_weights(self, agent_id: str) -> LearnedWeights | None:
        return weights_from_stored(await self._redis.get(self.keys.learned_weights(agent_id)))

    async def ended_runs(self, agent_id: str, run_ids: Sequence[str]) -> dict[str, EndedRun]:
        if not run_ids:
            return {}
        ids = sorted(set(run_ids))
        values = await self._redis.hmget(self.keys.ended_runs(agent_id), ids)
        return {
            run_id: ended_from_stored(run_id, value)
            for run_id, value in zip(ids, values, strict=True)
            if value is not None
        }

    async def edges(
        self, agent_id: str, pairs: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], CausalEdge]:
        if not pairs:
            return {}
        fields = [edge_field(c, e) for c, e in pairs]
        values = await self._redis.hmget(self.keys.causal_edges(agent_id), fields)
        return {
            pair: edge_from_stored(name, value)
            for pair, name, value in zip(pairs, fields, values, strict=True)
            if value is not None
        }

    async def edges_of(self, agent_id: str, nodes: Sequence[str]) -> dict[str, list[CausalEdge]]:
        if not nodes:
            return {}
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hmget(self.keys.causal_effects(agent_id), list(nodes))
            pipe.hmget(self.keys.causal_causes(agent_id), list(nodes))
            effects, causes = await pipe.execute()
        pairs: dict[str, list[tuple[str, str]]] = {}
        for node, out, into in zip(nodes, effects, causes, strict=True):
            pairs[node] = [(node, e) for e in ids_from_stored(out)] + [
                (c, node) for c in ids_from_stored(into)
            ]
        found = await self.edges(agent_id, sorted({p for ps in pairs.values() for p in ps}))
        return {
            node: sorted(
                (found[p] for p in ps if p in found), key=lambda edge: (edge.cause, edge.effect)
            )
            for node, ps in pairs.items()
        }

    async def out_edges(self, agent_id: str, causes: Sequence[str]) -> dict[str, list[CausalEdge]]:
        if not causes:
            return {}
        effects = await self._redis.hmget(self.keys.causal_effects(agent_id), list(causes))
        pairs = {
            c: [(c, e) for e in ids_from_stored(out)]
            for c, out in zip(causes, effects, strict=True)
        }
        found = await self.edges(agent_id, sorted({p for ps in pairs.values() for p in ps}))
        return {c: [found[p] for p in sorted(ps) if p in found] for c, ps in pairs.items()}

    async def all_edges(self, agent_id: str) -> list[CausalEdge]:
        stored = await self._redis.hgetall(self.keys.causal_edges(agent_id))
        edges = [edge_from_stored(field, value) for field, value in stored.items()]
        return sorted(edges, key=lambda edge: (edge.cause, edge.effect))

    async def outcome_part(self, write: LearningWrite) -> TransactionPart:
        agent = write.agent_id
        ops: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        if write.edges:
            ops.append(
                (
                    "hset",
                    (self.keys.causal_edges(agent),),
                    {
                        "mapping": {
                            edge_field(e.cause, e.effect): edge_value(e) for e in write.edges
                        }
                    },
                )
            )
            causes = sorted({e.cause for e in write.edges})
            effects = sorted({e.effect for e in write.edges})
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.hmget(self.keys.causal_effects(agent), causes)
                pipe.hmget(self.keys.causal_causes(agent), effects)
                outs, ins = await pipe.execute()
            out_lists = {c: set(ids_from_stored(v)) for c, v in zip(causes, outs, strict=True)}
            in_lists = {e: set(ids_from_stored(v)) for e, v in zip(effects, ins, strict=True)}
            for edge in write.edges:
                out_lists[edge.cause].add(edge.effect)
                in_lists[edge.effect].add(edge.cause)
            ops.append(
                (
                    "hset",
                    (self.keys.causal_effects(agent),),
                    {"mapping": {c: ids_value(v) for c, v in out_lists.items()}},
                )
            )
            ops.append(
                (
                    "hset",
                    (self.keys.causal_causes(agent),),
                    {"mapping": {e: ids_value(v) for e, v in in_lists.items()}},
                )
            )
        if write.weights is not None:
            ops.append(
                ("set", (self.keys.learned_weights(agent), weights_value(write.weights)), {})
            )
        if write.run_id:
            ops.append(("hdel", (self.keys.run_recalls(agent), write.run_id), {}))
        if write.ended is not None:
            ops.append(
                (
                    "hset",
                    (self.keys.ended_runs(agent), write.ended.run_id, ended_value(write.ended)),
                    {},
                )
            )
        return _RedisPart(agent, ops, self._redis)
