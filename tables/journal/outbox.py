"""The publication outbox: events the fold committed, until the broker has them.

A decision's memory-event and witness event are queued in the same transaction
as the decision (`Outbox.part`), then published; once the producer has flushed
them, they are trimmed. A worker killed in between leaves them queued, and the
partition's next owner publishes them before applying anything: every decision
is heard of at least once. A kill after the flush and before the trim publishes
them again, byte for byte (each event names its candidate, memory or witness
sequence, so a consumer recognises the copy).

One list per agent (`Keyspace.outbox`, in the agent's slot, so it joins the agent's
transaction on a Redis Cluster too), and per journal partition the set of its
agents that may have one (`Keyspace.outbox_agents`), added before the transaction
that fills the list (a crash in between leaves an agent listed with an empty
list). The partition's single apply loop is the only writer of its agents' lists,
so what it finds there at the start of a batch is exactly what an earlier owner
left behind. Entries come back agent by agent (sorted), each agent's oldest first:
an agent's events keep their order; two agents' never had one to keep.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from redis.asyncio import Redis

from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.outbox_entry import (
    OutboxEntry,
    decode_outbox_entry,
    encode_outbox_entry,
)
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.ports.transaction import TransactionPart
from grimoire.tables.redis_client import is_cluster
from grimoire.tables.transaction import AgentTransactions

__all__ = ["OutboxEntry", "RedisOutbox", "sent_counts"]


def sent_counts(entries: Sequence[OutboxEntry]) -> Counter[str]:
    """How many of `entries` each agent (the entry's key) has."""
    return Counter(entry.key for entry in entries)


class _ListPart:
    def __init__(
        self, redis: Redis, keys: Keyspace, journal_partition: int, entries: Sequence[OutboxEntry]
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._partition = journal_partition
        self._values: dict[str, list[bytes]] = {}
        for entry in entries:
            self._values.setdefault(entry.key, []).append(encode_outbox_entry(entry))

    def queue(self, tx: AgentTransactions) -> None:
        if not self._values:
            return
        # Listed first (write-ahead on a cluster): a list nobody lists would never
        # be published by the partition's next owner.
        tx.shared.sadd(self._keys.outbox_agents(self._partition), *sorted(self._values))
        for agent_id, values in sorted(self._values.items()):
            tx.agent(agent_id).rpush(self._keys.outbox(agent_id), *values)

    async def apply_alone(self) -> None:
        if not self._values:
            return
        await self._redis.sadd(self._keys.outbox_agents(self._partition), *sorted(self._values))
        for agent_id, values in sorted(self._values.items()):
            await self._redis.rpush(self._keys.outbox(agent_id), *values)


# The published entries trimmed from each agent's list and the emptied lists
# unlisted, in one round trip. KEYS: the partition's set of listed agents, then the
# agents' lists; ARGV: how many to trim from each list, then each list's agent.
_REMOVE = """
local n = #KEYS - 1
for i = 1, n do
  redis.call('LTRIM', KEYS[i + 1], ARGV[i], -1)
  if redis.call('LLEN', KEYS[i + 1]) == 0 then redis.call('SREM', KEYS[1], ARGV[n + i]) end
end
return n
"""


class RedisOutbox:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self.keys = Keyspace(prefix)
        self._remove = None if is_cluster(redis) else redis.register_script(_REMOVE)

    def part(self, journal_partition: int, entries: Sequence[OutboxEntry]) -> TransactionPart:
        return _ListPart(self._redis, self.keys, journal_partition, entries)

    async def pending(self, journal_partition: int) -> list[OutboxEntry]:
        members = await self._redis.smembers(self.keys.outbox_agents(journal_partition))
        agents = sorted(text_of(m) for m in members)
        if not agents:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for agent_id in agents:
                pipe.lrange(self.keys.outbox(agent_id), 0, -1)
            lists = await pipe.execute()
        # An agent listed with nothing queued is unlisted: only this partition's
        # apply loop (the caller) could queue more, and it lists the agent first.
        empty = [agent for agent, rows in zip(agents, lists, strict=True) if not rows]
        if empty:
            await self._redis.srem(self.keys.outbox_agents(journal_partition), *empty)
        return [decode_outbox_entry(row) for rows in lists for row in rows]

    async def remove(self, journal_partition: int, counts: Mapping[str, int]) -> None:
        trimmed = {agent: n for agent, n in counts.items() if n > 0}
        if not trimmed:
            return
        agents = sorted(trimmed)
        if self._remove is not None:
            listed = self.keys.outbox_agents(journal_partition)
            await self._remove(
                keys=[listed, *(self.keys.outbox(agent_id) for agent_id in agents)],
                args=[*(trimmed[agent_id] for agent_id in agents), *agents],
            )
            return
        # On a cluster the set and the lists live in different slots: trimmed first,
        # then the emptied lists unlisted.
        async with self._redis.pipeline(transaction=False) as pipe:
            for agent_id in agents:
                pipe.ltrim(self.keys.outbox(agent_id), trimmed[agent_id], -1)
                pipe.llen(self.keys.outbox(agent_id))
            replies = await pipe.execute()
        # Unlisted once empty, so the next drain reads nothing (the caller is the only
        # writer of these lists, and lists an agent again before queueing for it).
        empty = [a for a, length in zip(agents, replies[1::2], strict=True) if not length]
        if empty:
            await self._redis.srem(self.keys.outbox_agents(journal_partition), *empty)
