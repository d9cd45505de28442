"""The staging purge: what forgetting needs of the broker (docs/design.md §10, "Forgetting").

Forgetting an agent erases its state and destroys its journal keys, but its
plaintext also sits on topics the deployment controls. Every
`staging_purge_interval_s` a pass deletes

- on each input and query topic (episodes, tool events, transcripts, outcomes,
  facts, commands, maintenance, recall requests, fact queries): the records the
  workers' group has committed, i.e. what the sequencer journaled (sealed with the
  agent's key) or a read handler answered; only whole batches below the committed
  offset;
- on dead letters, memory events and every reply topic (`{prefix}.replies.*`): the
  records older than `staging_retention_s`;

and never the journal. So a record of a forgotten agent is unreadable at most
`staging_retention_s + staging_purge_interval_s` after it was written (an input: one
interval after it was sequenced), bytes on disk included where the store can say
(docs/security.md, "Forgetting and its bound").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import faust
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from grimoire.infra.ports import BrokerView, StagingStore
from grimoire.infra.purge_kafka import KafkaRecordsStore
from grimoire.infra.purge_plan import Purged, Vacuum, forget_bound_s
from grimoire.infra.purge_s3 import TansuObjectStore
from grimoire.infra.settings import Settings
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.redis_client import create_redis
from grimoire.topics.declarations import TopicNames
from grimoire.topics.security import KafkaSecurity

if TYPE_CHECKING:
    from grimoire.infra.local.services import LocalServices

__all__ = [
    "PURGE_COUNTERS",
    "PurgeReport",
    "RedisPurgeTally",
    "StagingPurge",
    "StagingTargets",
    "build_staging_purge",
    "local_staging_settings",
    "register_staging_purge",
]

logger = logging.getLogger(__name__)

# The object store's bucket `LocalServices` gives tansu (s3://tansu/).
_LOCAL_BUCKET: Final = "tansu"
# `LocalServices` puts SeaweedFS's master on the port after the S3 gateway.
_LOCAL_MASTER_OFFSET: Final = 1


@dataclass(frozen=True, slots=True)
class StagingTargets:
    """The topics a pass purges, by rule; never the journal."""

    consumed: tuple[str, ...]
    expiring: tuple[str, ...]
    reply_namespace: str
    journal: str

    @classmethod
    def of(cls, prefix: str) -> StagingTargets:
        names = TopicNames(prefix)
        return cls(
            consumed=(
                names.episodes,
                names.tool_events,
                names.transcripts,
                names.outcomes,
                names.facts,
                names.commands,
                names.maintenance,
                names.clade,
                names.recall_requests,
                names.fact_queries,
            ),
            expiring=(names.dead_letters, names.memory_events),
            reply_namespace=names.reply_namespace,
            journal=names.journal,
        )

    def expiring_among(self, existing: set[str]) -> list[str]:
        replies = sorted(t for t in existing if t.startswith(self.reply_namespace))
        return [t for t in (*self.expiring, *replies) if t in existing and t != self.journal]

    def consumed_among(self, existing: set[str]) -> list[str]:
        return [t for t in self.consumed if t in existing and t != self.journal]


_NOTHING: Final = Purged()


@dataclass(frozen=True, slots=True)
class PurgeReport:
    consumed: Purged = _NOTHING
    expired: Purged = _NOTHING
    topics: int = 0
    failures: int = 0
    vacuum: Vacuum = Vacuum.NONE
    seconds: float = 0.0
    per_topic: Mapping[str, Purged] = field(default_factory=dict)

    @property
    def total(self) -> Purged:
        return self.consumed + self.expired

    @property
    def vacuumed(self) -> bool:
        return self.vacuum is not Vacuum.NONE

    @property
    def bytes_pending(self) -> bool:
        """Whether deleted records' bytes may still be on the store's disk until the
        next pass (its vacuum came before the volume servers had every deletion)."""
        return self.vacuum is Vacuum.EARLY


class StagingPurge:
    """One pass at a time (`run_once`); the worker's leader calls it on a timer."""

    def __init__(
        self,
        store: StagingStore,
        broker: BrokerView,
        *,
        prefix: str,
        group: str,
        retention_s: float,
        interval_s: float,
        clock: Callable[[], float] = time.time,
        tally: Callable[[PurgeReport], Awaitable[None]] | None = None,
    ) -> None:
        self._store = store
        self._broker = broker
        self._targets = StagingTargets.of(prefix)
        self._group = group
        self._retention_s = retention_s
        self._interval_s = interval_s
        self._clock = clock
        self._tally = tally

    @property
    def bound_s(self) -> float:
        """How long a record of a forgotten agent may stay readable (see the module)."""
        return forget_bound_s(self._retention_s, self._interval_s)

    @property
    def interval_s(self) -> float:
        return self._interval_s

    async def run_once(self) -> PurgeReport:
        started = time.perf_counter()
        cutoff = self._clock() - self._retention_s
        existing = await self._broker.topics()
        consumed_topics = self._targets.consumed_among(existing)
        expiring_topics = self._targets.expiring_among(existing)
        committed = await self._broker.committed(self._group, consumed_topics)
        per_topic: dict[str, Purged] = {}
        consumed = expired = Purged()
        failures = 0
        # One topic failing (a listing timing out) leaves the others to this pass and
        # itself to the next.
        for topic in consumed_topics:
            try:
                got = await self._store.delete_consumed(topic, committed.get(topic, {}))
            except Exception:
                failures += 1
                logger.exception("purging %s failed; the next pass tries again", topic)
                continue
            consumed += got
            if got:
                per_topic[topic] = got
        for topic in expiring_topics:
            try:
                got = await self._store.delete_expired(topic, cutoff)
            except Exception:
                failures += 1
                logger.exception("purging %s failed; the next pass tries again", topic)
                continue
            expired += got
            if got:
                per_topic[topic] = got
        vacuum = await self._store.settle()
        report = PurgeReport(
            consumed=consumed,
            expired=expired,
            topics=len(consumed_topics) + len(expiring_topics),
            failures=failures,
            vacuum=vacuum,
            seconds=time.perf_counter() - started,
            per_topic=per_topic,
        )
        _log(report)
        if self._tally is not None:
            await self._tally(report)
        return report

    async def close(self) -> None:
        await self._store.close()
        await self._broker.close()


