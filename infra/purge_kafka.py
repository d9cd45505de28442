"""Purging an Apache Kafka cluster's staging topics with DeleteRecords.

DeleteRecords moves a partition's log start: what lies before it cannot be fetched
from that moment, and Kafka deletes a segment lying wholly before it at its next
retention check (`log.retention.check.interval.ms`). The active segment is never
deleted, so the staging topics need `segment.ms` (or the broker's `log.roll.ms`)
no longer than the retention for their bytes to leave the disk within the bound
(docs/security.md, "Forgetting and its bound").

The group's committed offsets and the topics come from `BrokerView`
(infra/purge.py), as for any store.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

from grimoire.infra.purge_plan import Purged, Vacuum
from grimoire.topics.security import KafkaSecurity

__all__ = ["KafkaRecordsStore"]

logger = logging.getLogger(__name__)


class KafkaRecordsStore:
    """A `StagingStore` over DeleteRecords; started on first use."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        security: KafkaSecurity | None = None,
        admin: AIOKafkaAdminClient | None = None,
        consumer: AIOKafkaConsumer | None = None,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self._security = security or KafkaSecurity()
        self._given = (admin, consumer)
        self._clients: tuple[AIOKafkaAdminClient, AIOKafkaConsumer] | None = None

    async def _start(self) -> tuple[AIOKafkaAdminClient, AIOKafkaConsumer]:
        # Made here, not in __init__: aiokafka's clients belong to the running loop.
        if self._clients is None:
            admin, consumer = self._given
            if admin is None or consumer is None:
                kwargs = self._security.aiokafka_kwargs()
                admin = AIOKafkaAdminClient(bootstrap_servers=self._bootstrap, **kwargs)
                # Outside any group: it only asks for offsets (log starts, ends, by time).
                consumer = AIOKafkaConsumer(
                    bootstrap_servers=self._bootstrap, enable_auto_commit=False, **kwargs
                )
                await admin.start()
                await consumer.start()
            self._clients = (admin, consumer)
        return self._clients

    async def delete_consumed(self, topic: str, committed: Mapping[int, int]) -> Purged:
        targets = {
            TopicPartition(topic, partition): offset
            for partition, offset in committed.items()
            if offset > 0
        }
        return await self._delete_before(targets)

    async def delete_expired(self, topic: str, cutoff: float) -> Purged:
        admin, consumer = await self._start()
        tps = await self._partitions(admin, topic)
        if not tps:
            return Purged()
        found = await consumer.offsets_for_times({tp: int(cutoff * 1000) for tp in tps})
        # No record at or after the cutoff: the whole partition is older.
        missing = [tp for tp in tps if found.get(tp) is None]
        ends = await consumer.end_offsets(missing) if missing else {}
        targets: dict[TopicPartition, int] = {}
        for tp in tps:
            mark = found.get(tp)
            targets[tp] = int(mark.offset) if mark is not None else int(ends.get(tp, 0))
        return await self._delete_before(targets)

    async def settle(self) -> Vacuum:
        # Kafka deletes segments itself (see the module's docstring).
        return Vacuum.NONE

    async def close(self) -> None:
        clients, self._clients = self._clients, None
        if clients is not None and self._given == (None, None):
            admin, consumer = clients
            await consumer.stop()
            await admin.close()

    @staticmethod
    async def _partitions(admin: AIOKafkaAdminClient, topic: str) -> list[TopicPartition]:
        described = await admin.describe_topics([topic])
        return sorted(
            TopicPartition(topic, int(part["partition"]))
            for entry in described
            if entry.get("topic") == topic and not entry.get("error_code")
            for part in entry.get("partitions", [])
        )

    async def _delete_before(self, targets: Mapping[TopicPartition, int]) -> Purged:
        if not targets:
            return Purged()
        admin, consumer = await self._start()
        starts = await consumer.beginning_offsets(list(targets))
        wanted = {
            tp: RecordsToDelete(before_offset=offset)
            for tp, offset in targets.items()
            if offset > int(starts.get(tp, 0))
        }
        if not wanted:
            return Purged()
        lows = await admin.delete_records(wanted)
        moved = {tp: int(lows.get(tp, starts[tp])) - int(starts[tp]) for tp in wanted}
        logger.debug("deleted records: %s", moved)
        return Purged(
            batches=sum(1 for count in moved.values() if count > 0),
            records=sum(max(0, count) for count in moved.values()),
        )
