"""The agent digest and the agent's footprint, against the real Redis.

The same store calls under two prefixes, at different wall-clock times and by
different workers, give the same digest; any change to a stored field that does
not come from the wall clock changes it; another agent's writes (one whose id
extends this agent's with ':' included, whose keys match this agent's SCAN
patterns) leave it alone. The footprint names every family the writes touched.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import orjson
import pytest
from redis.asyncio import Redis

from grimoire.infra.settings import Settings
from grimoire.streams.learn.outcomes import Outcome, OutcomeKind
from grimoire.streams.maintenance.compaction import CompactionPlan
from grimoire.streams.maintenance.schedule import Task
from grimoire.streams.model.field_state import FieldState
from grimoire.streams.model.records import HyperedgeRef, MemoryRecord, Role
from grimoire.streams.write.changes import Decision, Reinforcement, StatsDelta, WriteBatch
from grimoire.tables.codec.watermark import WATERMARK_MEMBER, WINDOW_MEMBER
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.compaction_store import RedisCompactionStore
from grimoire.tables.maintenance.ledger import MaintenanceLedgerStore
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.redis_client import create_redis
from grimoire.tables.trust.agent_keys import agent_footprint, agent_keys, agent_members
from grimoire.tables.trust.digest import agent_digest
from grimoire.tables.trust.witness_store import RedisWitnessLog, Witness
from tests.support.builders import memory_candidate, memory_record
from tests.support.stored import drop_deployment
from tests.support.vectors import unit

pytestmark = pytest.mark.integration

DIMS = 8
T0 = 1_790_000_000_000
A = "agent-a"
RIVAL = "agent-a:tool"  # its nexus keys match A's SCAN pattern: gm:nexus:agent-a:*
B = "agent-b"


@dataclass
class Deployment:
    redis: Redis
    prefix: str
    store: RedisMemoryStore

    @property
    def keys(self) -> Keyspace:
        return Keyspace(self.prefix)

    async def digest(self, agent: str = A) -> str:
        return (await agent_digest(self.redis, self.prefix, agent)).sha256


@pytest.fixture
async def open_deployment(
    settings: Settings,
) -> AsyncIterator[Callable[[int], Awaitable[Deployment]]]:
    opened: list[Deployment] = []

    async def open_one(clock_ms: int) -> Deployment:
        redis = create_redis(settings.redis.url, 4)
        prefix = f"dg{uuid.uuid4().hex[:10]}"
        store = RedisMemoryStore(redis, prefix, DIMS, clock_ms=lambda: clock_ms)
        await store.ensure_schema()
        deployment = Deployment(redis, prefix, store)
        opened.append(deployment)
        return deployment

    yield open_one
    for deployment in opened:
        await drop_deployment(deployment.redis, deployment.prefix)


def record(
    agent: str, event: str, text: str, ts: int, keys: tuple[str, ...], role: Role
) -> MemoryRecord:
    candidate = memory_candidate(
        agent,
        event,
        text,
        ts=ts,
        session_id="s-1",
        keys=keys,
        tags=("ops/disk",),
        hyperedge=HyperedgeRef("turn:t-1", role),
        tick=3,
    )
    return memory_record(candidate, unit(1.0, float(len(text) % 5)), confidence=0.6, quality=0.4)


def agent_batch(agent: str) -> tuple[WriteBatch, list[MemoryRecord]]:
    records = [
        record(
            agent,
            "e1",
            "disk full on node seven",
            T0,
            ("tag:ops/disk", "err:timeout"),
            Role.TRIGGER,
        ),
        record(agent, "e2", "cleared the tmp volume", T0 + 10, ("tag:ops/disk",), Role.ACTION),
        record(agent, "e3", "rpc timed out twice", T0 + 20, ("tool:rpc",), Role.OUTCOME),
    ]
    batch = WriteBatch(
        records=tuple(records),
        reinforcements=(Reinforcement(agent, records[0].id, "dup", T0 + 30),),
        decisions=tuple(Decision(agent, r.id, "admit") for r in records),
        fields=(
            FieldState(
                agent, watermark_ms=T0 + 30, tick=3, regime="calm", focus=(("tag:ops/disk", 1.0),)
            ),
        ),
        stats=(StatsDelta(agent, (("admit", 3), ("candidates", 4), ("quality_sum", 1.2))),),
    )
    return batch, records


async def write_state(
    d: Deployment, agent: str, *, worker: str, elapsed_ms: float
) -> list[MemoryRecord]:
    """The same store calls whatever the deployment; only the worker id and the
    task's duration (operational readings) differ."""
    batch, records = agent_batch(agent)
    await d.store.commit(batch)
    outcome = Outcome(f"o-{agent}", agent, T0 + 40, OutcomeKind.VALIDATED, (records[1].id,))
    assert await d.store.apply_outcome(outcome) == 1
    await d.store.serve_contrarian(agent, 4)
    await d.store.recall_source(agent).touch([records[0].id, records[2].id], T0 + 45)
    await d.store.decay.ensure_seeded(agent, T0 + 40)
    ledger = MaintenanceLedgerStore(d.redis, d.prefix)
    assert await ledger.acquire(agent, worker, 60_000)
    assert await ledger.complete(
        agent, Task.DECAY, 3, worker, {"entries": 2, "elapsed_ms": elapsed_ms}
    )
    await RedisCompactionStore(d.redis, d.prefix, dims=DIMS).save_plan(
        agent, CompactionPlan(plan_id="p1", now_ms=T0 + 40, clusters=())
    )
    witness = Witness(RedisWitnessLog(d.redis, d.prefix))
    for i, r in enumerate(records):
        await witness.append(
            agent,
            journal_partition=0,
            journal_offset=i,
            op="ingest",
            ids=[r.id],
            fields={"text": r.candidate.text},
        )
    return records