class KafkaBrokerView:
    """`BrokerView` over an admin client, made on first use (aiokafka's clients
    belong to the event loop they are made in; the worker builds this before its
    loop runs)."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        security: KafkaSecurity | None = None,
        admin: AIOKafkaAdminClient | None = None,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self._security = security or KafkaSecurity()
        self._admin = admin
        self._started = admin is not None

    async def _start(self) -> AIOKafkaAdminClient:
        if self._admin is None:
            self._admin = AIOKafkaAdminClient(
                bootstrap_servers=self._bootstrap, **self._security.aiokafka_kwargs()
            )
        if not self._started:
            await self._admin.start()
            self._started = True
        return self._admin

    async def topics(self) -> set[str]:
        admin = await self._start()
        return set(await admin.list_topics())

    async def committed(self, group: str, topics: Sequence[str]) -> dict[str, dict[int, int]]:
        if not topics:
            return {}
        admin = await self._start()
        described = await admin.describe_topics(list(topics))
        # Named one by one: tansu drops the connection on an OffsetFetch for all topics.
        tps = [
            TopicPartition(entry["topic"], int(part["partition"]))
            for entry in described
            if not entry.get("error_code")
            for part in entry.get("partitions", [])
        ]
        if not tps:
            return {}
        marks = await admin.list_consumer_group_offsets(group, partitions=tps)
        found: dict[str, dict[int, int]] = {}
        for tp, mark in marks.items():
            offset = getattr(mark, "offset", -1)
            if offset is not None and offset > 0:
                found.setdefault(tp.topic, {})[tp.partition] = int(offset)
        return found

    async def close(self) -> None:
        if self._started and self._admin is not None:
            self._started = False
            await self._admin.close()
        self._admin = None


def build_staging_purge(
    settings: Settings,
    *,
    group: str | None = None,
    tally: Callable[[PurgeReport], Awaitable[None]] | None = None,
) -> StagingPurge | None:
    """The purge `settings.staging.purge` asks for (None: off). `group`: the workers'
    consumer group (Faust's is the app id)."""
    mode = settings.staging.purge
    if mode == "off":
        return None
    security = settings.kafka_security
    store: StagingStore
    if mode == "s3":
        if not settings.staging.s3_url:
            raise ValueError("GRIMOIRE_STAGING_PURGE=s3 needs GRIMOIRE_STAGING_S3_URL")
        store = TansuObjectStore(
            settings.staging.s3_url,
            settings.staging.s3_bucket,
            vacuum_url=settings.staging.s3_vacuum_url,
        )
    else:
        store = KafkaRecordsStore(settings.bootstrap_servers, security=security)
    return StagingPurge(
        store,
        KafkaBrokerView(settings.bootstrap_servers, security=security),
        prefix=settings.broker.topic_prefix,
        group=group or settings.worker.app_id,
        retention_s=settings.staging.retention_s,
        interval_s=settings.staging.purge_interval_s,
        tally=tally,
    )


def local_staging_settings(services: LocalServices) -> dict[str, Any]:
    """The settings that turn the purge on against a `LocalServices` stack: its
    durable profile's object store (`grimoire up`); nothing for the memory profile,
    whose broker can delete nothing."""
    url = services.object_store_url
    if url is None:
        return {}
    master = f"http://127.0.0.1:{services.ports.s3 + _LOCAL_MASTER_OFFSET}"
    return {
        "staging_purge": "s3",
        "staging_s3_url": url,
        "staging_s3_bucket": _LOCAL_BUCKET,
        "staging_s3_vacuum_url": master,
    }


# -- in the worker ----------------------------------------------------------------------------
# One pass at a time for the whole deployment is enough (a pass reads the group's
# committed offsets, which cover every worker's partitions), so it runs on the timer
# of the group's leader: Faust elects one per group (the member holding its leader
# topic's one partition), whatever roles the members serve.

#: Fields of the metrics hash a pass adds to.
PURGE_COUNTERS: Final = (
    "staging_purge_passes",
    "staging_purged_batches",
    "staging_purged_records",
    "staging_purged_bytes",
    "staging_purge_failures",
    "staging_vacuums_early",
)


class RedisPurgeTally:
    """Adds each pass's counts to the deployment's metrics hash."""

    def __init__(self, redis: Any, prefix: str) -> None:
        self._redis = redis
        self._key = Keyspace(prefix).metrics

    async def __call__(self, report: PurgeReport) -> None:
        total = report.total
        counts = (
            1,
            total.batches,
            total.records,
            total.bytes,
            report.failures,
            int(report.bytes_pending),
        )
        async with self._redis.pipeline(transaction=False) as pipe:
            for name, value in zip(PURGE_COUNTERS, counts, strict=True):
                if value:
                    pipe.hincrby(self._key, name, value)
            await pipe.execute()

    async def close(self) -> None:
        await self._redis.aclose()


def register_staging_purge(app: faust.App, settings: Settings) -> StagingPurge | None:
    """Add the purge's leader timer to `app` (None, and a warning, when it is off)."""
    if settings.staging.purge == "off":
        logger.warning(
            "staging purge off (GRIMOIRE_STAGING_PURGE): inputs, dead letters, memory "
            "events and replies stay on the broker, so forgetting has no bound there"
        )
        return None
    tally = RedisPurgeTally(create_redis(settings.redis.url, 2), settings.broker.topic_prefix)
    # Faust's consumer group is its app id.
    purge = build_staging_purge(settings, group=app.conf.id, tally=tally)
    if purge is None:
        return None
    logger.info(
        "staging purge (%s) every %.0fs, retention %.0fs: a forgotten agent's records "
        "leave the broker within %.0fs",
        settings.staging.purge,
        purge.interval_s,
        settings.staging.retention_s,
        purge.bound_s,
    )

    async def staging_purge() -> None:
        try:
            await purge.run_once()
        except Exception:
            # A pass that could not reach the broker or the store is retried by the
            # next tick; the worker goes on.
            logger.exception("staging purge pass failed")

    app.timer(interval=purge.interval_s, on_leader=True, name="grimoire.staging_purge")(
        staging_purge
    )

    @app.on_before_shutdown.connect
    async def _close_purge(_app: Any, /, *_: Any, **__: Any) -> None:
        await purge.close()
        await tally.close()

    return purge


def _log(report: PurgeReport) -> None:
    total = report.total
    if report.bytes_pending:
        logger.warning(
            "staging purge: the volume servers had not counted every deletion when the "
            "store was vacuumed; those records' bytes stay on its disk until the next "
            "pass vacuums again"
        )
    if not total and not report.failures and not report.vacuumed:
        logger.debug("staging purge: nothing to delete (%.2fs)", report.seconds)
        return
    logger.info(
        "staging purge: %d batches (%d records, %d bytes) consumed, %d batches (%d records) "
        "expired on %d topics in %.2fs%s%s",
        report.consumed.batches,
        report.consumed.records,
        report.consumed.bytes,
        report.expired.batches,
        report.expired.records,
        len(report.per_topic),
        report.seconds,
        ", vacuumed" if report.vacuumed else "",
        f", {report.failures} topics failed" if report.failures else "",
    )
