"""On a Redis Cluster every agent's transaction is single-slot.

`RedisMemoryStore.commit` writes a batch of several agents with their witness
records and outbox events. Against a recording stand-in for a cluster client, each
agent's MULTI/EXEC must touch only keys in that agent's slot (a real cluster would
refuse the transaction with CROSSSLOT), and what goes beside them (`shared`) only
deployment-wide keys. The real cluster runs the same path in `make test-cluster`.
"""

from __future__ import annotations

from typing import Any

import pytest
from redis.crc import key_slot

from grimoire.streams.model.field_state import FieldState
from grimoire.streams.trust.witness import GENESIS_HASH, WitnessRecord
from grimoire.streams.write.changes import (
    AggregateFold,
    Decision,
    Reinforcement,
    StatsDelta,
    WriteBatch,
)
from grimoire.tables import transaction as transaction_module
from grimoire.tables.codec.outbox_entry import OutboxEntry
from grimoire.tables.journal.outbox import RedisOutbox
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.routing import agent_slot
from grimoire.tables.trust.witness_store import RedisWitnessLog, WitnessPart
from tests.support.builders import memory_candidate, memory_record
from tests.support.vectors import unit

T0 = 1_790_000_000_000
AGENTS = ("golem-1", "fleet-a/golem-2")
# Commands whose first argument is their one key.
SINGLE_KEY = {"hset", "hdel", "zadd", "zrem", "sadd", "rpush", "set", "hincrby", "hincrbyfloat"}


class _Script:
    def __init__(self, body: str) -> None:
        self.script = body
        self.sha = f"{abs(hash(body)):040x}"[:40]


class RecordingPipeline:
    def __init__(self, transaction: bool) -> None:
        self.transaction = transaction
        self.keys: list[str] = []
        self.scripts: set[Any] = set()
        self.watched: list[str] = []

    async def watch(self, *keys: str) -> None:
        # The fence's keys are the agent's too: WATCH runs on its slot's master.
        self.watched += keys
        self.keys += keys

    async def reset(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        if name == "eval" and self.watched:

            async def heads(*args: Any) -> list[Any]:
                return [False] * int(args[1])  # every chain empty, as fenced

            return heads

        def queue(*args: Any, **kwargs: Any) -> None:
            if name in ("evalsha", "eval"):
                self.keys += [str(k) for k in args[2 : 2 + int(args[1])]]
            elif name in SINGLE_KEY:
                self.keys.append(str(args[0]))
            else:
                raise AssertionError(f"unexpected command {name}")

        return queue

    async def execute(self) -> list[Any]:
        return []


class RecordingCluster:
    def __init__(self) -> None:
        self.pipelines: list[RecordingPipeline] = []

    def register_script(self, body: str) -> _Script:
        return _Script(body)

    def pipeline(self, transaction: bool = True) -> RecordingPipeline:
        pipe = RecordingPipeline(transaction)
        self.pipelines.append(pipe)
        return pipe


def _record(agent: str, event: str, text: str, **kwargs: Any) -> Any:
    candidate = memory_candidate(
        agent,
        event,
        text,
        ts=T0,
        session_id="s-1",
        keys=("tool:rpc", "err:timeout"),
        **kwargs,
    )
    return memory_record(candidate, unit(1.0), confidence=0.6, quality=0.4)


def _batch() -> WriteBatch:
    records, folds, reinforcements, decisions, fields, stats = [], [], [], [], [], []
    for n, agent in enumerate(AGENTS):
        first = _record(agent, f"{agent}-e1", "disk full on node seven")
        seed = _record(agent, f"{agent}-e2", "heartbeat ok")
        records.append(first)
        folds.append(AggregateFold(agent, f"agg-{n}", first.id, seed.id, T0 + 1, seed))
        reinforcements.append(Reinforcement(agent, first.id, f"m-{n}", T0 + 2, f"{agent}-e3"))
        decisions.append(Decision(agent, first.id, "admit"))
        fields.append(FieldState(agent_id=agent, watermark_ms=T0 + 2))
        stats.append(StatsDelta(agent, (("candidates", 1), ("quality_sum", 0.5))))
    return WriteBatch(
        records=tuple(records),
        folds=tuple(folds),
        reinforcements=tuple(reinforcements),
        decisions=tuple(decisions),
        fields=tuple(fields),
        stats=tuple(stats),
        metrics=(("ingest_batches", 1.0),),
    )


def _witness(agent: str) -> WitnessRecord:
    return WitnessRecord(
        agent_id=agent,
        seq=1,
        journal_partition=0,
        journal_offset=7,
        op="ingest",
        ids=("m1",),
        fields_digest="0" * 64,
        prev_hash=GENESIS_HASH,
        hash="1" * 64,
    )


async def test_a_batch_of_several_agents_is_one_single_slot_transaction_per_agent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transaction_module, "is_cluster", lambda redis: True)

    async def slots_known(redis: object) -> None:
        return None

    masters: list[int] = []

    def master_of(redis: RecordingCluster, slot: int) -> RecordingCluster:
        masters.append(slot)  # each agent's MULTI/EXEC goes to its slot's master
        return redis

    monkeypatch.setattr(transaction_module, "ensure_slots", slots_known)
    monkeypatch.setattr(transaction_module, "slot_master", master_of)
    redis = RecordingCluster()
    store = RedisMemoryStore(redis, "gm", 8)  # type: ignore[arg-type]
    also = [
        WitnessPart(RedisWitnessLog(redis, "gm"), [_witness(a) for a in AGENTS]),  # type: ignore[arg-type]
        RedisOutbox(redis, "gm").part(  # type: ignore[arg-type]
            3, [OutboxEntry("gm.memory-events", a, b"{}") for a in AGENTS]
        ),
    ]
    await store.commit(_batch(), also)

    units = [p for p in redis.pipelines if p.transaction]
    shared = [p for p in redis.pipelines if not p.transaction]
    assert len(units) == len(AGENTS)
    seen = set()
    for unit_ in units:
        slots = {key_slot(key.encode()) for key in unit_.keys}
        assert len(slots) == 1, unit_.keys
        (slot,) = slots
        seen.add(slot)
        # The agent's state: records, graph, counters, field state, watermark, its
        # witness record and its outbox all went into its transaction.
        agent = next(a for a in AGENTS if agent_slot(a) == slot)
        keys = Keyspace("gm")
        for expected in (
            keys.field_state(agent),
            keys.watermark(agent),
            keys.stats(agent),
            keys.decided(agent),
            keys.witness(agent),
            keys.outbox(agent),
            keys.nodes(agent),
        ):
            assert expected in unit_.keys
        assert unit_.watched == [keys.witness(agent)]  # fenced on its own chain
    assert seen == {agent_slot(a) for a in AGENTS} == set(masters)
    (beside,) = shared
    keys = Keyspace("gm")
    assert set(beside.keys) == {keys.agents, keys.metrics, keys.outbox_agents(3)}


async def test_on_one_redis_the_batch_is_still_one_transaction() -> None:
    redis = RecordingCluster()
    store = RedisMemoryStore(redis, "gm", 8)  # type: ignore[arg-type]
    await store.commit(_batch())
    assert [p.transaction for p in redis.pipelines] == [True]