async def test_the_same_writes_at_other_times_by_other_workers_digest_the_same(
    open_deployment: Callable[[int], Awaitable[Deployment]],
) -> None:
    one, two = await open_deployment(1_000), await open_deployment(1_999_999_999_999)
    records = await write_state(one, A, worker="host-1:11", elapsed_ms=3.25)
    await write_state(two, A, worker="host-2:22", elapsed_ms=910.5)
    # The wall clock did reach the stores: the digest had something to leave out.
    memory = records[0].id
    assert await one.redis.hget(one.keys.memory(A, memory), "recorded_at") != await two.redis.hget(
        two.keys.memory(A, memory), "recorded_at"
    )
    first = await agent_digest(one.redis, one.prefix, A)
    second = await agent_digest(two.redis, two.prefix, A)
    assert first == second
    assert first.counts["memory"] == 3
    for family in (
        "usage", "decided", "stats", "outcomes", "nexus", "hyperedge", "nodes", "terms",
        "decay", "decay_seeded", "compaction_plan", "compaction_pending",
        "maintenance_ledger", "maintenance_log", "witness",
        "field_state", "watermark", "contrarian_window",
    ):  # fmt: skip
        assert first.counts.get(family, 0) >= 1, family
    assert first.counts["nexus"] == 3  # tag:ops/disk, err:timeout, tool:rpc
    assert first.excluded == {"maintenance_lease": 1}
    assert orjson.loads(orjson.dumps(first.asdict()))["digest"] == first.sha256


