"""The worker's own composition run in process: `compose` over a real Redis with the
fake embedder and an in-memory sink, and the journal it writes read back the way
the apply loop's consumer reads it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import is_dataclass, replace

from redis.asyncio import Redis

from grimoire.agents.journal.apply import JournalApplier
from grimoire.agents.ports import InputMessage, MemorySink, WitnessPort
from grimoire.infra.runtime import Composed, compose
from grimoire.infra.settings import Settings
from grimoire.tables.journal.keystore import CachedKeyStore, RedisKeyStore
from tests.support.embedders import FakeEmbedder

__all__ = [
    "by_partition",
    "compose_in_process",
    "fold",
    "with_witness",
]


async def compose_in_process(
    settings: Settings, redis: Redis, sink: MemorySink, worker_id: str
) -> Composed:
    """The handlers a worker of `settings` builds (its prefix, its cached key store
    in `redis`), the fake embedder standing in for the model."""
    return await compose(
        settings,
        prefix=settings.broker.topic_prefix,
        redis=redis,
        # Cached, as a worker's: opening an entry then costs no round trip.
        keys=CachedKeyStore(RedisKeyStore(redis, settings.broker.topic_prefix)),
        embedder=FakeEmbedder(),
        sink=sink,
        worker_id=worker_id,
    )


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
