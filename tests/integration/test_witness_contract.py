"""The witness log contract, run against the Redis log and the reference in-memory
one alike: records come back in order and per agent, an append must continue the
stored chain (and the stored record appended again changes nothing), the apply
loop's `Witness` chains without re-reading, and the audit finds tampering in
what is stored. Redis alone: the append rides a MULTI/EXEC with the mutation it
witnesses, and bytes that are no record break the chain as "unreadable"."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from grimoire.infra.settings import Settings
from grimoire.streams.trust.witness import GENESIS_HASH, WitnessRecord, next_record, record_hash
from grimoire.tables.codec.witness import encode_witness
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.ports.trust import WitnessLog
from grimoire.tables.testing.witness_log import InMemoryWitnessLog
from grimoire.tables.trust.witness_store import (
    AUDIT_PAGE,
    ChainConflict,
    RedisWitnessLog,
    Witness,
    audit,
    is_chain_conflict,
)
from tests.support.contract import BACKENDS, delete_prefixed, memory_or_redis, scratch_redis
from tests.support.witness import witness_chain

pytestmark = pytest.mark.integration

A, B = "agent-a", "agent-a:b"  # B's id extends A's: their logs must still never meet


class Harness:
    """A log, and a way to rewrite what it stores as an attacker could."""

    log: WitnessLog

    async def tamper(self, agent: str, entries: Sequence[tuple[int, WitnessRecord]]) -> None:
        raise NotImplementedError


class MemoryHarness(Harness):
    def __init__(self) -> None:
        self.memory = InMemoryWitnessLog()
        self.log = self.memory

    async def tamper(self, agent: str, entries: Sequence[tuple[int, WitnessRecord]]) -> None:
        self.memory.tamper(agent, entries)


class RedisHarness(Harness):
    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self.redis_log = RedisWitnessLog(redis, prefix)
        self.log = self.redis_log

    async def tamper(self, agent: str, entries: Sequence[tuple[int, WitnessRecord]]) -> None:
        key = self.redis_log.key(agent)
        await self.redis.delete(key)
        for seq, record in entries:
            fields = {"hash": record.hash, "record": encode_witness(record)}
            await self.redis.xadd(key, fields, id=f"{seq}-0")  # type: ignore[arg-type]


@pytest.fixture(params=BACKENDS)
async def h(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    async with memory_or_redis(
        request, MemoryHarness, RedisHarness, tag="wc", cleanup=delete_prefixed
    ) as harness:
        yield harness


def chain(n: int, agent: str = A) -> list[WitnessRecord]:
    def record(i: int) -> dict[str, Any]:
        fields = {"text": f"event {i}", "vector": bytes([i, i])}
        return {
            "journal_partition": 1,
            "journal_offset": 10 + i,
            "op": "ingest",
            "ids": [f"m{i}"],
            "fields": fields,
        }

    return witness_chain(agent, n, record)


async def store(h: Harness, records: Sequence[WitnessRecord]) -> None:
    for record in records:
        await h.log.append(record)


async def test_an_empty_log(h: Harness) -> None:
    assert await h.log.last(A) is None
    assert await h.log.records(A) == []
    assert await h.log.length(A) == 0
    verdict = await audit(h.log, A)
    assert (verdict.ok, verdict.count, verdict.head) == (True, 0, GENESIS_HASH)


async def test_records_come_back_in_order_and_per_agent(h: Harness) -> None:
    mine, theirs = chain(5), chain(2, B)
    await store(h, mine[:3])
    await store(h, theirs)
    await store(h, mine[3:])
    assert await h.log.records(A) == mine
    assert await h.log.records(B) == theirs
    assert await h.log.last(A) == mine[-1]
    assert await h.log.last(B) == theirs[-1]
    assert (await h.log.length(A), await h.log.length(B)) == (5, 2)


async def test_records_read_from_a_seq_and_up_to_a_limit(h: Harness) -> None:
    records = chain(6)
    await store(h, records)
    assert await h.log.records(A, 3) == records[2:]
    assert await h.log.records(A, 2, 2) == records[1:3]
    assert await h.log.records(A, 6, 10) == records[5:]
    assert await h.log.records(A, 7) == []
    assert await h.log.records(A, 1, 0) == []


async def test_an_append_must_continue_the_stored_chain(h: Harness) -> None:
    records = chain(4)
    with pytest.raises(ChainConflict):
        await h.log.append(records[1])  # not the first
    await store(h, records[:2])
    with pytest.raises(ChainConflict):
        await h.log.append(records[3])  # a gap
    forked = replace(records[2], prev_hash="1" * 64)
    with pytest.raises(ChainConflict):
        await h.log.append(replace(forked, hash=record_hash(forked)))  # another head
    other = replace(records[1], op="forget")
    with pytest.raises(ChainConflict) as refused:
        await h.log.append(replace(other, hash=record_hash(other)))  # seq 2 is taken
    assert is_chain_conflict(refused.value)
    assert await h.log.records(A) == records[:2]


async def test_the_stored_record_appended_again_changes_nothing(h: Harness) -> None:
    records = chain(3)
    await store(h, records)
    await h.log.append(records[1])
    await h.log.append(records[2])
    assert await h.log.records(A) == records


async def test_witness_chains_the_apply_loops_mutations(h: Harness) -> None:
    await store(h, chain(2))
    witness = Witness(h.log)
    made = [
        await witness.append(
            A, journal_partition=0, journal_offset=50 + i, op="usage", ids=["m1"], fields={"n": i}
        )
        for i in range(3)
    ]
    assert [r.seq for r in made] == [3, 4, 5]
    assert (await h.log.records(A))[2:] == made
    # A second witness (another worker after a rebalance) continues from the log.
    later = await Witness(h.log).append(
        A, journal_partition=0, journal_offset=60, op="retract", ids=["m1"], fields={}
    )
    assert (later.seq, later.prev_hash) == (6, made[-1].hash)
    # The first one's kept head is stale now: refused, then re-read.
    with pytest.raises(ChainConflict):
        await witness.append(A, journal_partition=0, journal_offset=61, op="pin", ids=(), fields={})
    again = await witness.append(
        A, journal_partition=0, journal_offset=61, op="pin", ids=(), fields={}
    )
    assert again.seq == 7
    assert (await audit(h.log, A)).ok


async def test_the_audit_verifies_an_intact_log(h: Harness) -> None:
    records = chain(7)
    await store(h, records)
    for page in (2, 7, 1000):
        verdict = await audit(h.log, A, page=page)
        assert (verdict.ok, verdict.count, verdict.head) == (True, 7, records[-1].hash)


def stored_as(records: Sequence[WitnessRecord]) -> list[tuple[int, WitnessRecord]]:
    return [(record.seq, record) for record in records]


def _a_changed_field(records: Sequence[WitnessRecord]) -> list[tuple[int, WitnessRecord]]:
    return stored_as([*records[:2], replace(records[2], ids=("m-other",)), *records[3:]])


def _a_removed_record(records: Sequence[WitnessRecord]) -> list[tuple[int, WitnessRecord]]:
    return stored_as([*records[:1], *records[2:]])


def _a_reordered_pair(records: Sequence[WitnessRecord]) -> list[tuple[int, WitnessRecord]]:
    # The contents of entries 3 and 4 swapped, each left where the other was.
    return [(1, records[0]), (2, records[1]), (3, records[3]), (4, records[2]), (5, records[4])]


@pytest.mark.parametrize(
    ("tampered", "page", "found"),
    [
        (_a_changed_field, 2, (5, 3, "hash")),  # read across pages
        (_a_removed_record, AUDIT_PAGE, (4, 2, "seq")),
        (_a_reordered_pair, AUDIT_PAGE, (5, 3, "seq")),
    ],
    ids=["a_changed_field", "a_removed_record", "a_reordered_pair"],
)
async def test_the_audit_finds(
    h: Harness,
    tampered: Callable[[Sequence[WitnessRecord]], list[tuple[int, WitnessRecord]]],
    page: int,
    found: tuple[int, int, str],
) -> None:
    """Five records stored, then rewritten: the verdict counts what the log holds and
    names the first record broken, and how."""
    records = chain(5)
    await store(h, records)
    await h.tamper(A, tampered(records))
    verdict = await audit(h.log, A, page=page)
    assert (verdict.ok, verdict.count, verdict.first_broken, verdict.reason) == (False, *found)


async def test_the_audit_finds_a_forged_hash(h: Harness) -> None:
    records = chain(5)
    await store(h, records)
    await h.tamper(A, stored_as([*records[:3], replace(records[3], hash="e" * 64), records[4]]))
    verdict = await audit(h.log, A)
    assert (verdict.ok, verdict.first_broken, verdict.reason) == (False, 4, "hash")
    # A rewrite with a recomputed hash breaks the link to the next record instead.
    rewritten = replace(records[1], op="forget")
    rewritten = replace(rewritten, hash=record_hash(rewritten))
    await h.tamper(A, stored_as([records[0], rewritten, *records[2:]]))
    verdict = await audit(h.log, A)
    assert (verdict.ok, verdict.first_broken, verdict.reason) == (False, 3, "prev")


# ---- Redis only -------------------------------------------------------------------------


@pytest.fixture
async def redis_log(settings: Settings) -> AsyncIterator[RedisHarness]:
    async with scratch_redis(settings, "wc", cleanup=delete_prefixed) as (redis, prefix):
        yield RedisHarness(redis, prefix)


async def test_a_mutation_and_its_witness_land_in_one_transaction(
    redis_log: RedisHarness,
) -> None:
    redis, log = redis_log.redis, redis_log.redis_log
    state = Keyspace(redis_log.prefix).stats(A)
    witness = Witness(log)
    for i in range(3):
        record = await witness.next(
            A, journal_partition=0, journal_offset=i, op="ingest", ids=["m"], fields={"i": i}
        )
        async with redis.pipeline(transaction=True) as pipe:
            pipe.hincrby(state, "candidates", 1)
            log.append_in(pipe, record)
            await pipe.execute()
    assert int(await redis.hget(state, "candidates") or 0) == 3
    assert (await audit(log, A)).count == 3

    stale = next_record(
        None, agent_id=A, journal_partition=0, journal_offset=9, op="ingest", ids=(), fields={}
    )
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hincrby(state, "candidates", 1)
        log.append_in(pipe, stale)
        with pytest.raises(ResponseError) as refused:
            await pipe.execute()
    assert is_chain_conflict(refused.value)
    assert await log.length(A) == 3


async def test_bytes_that_are_no_record_break_the_chain_as_unreadable(
    redis_log: RedisHarness,
) -> None:
    records = chain(4)
    await store(redis_log, records)
    key = redis_log.redis_log.key(A)
    await redis_log.tamper(A, stored_as(records[:2]))
    await redis_log.redis.xadd(key, {"hash": "x", "record": b"{garbage"}, id="3-0")
    fourth = {"hash": records[3].hash, "record": encode_witness(records[3])}
    await redis_log.redis.xadd(key, fourth, id="4-0")  # type: ignore[arg-type]
    verdict = await audit(redis_log.log, A, page=2)
    assert (verdict.ok, verdict.count, verdict.first_broken, verdict.reason) == (
        False, 4, 3, "unreadable",
    )  # fmt: skip
    assert verdict.head == records[1].hash
