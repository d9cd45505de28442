"""The journal lag, read from the broker at scrape time: per journal partition,
its end offset less the offset the worker group (Faust's group is the app id) has
committed. The end is read, not asked for (`true_end_offsets`: tansu's ListOffsets
undercounts); a few requests to the broker, kept a few seconds by the scrape's cache."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from grimoire.topics.offsets import true_end_offsets
from grimoire.topics.security import KafkaSecurity

__all__ = ["JournalLagProbe"]

logger = logging.getLogger(__name__)


class JournalLagProbe:
    """Call it for {partition: entries behind}; None when the broker could not say."""

    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str,
        journal_topic: str,
        partitions: int,
        *,
        timeout_s: float = 2.0,
        security: KafkaSecurity | None = None,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self._security = security or KafkaSecurity()
        self._group_id = group_id
        self._partitions = [TopicPartition(journal_topic, p) for p in range(partitions)]
        self._timeout_s = timeout_s
        self._admin: AIOKafkaAdminClient | None = None
        self._consumer: AIOKafkaConsumer | None = None

    async def _start(self) -> tuple[AIOKafkaAdminClient, AIOKafkaConsumer]:
        if self._admin is None or self._consumer is None:
            admin = AIOKafkaAdminClient(
                bootstrap_servers=self._bootstrap, **self._security.aiokafka_kwargs()
            )
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self._bootstrap,
                enable_auto_commit=False,
                **self._security.aiokafka_kwargs(),
            )
            await admin.start()
            await consumer.start()
            self._admin, self._consumer = admin, consumer
        return self._admin, self._consumer

    async def __call__(self) -> dict[int, int] | None:
        try:
            return await asyncio.wait_for(self._read(), self._timeout_s)
        except Exception as failure:  # a scrape without the lag, never a failed scrape
            logger.warning("journal lag unavailable: %s", failure)
            return None

    async def _read(self) -> dict[int, int]:
        admin, consumer = await self._start()
        committed = await admin.list_consumer_group_offsets(
            self._group_id, partitions=self._partitions
        )
        # Left paused: nothing reads on from the ends, and the consumer would poll the broker.
        ends = await true_end_offsets(
            consumer, self._partitions, timeout_s=self._timeout_s, paused=True
        )
        unread = [tp for tp in self._partitions if _offset(committed.get(tp)) is None]
        # Nothing committed yet: the group starts at the log's start (retention may
        # have moved it past 0).
        starts = await consumer.beginning_offsets(unread) if unread else {}
        lag: dict[int, int] = {}
        for tp in self._partitions:
            done = _offset(committed.get(tp))
            if done is None:
                done = int(starts.get(tp, 0))
            lag[tp.partition] = max(0, int(ends.get(tp, 0)) - done)
        return lag

    async def close(self) -> None:
        consumer, admin = self._consumer, self._admin
        self._admin = self._consumer = None
        if consumer is not None:
            await consumer.stop()
        if admin is not None:
            await admin.close()


def _offset(mark: Any) -> int | None:
    offset = getattr(mark, "offset", -1)
    return int(offset) if offset is not None and offset >= 0 else None
