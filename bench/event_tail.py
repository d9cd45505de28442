"""What the pipeline says it did, as a bench reads it: memory-events and
dead-letters tailed from their ends (assigned partitions, no consumer group), each
event handed to the bench's own bookkeeping."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from grimoire.topics.declarations import TopicNames
from grimoire.topics.offsets import true_end_offsets

__all__ = ["EventTail"]


class EventTail:
    """Subclasses say what an event means (`note`) and what to do after each batch
    read (`batch_read`: wake whoever waits on it)."""

    task_name = "bench-event-tail"

    def __init__(self, bootstrap: str, topics: TopicNames, partitions: int) -> None:
        self._bootstrap = bootstrap
        self._topics = topics
        self._partitions = partitions
        self._consumer: AIOKafkaConsumer | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self._bootstrap,
            enable_auto_commit=False,
            fetch_max_wait_ms=20,
            max_partition_fetch_bytes=4 << 20,
        )
        await self._consumer.start()
        partitions = [
            TopicPartition(topic, n)
            for topic in (self._topics.memory_events, self._topics.dead_letters)
            for n in range(self._partitions)
        ]
        # Resolved now, by reading (tansu's ListOffsets undercounts): nothing
        # published later is skipped, nothing published before is taken as new.
        await true_end_offsets(self._consumer, partitions)
        self._reader = asyncio.create_task(self._read(), name=self.task_name)

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._consumer is not None:
            await self._consumer.stop()

    async def _read(self) -> None:
        assert self._consumer is not None
        while True:
            batches = await self._consumer.getmany(timeout_ms=200, max_records=5_000)
            if not batches:
                continue
            now = time.monotonic()
            for messages in batches.values():
                for message in messages:
                    try:
                        event = orjson.loads(message.value or b"")
                    except orjson.JSONDecodeError:
                        continue
                    if isinstance(event, dict):
                        self.note(message.topic, event, now)
            await self.batch_read()

    def note(self, topic: str, event: dict[str, Any], now: float) -> None:
        raise NotImplementedError

    async def batch_read(self) -> None:
        return None
