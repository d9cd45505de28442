"""Transactions over agents' state, on one Redis or a Redis Cluster.

The apply loop's effects of a mutation (its witness record, the events that tell
the world about it) must be stored with the mutation or not at all: a worker
killed between the two would leave a decision nobody hears of, and a chain with a
gap. A store that commits a mutation takes such parts (`TransactionPart`) and
queues them in its own `AgentTransactions`; a store with no transactions (the
in-memory references) applies them right after its own writes.

`AgentTransactions` hands out a pipeline per agent (`agent`) and one for
deployment-wide writes (`shared`: the registry of known agents, metrics, the list
of agents with an outbox):

- on one Redis they are all the same MULTI/EXEC: everything commits together, as
  one transaction over every agent of a batch;
- on a Redis Cluster each agent's writes are a MULTI/EXEC of their own (every key
  of an agent's state is in its hash tag's slot, `grimoire.tables.keyspace`), and
  the shared writes go first, outside any transaction. So a shared write may land
  without the agents' (a crash in between): what goes there is write-ahead or
  derived (an agent listed as known before its first state, an outbox list that is
  found empty, a counter counted once more), never something a decision reads.

Each agent's state is so always written atomically; what a batch of several agents
no longer gets on a cluster is atomicity across agents, which nothing relies on
(each agent's entries are applied and marked on their own).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from grimoire.tables.redis_client import is_cluster

__all__ = ["AgentTransactions", "TransactionPart"]


class TransactionPart(Protocol):
    def queue(self, tx: AgentTransactions) -> None:
        """Queue the writes in a store's transaction (each agent's on `tx.agent`)."""
        ...

    async def apply_alone(self) -> None:
        """Write them with no pipeline (stores that have no transactions)."""
        ...


class AgentTransactions:
    """Pipelines for one commit: a MULTI/EXEC per agent on a cluster, one for all on
    one Redis (see the module's docstring). Queue, then `execute` once."""

    def __init__(self, redis: Any) -> None:
        self._redis = redis
        self._cluster = is_cluster(redis)
        self._one: Any = None
        self._agents: dict[str, Any] = {}
        self._shared: Any = None
        self._seen: set[str] = set()

    def agent(self, agent_id: str) -> Any:
        """The pipeline of `agent_id`'s atomic unit."""
        self._seen.add(agent_id)
        if not self._cluster:
            return self._single()
        pipe = self._agents.get(agent_id)
        if pipe is None:
            pipe = self._agents[agent_id] = self._redis.pipeline(transaction=True)
        return pipe

    @property
    def shared(self) -> Any:
        """The pipeline of deployment-wide writes (write-ahead or derived only)."""
        if not self._cluster:
            return self._single()
        if self._shared is None:
            self._shared = self._redis.pipeline(transaction=False)
        return self._shared

    def _single(self) -> Any:
        if self._one is None:
            self._one = self._redis.pipeline(transaction=True)
        return self._one

    async def execute(self) -> dict[str, list[Any]]:
        """Run what was queued; each agent's replies, in the order queued (on one
        Redis every agent gets the one transaction's replies)."""
        if not self._cluster:
            if self._one is None:
                return {}
            replies = list(await self._one.execute())
            return dict.fromkeys(self._seen, replies)
        if self._shared is not None:
            await self._shared.execute()
        agents = sorted(self._agents)
        # Agents' units are independent: sent side by side, one per slot's master.
        # Every one is waited for, so a failure (the caller retries the batch, which
        # each agent's marks make idempotent) leaves nothing in flight.
        results = await asyncio.gather(
            *(self._agents[a].execute() for a in agents), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return {agent: list(replies) for agent, replies in zip(agents, results, strict=True)}
