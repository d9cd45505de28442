"""`grimoire replay`: fold the journal into an empty store (or into a new prefix).

The journal is read from its first offset to where it ends when the replay starts
(found by reading, not by asking: `true_end_offsets`), partition by partition,
each partition in order, and applied by the same apply loop the worker runs;
nothing is published (the memory-events of the first run stand). The key store is
the deployment's own: the journal cannot be read without it, and a replay never
changes it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition

from grimoire.agents.journal.apply import ApplyReport, JournalApplier
from grimoire.agents.ports import Embedder, InputMessage, MemorySink
from grimoire.infra.embedding.embedder import CachingEmbedder, SentenceTransformerEmbedder
from grimoire.infra.runtime import compose, worker_id
from grimoire.infra.settings import Settings
from grimoire.tables.journal.keystore import CachedKeyStore, RedisKeyStore
from grimoire.tables.memory.wipe import wipe_memory_state
from grimoire.tables.redis_client import create_redis
from grimoire.topics.declarations import TopicNames
from grimoire.topics.offsets import true_end_offsets

__all__ = ["ReplayReport", "read_partition", "refold", "replay"]

logger = logging.getLogger(__name__)

_BATCH = 64
_WAIT_MS = 500


@dataclass
class ReplayReport:
    prefix: str
    partitions: int = 0
    entries: int = 0
    applied: int = 0
    skipped: int = 0
    shredded: int = 0
    dead_lettered: int = 0
    wiped_keys: int = 0
    per_partition: dict[int, int] = field(default_factory=dict)

    def add(self, report: ApplyReport) -> None:
        self.entries += report.entries
        self.applied += report.applied
        self.skipped += report.skipped
        self.shredded += report.shredded
        self.dead_lettered += report.dead_lettered


async def replay(
    settings: Settings,
    *,
    into_prefix: str | None = None,
    wipe: bool = False,
    embedder: Embedder | None = None,
    progress: bool = True,
) -> ReplayReport:
    """Fold `settings.broker.topic_prefix`'s journal into `into_prefix` (default: the same
    prefix); `wipe` first deletes the target's memory state (never the key store)."""
    prefix = into_prefix or settings.broker.topic_prefix
    report = ReplayReport(prefix)
    redis = create_redis(settings.redis.url, settings.redis.max_connections)
    keystore_redis = (
        create_redis(settings.redis.keystore_url, 4) if settings.redis.keystore_url else None
    )
    consumer: AIOKafkaConsumer | None = None
    try:
        if wipe:
            report.wiped_keys = await wipe_memory_state(redis, prefix)
        if embedder is None:
            embedder = SentenceTransformerEmbedder.from_settings(settings)
        keys = CachedKeyStore(RedisKeyStore(keystore_redis or redis, settings.broker.topic_prefix))
        composed = await compose(
            settings,
            prefix=prefix,
            redis=redis,
            keys=keys,
            embedder=CachingEmbedder(embedder, capacity=settings.embedding.cache_size),
            sink=MemorySink(),
            worker_id=f"replay:{worker_id()}",
        )
        applier = composed.handlers.applier
        journal = TopicNames(settings.broker.topic_prefix).journal
        consumer = _journal_reader(settings)
        await consumer.start()
        partitions = sorted(consumer.partitions_for_topic(journal) or ())
        report.partitions = len(partitions)
        tps = [TopicPartition(journal, p) for p in partitions]
        ends = await true_end_offsets(consumer, tps)
        total = sum(ends.values())
        bar = _progress(total, progress)
        for tp in tps:
            async for batch in read_partition(consumer, tp, end=ends[tp]):
                report.add(await applier.apply(batch))
                report.per_partition[tp.partition] = (batch[-1].offset or 0) + 1
                bar.update(len(batch))
        bar.close()
        return report
    finally:
        if consumer is not None:
            await consumer.stop()
        await redis.aclose()
        if keystore_redis is not None:
            await keystore_redis.aclose()


def _journal_reader(settings: Settings) -> AIOKafkaConsumer:
    """A consumer outside any group that reads assigned journal partitions from
    their start (a replay, a refold)."""
    return AIOKafkaConsumer(
        bootstrap_servers=settings.broker.url.removeprefix("kafka://"),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **settings.kafka_security.aiokafka_kwargs(),
    )


async def refold(
    settings: Settings,
    applier: JournalApplier,
    partitions: list[int],
    *,
    start: int = 0,
    stop: int | None = None,
) -> ReplayReport:
    """Fold `partitions` of the deployment's journal again through `applier`, from
    `start` to their end now (a worker rebuilding a lost store), or up to `stop`,
    exclusive (a worker folding again what a crashed Redis lost)."""
    report = ReplayReport(settings.broker.topic_prefix)
    journal = TopicNames(settings.broker.topic_prefix).journal
    consumer = _journal_reader(settings)
    await consumer.start()
    try:
        tps = [TopicPartition(journal, p) for p in partitions]
        ends = await true_end_offsets(consumer, tps)
        report.partitions = len(tps)
        for tp in tps:
            end = ends[tp] if stop is None else min(stop, ends[tp])
            async for batch in read_partition(consumer, tp, start=start, end=end):
                report.add(await applier.apply(batch))
                report.per_partition[tp.partition] = (batch[-1].offset or 0) + 1
    finally:
        await consumer.stop()
    return report


async def read_partition(
    consumer: AIOKafkaConsumer, tp: TopicPartition, *, end: int, start: int = 0
) -> AsyncIterator[list[InputMessage]]:
    """The assigned partition from `start` (its first offset by default; the
    consumer's reset policy moves an offset retention removed) up to `end`,
    exclusive, in batches. `end` comes from `true_end_offsets`: the ListOffsets
    answer alone may be short of what the partition holds (tansu's is), and a
    replay that stopped there would lose entries."""
    consumer.seek(tp, start)
    # The position, not the last record read: control batches and compacted gaps
    # move it on without records.
    while await consumer.position(tp) < end:
        fetched = await consumer.getmany(tp, timeout_ms=_WAIT_MS, max_records=_BATCH)
        # What was written after the end was found is not this read's.
        records = [r for r in fetched.get(tp, []) if r.offset < end]
        if records:
            yield [
                InputMessage(
                    value=bytes(r.value or b""),
                    topic=tp.topic,
                    partition=tp.partition,
                    offset=r.offset,
                )
                for r in records
            ]


class _Bar:
    def __init__(self, total: int) -> None:
        self.total = total

    def update(self, n: int) -> None:
        return None

    def close(self) -> None:
        return None


def _progress(total: int, enabled: bool) -> _Bar:
    if not enabled:
        return _Bar(total)
    from tqdm import tqdm

    bar: _Bar = tqdm(total=total, unit="entry", desc="replay", file=sys.stderr)  # type: ignore[assignment]
    return bar
