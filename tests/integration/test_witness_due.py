"""An entry applied but not witnessed is witnessed by its retry, with the record
it would have had.

A worker killed (or a Redis connection dropped) after an outcome's or a fact's
effects commit and before its witness record is appended leaves the chain short
of the entry; the retry finds the outcome or the fact applied before. The store
keeps the record due with the effects (`grimoire.tables.journal.witness_due`), so
the retry records it: the chain is the one a run without the failure makes.
Real Redis; the worker's composition (`compose`); the failure is a witness append
that raises a connection error once, after the effects committed.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from grimoire.agents.journal.apply import JournalApplier
from grimoire.agents.journal.witness import PublishedWitness
from grimoire.agents.ports import InputMessage, MemorySink, WitnessPort
from grimoire.infra.settings import Settings
from grimoire.streams.journal.entry import EntryKind
from grimoire.tables.journal.witness_due import RedisWitnessDue
from grimoire.tables.redis_client import create_redis
from grimoire.tables.trust.witness_store import RedisWitnessLog
from tests.support.composed import compose_in_process, with_witness
from tests.support.stored import drop_deployment

pytestmark = pytest.mark.integration

AGENT = "due-agent"
TS = 1_790_000_000_000


class DropsOnce:
    """A witness whose `nth` append of `op` fails as a dropped connection does:
    after the entry's effects, before its record."""

    def __init__(self, inner: WitnessPort, op: str, nth: int) -> None:
        self.inner = inner
        self.op = op
        self.nth = nth
        self.seen = 0
        self.dropped = 0

    async def witnessed(self, agent_id: str, journal: tuple[int, int]) -> bool:
        return await self.inner.witnessed(agent_id, journal)

    async def record(
        self, agent_id: str, op: str, ids: Sequence[str], fields: Any, *, journal: tuple[int, int]
    ) -> None:
        if op == self.op and not self.dropped:
            self.seen += 1
        if op == self.op and self.seen == self.nth and not self.dropped:
            self.dropped += 1
            raise RedisConnectionError("connection dropped before the witness")
        await self.inner.record(agent_id, op, ids, fields, journal=journal)


def _message(topic: str, offset: int, data: dict[str, Any]) -> InputMessage:
    return InputMessage(orjson.dumps(data), topic, partition=0, offset=offset)


async def _run(
    settings: Settings, drop: tuple[str, int] | None
) -> list[tuple[str, tuple[str, ...], str]]:
    """Journal an episode; an outcome for its memory, a run's end and a fact; fold
    them, retrying when the witness drops. The agent's chain (op, ids, fields
    digest)."""
    prefix = f"due{uuid.uuid4().hex[:8]}"
    configured = settings.with_values(topic_prefix=prefix)
    redis: Redis = create_redis(settings.redis.url, 4)
    sink = MemorySink()
    try:
        composed = await compose_in_process(configured, redis, sink, "due-test")
        sequencer = composed.handlers.sequencer
        applier: JournalApplier = composed.handlers.applier
        failing = None
        if drop is not None:
            inner = PublishedWitness(composed.witness, sink, sequencer.topics)
            failing = DropsOnce(inner, *drop)
            applier = with_witness(applier, failing)
        topics = sequencer.topics
        await sequencer.append(
            EntryKind.EPISODE,
            [
                _message(
                    topics.episodes,
                    0,
                    {
                        "agent_id": AGENT,
                        "event_id": "ep-1",
                        "ts": TS,
                        "text": "the deploy of billing failed on a missing migration",
                    },
                )
            ],
        )
        journal = [
            InputMessage(value=v, topic=topics.journal, partition=0, offset=i)
            for i, v in enumerate(sink.on(topics.journal))
        ]
        await applier.apply(journal)
        (ingested,) = await RedisWitnessLog(redis, prefix).records(AGENT)
        memory_ids = sorted(ingested.ids)
        assert memory_ids, "the episode wrote no memory"
        await sequencer.append(
            EntryKind.OUTCOME,
            [
                _message(
                    topics.outcomes,
                    0,
                    {
                        "agent_id": AGENT,
                        "ts": TS + 1_000,
                        "outcome": "positive",
                        "memory_ids": memory_ids,
                    },
                ),
                _message(
                    topics.outcomes,
                    1,
                    {
                        "agent_id": AGENT,
                        "ts": TS + 1_500,
                        "outcome": "run_ended",
                        "run_id": "run-1",
                        "quality": 0.9,
                    },
                ),
            ],
        )
        await sequencer.append(
            EntryKind.FACT,
            [
                _message(
                    topics.facts,
                    0,
                    {
                        "agent_id": AGENT,
                        "event_id": "fact-1",
                        "ts": TS + 2_000,
                        "subject": "billing",
                        "predicate": "runs_on",
                        "object": "postgres",
                        "valid_from": 3,
                    },
                )
            ],
        )
        journal = [
            InputMessage(value=v, topic=topics.journal, partition=0, offset=i)
            for i, v in enumerate(sink.on(topics.journal))
        ][len(journal) :]
        for attempt in range(3):
            try:
                await applier.apply(journal)
                break
            except RedisConnectionError:
                assert failing is not None and attempt == 0
        if failing is not None:
            assert failing.dropped == 1, "the witness never dropped"
            # The dropped entry's record was due, and the retry wrote it.
            due = await RedisWitnessDue(redis, prefix).due(AGENT)
            assert due is not None
        assert sink.on(topics.dead_letters) == []
        records = await RedisWitnessLog(redis, prefix).records(AGENT)
        return [(r.op, tuple(r.ids), r.fields_digest) for r in records]
    finally:
        await drop_deployment(redis, prefix)
        await redis.aclose()


@pytest.mark.parametrize(
    "drop",
    [("outcome", 1), ("outcome", 2), ("fact", 1)],
    ids=["outcome", "run-end", "fact"],
)
async def test_an_entry_applied_but_not_witnessed_is_witnessed_by_its_retry(
    settings: Settings, drop: tuple[str, int]
) -> None:
    clean = await _run(settings, None)
    assert [record[0] for record in clean] == ["ingest", "outcome", "outcome", "fact"]
    assert await _run(settings, drop) == clean
