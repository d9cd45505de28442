"""The witness log: each agent's hash-chained witness records, in order.

`{prefix}:witness:{agent}`  STREAM, one entry per record, entry id `<seq>-0`,
                            fields `hash` (the record's hash) and `record` (its
                            JSON, `grimoire.tables.codec.witness`)

Appending checks, atomically and server-side, that the record continues the chain
as stored (next seq, `prev_hash` = the stored head's hash), so two writers can
never fork an agent's chain; appending the stored record at its seq again is a
no-op (a retried write whose first attempt landed). Only the apply loop appends:
`append_in` queues the append on the loop's own pipeline, so a mutation and its
witness land in one MULTI/EXEC. In a transaction a refused append does not undo
the other commands: the pipeline's `execute` raises (`is_chain_conflict` tells
this error apart), and the loop must stop, since a second writer is at work.

`Witness` is what the apply loop holds: it reads an agent's head once, then keeps
it, so a mutation costs no read. `audit` re-reads and verifies a whole chain.

`WitnessLog` is the protocol, `RedisWitnessLog` the Redis implementation,
`grimoire.tables.testing.witness_log.InMemoryWitnessLog` the reference one; the
contract suite is tests/integration/test_witness_contract.py.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final, Unpack

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from grimoire.streams.trust.witness import (
    GENESIS_HASH,
    ChainVerdict,
    Mutation,
    WitnessRecord,
    next_record,
    verify_chain,
)
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.witness import CorruptWitness, decode_witness, encode_witness
from grimoire.tables.exceptions import StorageError
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.ports.trust import WitnessLog
from grimoire.tables.redis_client import queue_script
from grimoire.tables.transaction import AgentTransactions, StreamFence

__all__ = [
    "AUDIT_PAGE",
    "ChainConflict",
    "RedisWitnessLog",
    "Witness",
    "WitnessPart",
    "audit",
    "is_chain_conflict",
]

logger = logging.getLogger(__name__)

AUDIT_PAGE: Final = 1000
_CONFLICT: Final = "WITNESS"

# Append one record if it continues the stored chain. KEYS: the agent's stream;
# ARGV: seq, prev hash, hash, record JSON. Returns 1 when appended, 0 when this
# very record is already stored at its seq; an error reply when it conflicts.
_APPEND = """
local seq = tonumber(ARGV[1])
local id = ARGV[1] .. '-0'
local function stored_hash(entry)
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'hash' then return fields[i + 1] end
  end
  return false
end
local head = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local head_seq = 0
local head_hash = 'GENESIS'
if #head > 0 then
  head_seq = tonumber(string.match(head[1][1], '^(%d+)-'))
  head_hash = stored_hash(head[1])
end
if seq <= head_seq then
  local same = redis.call('XRANGE', KEYS[1], id, id)
  if #same > 0 and stored_hash(same[1]) == ARGV[3] then return 0 end
  return redis.error_reply('CONFLICT seq ' .. seq .. ' is taken (head ' .. head_seq .. ')')
end
if seq ~= head_seq + 1 then
  return redis.error_reply('CONFLICT seq ' .. seq .. ' does not follow ' .. head_seq)
end
if ARGV[2] ~= head_hash then
  return redis.error_reply('CONFLICT seq ' .. seq .. ' does not chain to the stored head')
end
redis.call('XADD', KEYS[1], id, 'hash', ARGV[3], 'record', ARGV[4])
return 1
""".replace("GENESIS", GENESIS_HASH).replace("CONFLICT", _CONFLICT)


class ChainConflict(StorageError):
    """An appended record does not continue the agent's stored chain: another
    writer appended meanwhile, or the caller's head is stale."""


def is_chain_conflict(error: BaseException) -> bool:
    """Whether an error from a pipeline holding `append_in` is the append refused."""
    if isinstance(error, ChainConflict):
        return True
    return isinstance(error, ResponseError) and _CONFLICT in str(error)


