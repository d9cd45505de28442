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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

from redis.crc import key_slot
from redis.exceptions import AskError, ResponseError

from grimoire.tables.redis_client import ensure_slots, is_cluster, refresh_slots, slot_master
from grimoire.tables.routing import agent_slot

__all__ = ["AgentTransactions", "TransactionPart", "agent_transaction", "key_transaction"]


@asynccontextmanager
async def agent_transaction(redis: Any, agent_id: str) -> AsyncIterator[Any]:
    """A MULTI/EXEC pipeline over one agent's keys: on a cluster, on the master owning
    the agent's slot (`grimoire.tables.redis_client.slot_master`)."""
    async with _slot_transaction(redis, lambda: agent_slot(agent_id)) as pipe:
        yield pipe


@asynccontextmanager
async def key_transaction(redis: Any, key: str) -> AsyncIterator[Any]:
    """A MULTI/EXEC pipeline over one key (the key store's, which carry no tag)."""
    async with _slot_transaction(redis, lambda: int(key_slot(key.encode()))) as pipe:
        yield pipe


@asynccontextmanager
async def _slot_transaction(redis: Any, slot: Any) -> AsyncIterator[Any]:
    if not is_cluster(redis):
        async with redis.pipeline(transaction=True) as pipe:
            yield pipe
        return
    await ensure_slots(redis)
    try:
        async with slot_master(redis, slot()).pipeline(transaction=True) as pipe:
            yield pipe
    except ResponseError as exc:
        await _after_moved(redis, exc)
        raise


async def _after_moved(redis: Any, exc: ResponseError) -> None:
    """A slot moved under a transaction (MOVED/ASK, an outage the fold retries):
    read the slot map again, so the retry reaches the new master."""
    if isinstance(exc, AskError):  # MovedError is one too
        await refresh_slots(redis)


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
        # On a cluster: `open`, which reads the slot map first.
        self._redis = redis
        self._cluster = is_cluster(redis)
        self._one: Any = None
        self._agents: dict[str, Any] = {}
        self._shared: Any = None
        self._seen: set[str] = set()

    @classmethod
    async def open(cls, redis: Any) -> AgentTransactions:
        if is_cluster(redis):
            await ensure_slots(redis)
        return cls(redis)

    def agent(self, agent_id: str) -> Any:
        """The pipeline of `agent_id`'s atomic unit (on a cluster, on the master of
        its slot: `grimoire.tables.redis_client.slot_master`)."""
        self._seen.add(agent_id)
        if not self._cluster:
            return self._single()
        pipe = self._agents.get(agent_id)
        if pipe is None:
            master = slot_master(self._redis, agent_slot(agent_id))
            pipe = self._agents[agent_id] = master.pipeline(transaction=True)
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
                if isinstance(result, ResponseError):
                    await _after_moved(self._redis, result)
                raise result
        return {agent: list(replies) for agent, replies in zip(agents, results, strict=True)}
