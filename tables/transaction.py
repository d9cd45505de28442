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

A unit can be fenced (`fence`): it commits only if a stream's newest entry is
still the one the writer built on. The unit's pipeline WATCHes the stream, reads
its head, and sends MULTI/EXEC only when the head is as expected; EXEC fails if
the stream moved in between. Every mutation of an agent's state appends to its
witness stream, so the stream's head is the agent's version: a worker that read
the agent's state, was dropped from the group during a long batch and commits
afterwards (while the partition's new owner applied the same entries) writes
nothing (`FenceBroken`, retried as an outage; the retry finds the entries
decided).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

from redis.crc import key_slot
from redis.exceptions import AskError, ResponseError, WatchError

from grimoire.tables.exceptions import FenceBroken
from grimoire.tables.redis_client import ensure_slots, is_cluster, refresh_slots, slot_master
from grimoire.tables.routing import agent_slot

__all__ = [
    "AgentTransactions",
    "StreamFence",
    "agent_transaction",
    "key_transaction",
]

# KEYS: streams. For each, the `ARGV[1]` field of its newest entry, or false when
# the stream is empty or absent. Read-only: it runs between WATCH and MULTI.
_STREAM_HEADS: Final = """
local heads = {}
for i, key in ipairs(KEYS) do
  local newest = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)
  heads[i] = false
  if #newest > 0 then
    local fields = newest[1][2]
    for j = 1, #fields, 2 do
      if fields[j] == ARGV[1] then heads[i] = fields[j + 1] end
    end
  end
end
return heads
"""


@dataclass(frozen=True, slots=True)
class StreamFence:
    """A unit commits only while the stream at `key` has as its newest entry one
    whose `field` is `expected` (None: the stream is empty)."""

    key: str
    field: str
    expected: str | None


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
        # Per pipeline (by id): the fences its MULTI/EXEC waits behind.
        self._fences: dict[int, list[StreamFence]] = {}

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

    def fence(self, agent_id: str, fence: StreamFence) -> None:
        """Commit `agent_id`'s unit only while `fence` holds (see the module docstring)."""
        self._fences.setdefault(id(self.agent(agent_id)), []).append(fence)

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
            replies = await self._fenced(self._one)
            return dict.fromkeys(self._seen, replies)
        if self._shared is not None:
            await self._shared.execute()
        agents = sorted(self._agents)
        # Agents' units are independent: sent side by side, one per slot's master.
        # Every one is waited for, so a failure (the caller retries the batch, which
        # each agent's marks make idempotent) leaves nothing in flight.
        results = await asyncio.gather(
            *(self._fenced(self._agents[a]) for a in agents), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                if isinstance(result, ResponseError):
                    await _after_moved(self._redis, result)
                raise result
        return {agent: list(replies) for agent, replies in zip(agents, results, strict=True)}

    async def _fenced(self, pipe: Any) -> list[Any]:
        fences = self._fences.get(id(pipe), [])
        if not fences:
            return list(await pipe.execute())
        keys = [fence.key for fence in fences]
        # Between WATCH and MULTI the pipeline runs commands at once (redis-py); what
        # was queued before is sent inside MULTI/EXEC by `execute`.
        await pipe.watch(*keys)
        try:
            heads: list[Any] = []
            for field_name in sorted({fence.field for fence in fences}):
                chosen = [fence for fence in fences if fence.field == field_name]
                found = await pipe.eval(
                    _STREAM_HEADS, len(chosen), *[fence.key for fence in chosen], field_name
                )
                heads.extend(zip(chosen, found, strict=True))
            for fence, head in heads:
                stored = None if head in (None, False) else _text(head)
                if stored != fence.expected:
                    raise FenceBroken(
                        f"{fence.key} moved: its head is {stored!r}, this writer built on "
                        f"{fence.expected!r}"
                    )
        except BaseException:
            await pipe.reset()
            raise
        try:
            return list(await pipe.execute())
        except WatchError as exc:
            raise FenceBroken(f"{', '.join(keys)} moved before the commit") from exc


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