class RedisWitnessLog:
    """`WitnessLog` over one Redis stream per agent (see the module docstring)."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self.keys = Keyspace(prefix)
        self._append = redis.register_script(_APPEND)

    def key(self, agent_id: str) -> str:
        return self.keys.witness(agent_id)

    def append_in(self, pipe: Any, record: WitnessRecord) -> None:
        """Queue the append on a pipeline (a MULTI/EXEC one included), after the
        mutation it witnesses; see the module docstring for a refused append."""
        key, *args = self._arguments(record)
        queue_script(pipe, self._append, [key], args)

    async def append(self, record: WitnessRecord) -> None:
        try:
            await self._append(keys=[self.key(record.agent_id)], args=self._arguments(record)[1:])
        except ResponseError as exc:
            if is_chain_conflict(exc):
                raise ChainConflict(str(exc)) from exc
            raise

    def _arguments(self, record: WitnessRecord) -> list[Any]:
        return [
            self.key(record.agent_id),
            record.seq,
            record.prev_hash,
            record.hash,
            encode_witness(record),
        ]

    async def last(self, agent_id: str) -> WitnessRecord | None:
        rows = await self._redis.xrevrange(self.key(agent_id), "+", "-", count=1)
        return _decoded(rows)[0] if rows else None

    async def records(
        self, agent_id: str, start_seq: int = 1, limit: int | None = None
    ) -> list[WitnessRecord]:
        if limit is not None and limit <= 0:
            return []
        start = f"{max(start_seq, 0)}-0"
        rows = await self._redis.xrange(self.key(agent_id), start, "+", count=limit)
        return _decoded(rows)

    async def length(self, agent_id: str) -> int:
        return int(await self._redis.xlen(self.key(agent_id)))


def _decoded(rows: Any) -> list[WitnessRecord]:
    records: list[WitnessRecord] = []
    for entry_id, fields in rows or ():
        seq = int(text_of(entry_id).split("-", 1)[0])
        raw = (fields or {}).get(b"record", (fields or {}).get("record"))
        if raw is None:
            raise CorruptWitness(f"witness entry {text_of(entry_id)} holds no record", seq)
        try:
            records.append(decode_witness(raw))
        except CorruptWitness as exc:
            raise CorruptWitness(str(exc), seq) from exc
    return records


class WitnessPart:
    """Records appended inside another store's transaction (`TransactionPart`):
    on a `RedisWitnessLog` pipeline they land with the mutation they witness, or
    not at all."""

    def __init__(self, log: WitnessLog, records: Sequence[WitnessRecord]) -> None:
        self._log = log
        self.records = tuple(records)

    def queue(self, tx: AgentTransactions) -> None:
        if not isinstance(self._log, RedisWitnessLog):
            raise TypeError(f"{type(self._log).__name__} joins no Redis pipeline")
        fenced: set[str] = set()
        for record in self.records:
            if record.agent_id not in fenced:
                # The agent's unit commits only on the head its first record follows:
                # every change of its state appends here, so a head that moved means
                # another writer changed the state this batch was decided on.
                fenced.add(record.agent_id)
                expected = None if record.prev_hash == GENESIS_HASH else record.prev_hash
                tx.fence(
                    record.agent_id,
                    StreamFence(self._log.key(record.agent_id), "hash", expected),
                )
            self._log.append_in(tx.agent(record.agent_id), record)

    async def apply_alone(self) -> None:
        for record in self.records:
            await self._log.append(record)


class Witness:
    """The apply loop's handle on the witness log: builds each mutation's record
    from the agent's head, which it reads from the log once and then keeps.

    With `RedisWitnessLog`, queue each record with `log.append_in` on the
    mutation's pipeline; when that pipeline fails, call `invalidate(agent_id)`, so
    the next record is built from the head as stored. `append` does both for
    callers without a pipeline.
    """

    def __init__(self, log: WitnessLog, *, max_agents: int = 100_000) -> None:
        self.log = log
        self._heads: dict[str, WitnessRecord | None] = {}
        self._max_agents = max_agents

    async def head(self, agent_id: str) -> WitnessRecord | None:
        if agent_id not in self._heads:
            if len(self._heads) >= self._max_agents:
                # Any head can be read again: drop the oldest-cached one.
                del self._heads[next(iter(self._heads))]
            self._heads[agent_id] = await self.log.last(agent_id)
        return self._heads[agent_id]

    async def next(self, agent_id: str, **mutation: Unpack[Mutation]) -> WitnessRecord:
        """The agent's next record; it becomes the kept head at once (records
        for several mutations of one pipeline chain in the order they are made)."""
        record = next_record(await self.head(agent_id), agent_id=agent_id, **mutation)
        self._heads[agent_id] = record
        return record

    async def append(self, agent_id: str, **mutation: Unpack[Mutation]) -> WitnessRecord:
        """`next`, then the log's own `append`."""
        record = await self.next(agent_id, **mutation)
        try:
            await self.log.append(record)
        except BaseException:
            self.invalidate(agent_id)
            raise
        return record

    def invalidate(self, agent_id: str | None = None) -> None:
        """Forget the kept head of one agent (None: of every agent)."""
        if agent_id is None:
            self._heads.clear()
        else:
            self._heads.pop(agent_id, None)


async def audit(log: WitnessLog, agent_id: str, *, page: int = AUDIT_PAGE) -> ChainVerdict:
    """Re-read an agent's whole chain from the log, a page at a time, and verify
    it (`verify_chain`); `count` is every record the log holds. Bytes that are no
    record break the chain there, with reason "unreadable"."""
    total = await log.length(agent_id)
    prev: WitnessRecord | None = None
    start = 1
    read = 0
    while True:
        try:
            batch = await log.records(agent_id, start, page)
            unreadable: int | None = None
        except CorruptWitness as exc:
            if exc.seq is None or exc.seq < start:
                raise
            unreadable = exc.seq
            batch = await log.records(agent_id, start, exc.seq - start)
        verdict = verify_chain(batch, after=prev)
        read += len(batch)
        if not verdict.ok:
            return _verdict(verdict, total)
        if batch:
            prev = batch[-1]
        if unreadable is not None:
            expected = 1 if prev is None else prev.seq + 1
            return ChainVerdict(
                False,
                total,
                first_broken=expected,
                reason="unreadable",
                head=verdict.head,
            )
        if len(batch) < page:
            return ChainVerdict(True, max(total, read), head=verdict.head)
        start = batch[-1].seq + 1


def _verdict(verdict: ChainVerdict, total: int) -> ChainVerdict:
    return ChainVerdict(
        verdict.ok,
        max(total, verdict.count),
        first_broken=verdict.first_broken,
        reason=verdict.reason,
        head=verdict.head,
    )
