"""A fenced transaction commits only on the witness head its writer built on.

Two writers of one agent, as after a rebalance: the partition's new owner applies
entries while a worker the group dropped still holds a batch decided on the state
before. Whichever commits second must write nothing: its unit waits behind the
agent's witness head (`AgentTransactions.fence`, queued by `WitnessPart`), so a
head that moved since the writer read it aborts the whole unit, the decision
with its record. Runs on one Redis and on a cluster alike (`make test-cluster`).
"""

from __future__ import annotations

import uuid

import pytest
from redis.asyncio import Redis

from grimoire.streams.trust.witness import WitnessRecord
from grimoire.tables.exceptions import FenceBroken, is_outage
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.transaction import AgentTransactions
from grimoire.tables.trust.witness_store import RedisWitnessLog, Witness, WitnessPart

pytestmark = pytest.mark.integration


async def _decide(
    redis: Redis, log: RedisWitnessLog, record: WitnessRecord, decided_key: str, value: str
) -> None:
    """One writer's unit: a decision and the record witnessing it."""
    tx = await AgentTransactions.open(redis)
    tx.agent(record.agent_id).hset(decided_key, "event-1", value)
    WitnessPart(log, [record]).queue(tx)
    await tx.execute()


async def _record(witness: Witness, agent: str, offset: int) -> WitnessRecord:
    return await witness.next(
        agent, journal_partition=0, journal_offset=offset, op="ingest", ids=["m"], fields={}
    )


async def test_the_second_writer_of_a_moved_head_writes_nothing(redis_client: Redis) -> None:
    prefix = f"fence{uuid.uuid4().hex[:8]}"
    keys = Keyspace(prefix)
    agent = "fenced-agent"
    decided = keys.decided(agent)
    log = RedisWitnessLog(redis_client, prefix)
    # Each writer holds its own kept heads, as two workers do.
    dropped, owner = Witness(log), Witness(log)
    # Both read the agent before either writes: the empty chain.
    await dropped.head(agent)
    await owner.head(agent)
    late = await _record(dropped, agent, 7)
    await _decide(redis_client, log, await _record(owner, agent, 7), decided, "owner")

    with pytest.raises(FenceBroken) as raised:
        await _decide(redis_client, log, late, decided, "dropped")
    assert is_outage(raised.value)  # retried: the retry reads what the owner did
    assert await redis_client.hget(decided, "event-1") == b"owner"
    assert await log.length(agent) == 1

    # The same writer, its heads read again, chains on and commits.
    dropped.invalidate(agent)
    await dropped.head(agent)
    await _decide(redis_client, log, await _record(dropped, agent, 8), decided, "after")
    assert await redis_client.hget(decided, "event-1") == b"after"
    assert await log.length(agent) == 2


async def test_a_fence_that_holds_commits_every_agent(redis_client: Redis) -> None:
    prefix = f"fence{uuid.uuid4().hex[:8]}"
    keys = Keyspace(prefix)
    log = RedisWitnessLog(redis_client, prefix)
    witness = Witness(log)
    agents = ["fence-a", "fence-b", "fence-c"]
    for round_ in range(2):
        tx = await AgentTransactions.open(redis_client)
        records = []
        for agent in agents:
            tx.agent(agent).hset(keys.decided(agent), f"event-{round_}", "x")
            records.append(await _record(witness, agent, round_))
        WitnessPart(log, records).queue(tx)
        await tx.execute()
    for agent in agents:
        assert await redis_client.hlen(keys.decided(agent)) == 2
        assert await log.length(agent) == 2


async def test_a_fence_on_one_agent_moved_aborts_its_unit(redis_client: Redis) -> None:
    """On one Redis a batch is one unit (all its agents abort together); on a cluster
    each agent is its own, and only the moved agent's aborts."""
    prefix = f"fence{uuid.uuid4().hex[:8]}"
    keys = Keyspace(prefix)
    log = RedisWitnessLog(redis_client, prefix)
    witness, other = Witness(log), Witness(log)
    moved, still = "fence-moved", "fence-still"
    tx = await AgentTransactions.open(redis_client)
    records = []
    for agent in (moved, still):
        tx.agent(agent).hset(keys.decided(agent), "event", "x")
        records.append(await _record(witness, agent, 1))
    WitnessPart(log, records).queue(tx)
    # Another writer appends to one agent's chain between staging and commit.
    await other.head(moved)
    await log.append(await _record(other, moved, 1))
    with pytest.raises(FenceBroken):
        await tx.execute()
    assert await redis_client.hlen(keys.decided(moved)) == 0
    assert await log.length(moved) == 1
