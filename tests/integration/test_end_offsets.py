"""Partition ends on the local broker, written in batches of several records.

tansu answers ListOffsets "latest" with one past the first offset of a
partition's last batch (a partition of 5 + 7 + 3 records reads as ending at 13,
not 15). Everything that needs an end goes through `true_end_offsets`: its own
answer, a reader positioned by it, the HTTP API's journal lag and the fold of
the journal (`refold`, the path `grimoire replay` shares) are checked here
against what was written, record for record.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from grimoire.agents.journal.apply import ApplyReport
from grimoire.agents.ports import InputMessage
from grimoire.infra.http.lag import JournalLagProbe
from grimoire.infra.replay import refold
from grimoire.infra.settings import Settings
from grimoire.topics.declarations import TopicNames, ensure_topics
from grimoire.topics.offsets import true_end_offsets

pytestmark = pytest.mark.integration

# Records per batch, per partition; the last partition is never written.
BATCHES: dict[int, tuple[int, ...]] = {0: (5, 7, 3), 1: (1, 9), 2: (40,), 3: ()}


def _total(partition: int) -> int:
    return sum(BATCHES[partition])


async def _write(bootstrap: str, topic: str, batches: dict[int, Sequence[int]]) -> None:
    """Each size as one record batch of its own (send_batch: no linger guesswork)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for partition, sizes in batches.items():
            for size in sizes:
                batch = producer.create_batch()
                for n in range(size):
                    assert batch.append(key=None, value=f"{partition}:{n}".encode(), timestamp=None)
                await (await producer.send_batch(batch, topic, partition=partition))
    finally:
        await producer.stop()


@pytest.fixture
async def prefix(settings: Settings) -> AsyncIterator[str]:
    """A prefix of its own whose journal holds `BATCHES`."""
    own = f"eo{uuid.uuid4().hex[:8]}"
    journal = TopicNames(own).journal
    await ensure_topics(settings.bootstrap_servers, {journal: len(BATCHES)})
    await _write(settings.bootstrap_servers, journal, BATCHES)
    yield own


@pytest.fixture
async def consumer(settings: Settings) -> AsyncIterator[AIOKafkaConsumer]:
    reader = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers)
    await reader.start()
    yield reader
    await reader.stop()


def _tps(prefix: str) -> list[TopicPartition]:
    return [TopicPartition(TopicNames(prefix).journal, p) for p in BATCHES]


async def test_the_ends_are_past_every_record_written(
    prefix: str, consumer: AIOKafkaConsumer
) -> None:
    tps = _tps(prefix)
    reported = await consumer.end_offsets(tps)
    ends = await true_end_offsets(consumer, tps)
    assert ends == {tp: _total(tp.partition) for tp in tps}
    # Never less than the broker says (on Kafka the two agree).
    assert all(reported[tp] <= ends[tp] for tp in tps)
    # The consumer is left at the ends.
    assert [await consumer.position(tp) for tp in tps] == [ends[tp] for tp in tps]
    # Asked again on the same consumer, the answer stands.
    assert await true_end_offsets(consumer, tps, paused=True) == ends
    assert consumer.paused() == set(tps)


async def test_a_reader_at_the_ends_gets_what_is_written_next(
    settings: Settings, prefix: str, consumer: AIOKafkaConsumer
) -> None:
    tps = _tps(prefix)
    await true_end_offsets(consumer, tps)
    await _write(settings.bootstrap_servers, tps[0].topic, {0: (4,)})
    fetched = await consumer.getmany(tps[0], timeout_ms=5_000)
    offsets = [record.offset for record in fetched.get(tps[0], [])]
    # The new batch and nothing before it (the old last batch is not read again).
    assert offsets == list(range(_total(0), _total(0) + 4))


async def test_the_fetched_high_watermark_is_the_end(
    prefix: str, consumer: AIOKafkaConsumer
) -> None:
    """What the worker's maintenance pressure reads (`consumer.highwater`, from
    the fetch responses) is exact without any help."""
    tp = _tps(prefix)[0]
    consumer.assign([tp])
    consumer.seek(tp, 0)
    await consumer.getmany(tp, timeout_ms=5_000, max_records=1)
    assert consumer.highwater(tp) == _total(0)


async def test_the_journal_lag_is_exact(
    settings: Settings, prefix: str, consumer: AIOKafkaConsumer
) -> None:
    tps = _tps(prefix)
    group = f"{prefix}-group"
    committer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    await committer.start()
    try:
        committer.assign([tps[0], tps[2]])
        # Inside a batch: the second of partition 0, the only one of partition 2.
        await committer.commit({tps[0]: 6, tps[2]: 33})
    finally:
        await committer.stop()
    probe = JournalLagProbe(
        settings.bootstrap_servers, group, tps[0].topic, len(BATCHES), timeout_s=10.0
    )
    try:
        # Partition 1 has nothing committed: all of it is behind.
        assert await probe() == {0: _total(0) - 6, 1: _total(1), 2: _total(2) - 33, 3: 0}
        await _write(settings.bootstrap_servers, tps[0].topic, {0: (2, 6), 3: (3,)})
        assert await probe() == {0: _total(0) + 8 - 6, 1: _total(1), 2: _total(2) - 33, 3: 3}
    finally:
        await probe.close()


class RecordingApplier:
    """Takes the place of the journal applier: which offsets the fold handed it."""

    def __init__(self) -> None:
        self.offsets: dict[int, list[int]] = defaultdict(list)

    async def apply(self, batch: list[InputMessage]) -> ApplyReport:
        for message in batch:
            self.offsets[message.partition].append(message.offset or 0)
        return ApplyReport(entries=len(batch))


async def test_the_fold_reads_the_journal_to_its_end(settings: Settings, prefix: str) -> None:
    applier = RecordingApplier()
    own = settings.with_values(topic_prefix=prefix)
    report = await refold(own, applier, list(BATCHES))  # type: ignore[arg-type]
    assert dict(applier.offsets) == {p: list(range(_total(p))) for p in BATCHES if _total(p)}
    assert report.entries == sum(_total(p) for p in BATCHES)
    assert report.per_partition == {p: _total(p) for p in BATCHES if _total(p)}


async def test_a_fold_between_offsets_stops_inside_a_batch(settings: Settings, prefix: str) -> None:
    applier = RecordingApplier()
    own = settings.with_values(topic_prefix=prefix)
    await refold(own, applier, [0, 2], start=3, stop=9)  # type: ignore[arg-type]
    assert dict(applier.offsets) == {0: list(range(3, 9)), 2: list(range(3, 9))}