MUTATIONS: dict[str, Callable[[Deployment, list[MemoryRecord]], Awaitable[object]]] = {
    "memory field": lambda d, r: d.redis.hset(d.keys.memory(A, r[0].id), "confidence", "0.61"),
    "memory vector": lambda d, r: d.redis.hset(
        d.keys.memory(A, r[1].id), "canonical", unit(0.0, 1.0).tobytes()
    ),
    "memory field added": lambda d, r: d.redis.hset(d.keys.memory(A, r[2].id), "pinned", "1"),
    "usage": lambda d, r: d.redis.hset(d.keys.usage(A, r[1].id), "included_count_total", 9),
    "nexus score": lambda d, r: d.redis.zadd(d.keys.nexus(A, "tool:rpc"), {r[2].id: T0 + 21}),
    "nexus key gone": lambda d, r: d.redis.delete(d.keys.nexus(A, "err:timeout")),
    "hyperedge role": lambda d, r: d.redis.hset(
        d.keys.hyperedge(A, "turn:t-1"), r[0].id, "context"
    ),
    "decision": lambda d, r: d.redis.hset(d.keys.decided(A), "c9", "reject"),
    "stats": lambda d, r: d.redis.hincrby(d.keys.stats(A), "candidates", 1),
    "decay due": lambda d, r: d.redis.zadd(d.keys.decay_schedule(A), {r[0].id: 1}),
    "tombstone": lambda d, r: d.redis.set(d.keys.tombstone(A, r[0].id), "summary-1"),
    "field state": lambda d, r: d.redis.set(d.keys.field_state(A), b'{"regime":"storm"}'),
    "watermark": lambda d, r: d.redis.zadd(d.keys.watermark(A), {WATERMARK_MEMBER: T0 + 31}),
    "contrarian window": lambda d, r: d.redis.zadd(d.keys.contrarian_window(A), {WINDOW_MEMBER: 5}),
    "maintenance log": lambda d, r: d.redis.xadd(
        d.keys.maintenance_log(A), {"task": "curator", "tick": 4}
    ),
    "config": lambda d, r: d.redis.set(d.keys.agent_config(A), b'{"top_k":3}'),
    "witness": lambda d, r: Witness(RedisWitnessLog(d.redis, d.prefix)).append(
        A, journal_partition=0, journal_offset=9, op="retract", ids=[r[0].id], fields={}
    ),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
async def test_a_changed_stored_field_changes_the_digest(
    open_deployment: Callable[[int], Awaitable[Deployment]], mutation: str
) -> None:
    d = await open_deployment(1_000)
    records = await write_state(d, A, worker="w", elapsed_ms=1.0)
    before = await d.digest()
    await MUTATIONS[mutation](d, records)
    assert await d.digest() != before


async def test_wall_clock_and_worker_fields_do_not_change_the_digest(
    open_deployment: Callable[[int], Awaitable[Deployment]],
) -> None:
    d = await open_deployment(1_000)
    records = await write_state(d, A, worker="w", elapsed_ms=1.0)
    before = await d.digest()
    await d.redis.hset(d.keys.memory(A, records[0].id), "recorded_at", 123_456_789)
    await d.redis.set(d.keys.maintenance_lease(A), "another-worker", px=5_000)
    # A finished plan expires on the wall clock: whether it is still there is not state.
    plan = d.keys.compaction_plan(A, "p2")
    await d.redis.hset(plan, mapping={"plan": b"{}", "phase": "done", "agent_id": A})
    await d.redis.expire(plan, 600)
    assert await d.digest() == before
    assert (await agent_digest(d.redis, d.prefix, A)).excluded == {
        "maintenance_lease": 1,
        "compaction_plan": 1,
    }


async def test_another_agents_writes_leave_the_digest_alone(
    open_deployment: Callable[[int], Awaitable[Deployment]],
) -> None:
    d = await open_deployment(1_000)
    await write_state(d, A, worker="w", elapsed_ms=1.0)
    before = await d.digest()
    keys_before = await agent_keys(d.redis, d.prefix, A)
    for other in (B, RIVAL):
        await write_state(d, other, worker="w", elapsed_ms=2.0)
    assert await d.digest() == before
    assert await agent_keys(d.redis, d.prefix, A) == keys_before
    # The rival's own keys, those A's patterns match included, are the rival's.
    rival = await agent_footprint(d.redis, d.prefix, RIVAL)
    assert d.keys.nexus(RIVAL, "tool:rpc") in rival.families["nexus"]
    assert d.keys.nexus(RIVAL, "tool:rpc") not in keys_before
    assert await d.digest(RIVAL) != before
    assert await d.digest(B) != before


async def test_the_footprint_names_every_key_of_the_agent(
    open_deployment: Callable[[int], Awaitable[Deployment]],
) -> None:
    d = await open_deployment(1_000)
    records = await write_state(d, A, worker="w", elapsed_ms=1.0)
    await d.redis.hset(d.keys.memory(A, records[2].id), "deleted", "1")  # still the agent's
    keys = set(await agent_keys(d.redis, d.prefix, A))
    k = d.keys
    expected = {
        *(k.memory(A, r.id) for r in records),
        k.decided(A), k.stats(A), k.applied_outcomes(A), k.nodes(A), k.terms(A),
        k.decay_schedule(A), k.decay_seeded(A), k.compaction_plan(A, "p1"),
        k.compaction_pending(A), k.maintenance_ledger(A), k.maintenance_lease(A),
        k.maintenance_log(A), k.witness(A), k.hyperedge(A, "turn:t-1"),
        k.nexus(A, "tag:ops/disk"), k.nexus(A, "err:timeout"), k.nexus(A, "tool:rpc"),
    }  # fmt: skip
    footprint = await agent_footprint(d.redis, d.prefix, A)
    assert expected <= keys
    # Beyond those: the derivation index and usage counters the writes made.
    others = set(footprint.families.get("derivation", ())) | {k.usage(A, r.id) for r in records}
    assert keys - expected <= others
    assert keys == set(footprint.keys)
    assert await agent_members(d.redis, d.prefix, A) == sorted(
        [
            (k.field_state(A), ""),
            (k.watermark(A), WATERMARK_MEMBER),
            (k.contrarian_window(A), WINDOW_MEMBER),
        ]
    )
    assert footprint.memory_ids == tuple(sorted(r.id for r in records))
    assert footprint.name_of("nexus", k.nexus(A, "tool:rpc")) == "tool:rpc"
    assert footprint.name_of("usage", k.usage(A, records[1].id)) == records[1].id
    assert await agent_keys(d.redis, d.prefix, "nobody") == []
