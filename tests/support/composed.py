"""The worker's own composition run in process: `compose` over a real Redis with the
fake embedder and an in-memory sink, and the journal it writes read back the way
the apply loop's consumer reads it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, is_dataclass, replace

from redis.asyncio import Redis

from grimoire.agents.journal.apply import JournalApplier
from grimoire.agents.ports import InputMessage, MemorySink, WitnessPort
from grimoire.infra.runtime import Composed, compose
from grimoire.infra.settings import Settings
from grimoire.tables.journal.keystore import CachedKeyStore, RedisKeyStore
from grimoire.topics.declarations import TopicNames
from tests.support.embedders import FakeEmbedder

__all__ = [
    "PartitionedSink",
    "by_partition",
    "compose_in_process",
    "fold",
    "journal_of",
    "with_witness",
]


@dataclass
class PartitionedSink(MemorySink):
    """A `MemorySink` that also keeps the partition each record was sent to."""

    partitions: list[int | None] = field(default_factory=list)

    async def send(
        self, topic: str, key: str, value: bytes, *, partition: int | None = None
    ) -> None:
        await super().send(topic, key, value, partition=partition)
        self.partitions.append(partition)


async def compose_in_process(
    settings: Settings, redis: Redis, sink: MemorySink, worker_id: str
) -> Composed:
    """The handlers a worker of `settings` builds (its prefix, its cached key store
    in `redis`), the fake embedder standing in for the model."""
    return await compose(
        settings,
        prefix=settings.topic_prefix,
        redis=redis,
        # Cached, as a worker's: opening an entry then costs no round trip.
        keys=CachedKeyStore(RedisKeyStore(redis, settings.topic_prefix)),
        embedder=FakeEmbedder(),
        sink=sink,
        worker_id=worker_id,
    )


def journal_of(sink: PartitionedSink, topics: TopicNames) -> list[InputMessage]:
    """What the sequencer sent to the journal, as a consumer reads it: per partition,
    offsets in send order (the sequencer always names the partition)."""
    offsets: dict[int, int] = {}
    out: list[InputMessage] = []
    for (topic, _, value), partition in zip(sink.sent, sink.partitions, strict=True):
        if topic != topics.journal:
            continue
        assert partition is not None, "a journal record sent without its partition"
        offset = offsets.get(partition, 0)
        offsets[partition] = offset + 1
        out.append(InputMessage(value=value, topic=topic, partition=partition, offset=offset))
    return out


def by_partition(messages: Sequence[InputMessage]) -> dict[int, list[InputMessage]]:
    """Journal records grouped by partition, partitions in order."""
    out: dict[int, list[InputMessage]] = {}
    for message in messages:
        out.setdefault(message.partition or 0, []).append(message)
    return dict(sorted(out.items()))


async def fold(applier: JournalApplier, messages: Sequence[InputMessage]) -> None:
    """Fold journal records as the worker does: one batch per partition."""
    for batch in by_partition(messages).values():
        await applier.apply(batch)


def with_witness(applier: JournalApplier, witness: WitnessPort) -> JournalApplier:
    """`applier` with every rule of its registry recording through `witness`."""
    rules = {
        kind: replace(rule, witness=witness) if is_dataclass(rule) else rule
        for kind, rule in applier.rules.items()
    }
    return replace(applier, rules=rules)
