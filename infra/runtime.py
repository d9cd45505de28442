"""The worker's long-lived resources (Redis, index, model) and the handlers built on them."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from aiokafka import AIOKafkaConsumer, TopicPartition
from redis.asyncio import Redis

from grimoire.agents.dead_letters import CountedDeadLetters
from grimoire.agents.faust_agents import Handlers, WorkerTopology
from grimoire.agents.folding import fold_rules
from grimoire.agents.handlers.clade import AutoShare, CladeReceiver, CladeSender, Sharing
from grimoire.agents.handlers.commands import CommandHandler, StepLog
from grimoire.agents.handlers.evidence import EvidenceWriter
from grimoire.agents.handlers.facts import FactHandler, FactQueryHandler
from grimoire.agents.handlers.forgetting import Forgetting
from grimoire.agents.handlers.importing import ImportHandler
from grimoire.agents.handlers.ingest import IngestHandler
from grimoire.agents.handlers.outcomes import OutcomeHandler
from grimoire.agents.handlers.recall import RecallHandler
from grimoire.agents.handlers.retraction import RetractionHandler
from grimoire.agents.handlers.usage import StoreUsage
from grimoire.agents.journal.apply import JournalApplier
from grimoire.agents.journal.publication import Publication
from grimoire.agents.journal.sequencer import Sequencer
from grimoire.agents.journal.witness import PublishedWitness
from grimoire.agents.maintenance.compaction_task import CompactionRunner, CompactionTask
from grimoire.agents.maintenance.curator_task import CuratorRunner
from grimoire.agents.maintenance.decay_task import DecayRunner
from grimoire.agents.maintenance.handler import (
    MaintenanceHandler,
    TaskRunner,
)
from grimoire.agents.maintenance.pressure import CountingSink, WorkerPressure
from grimoire.agents.ports import Embedder, EventSink
from grimoire.infra.embedding.embedder import CachingEmbedder, SentenceTransformerEmbedder
from grimoire.infra.settings import Settings
from grimoire.streams.maintenance.compaction import CompactionBudget, CompactionPolicy
from grimoire.streams.maintenance.schedule import Task, assess_pressure
from grimoire.tables.clade.store import RedisCladeCopies, RedisCladeRegistry, RedisPublishedStore
from grimoire.tables.config.store import RedisConfigStore, RedisDefaultConfig
from grimoire.tables.exceptions import is_outage, is_store_lost
from grimoire.tables.facts.store import RedisFactStore
from grimoire.tables.journal.keystore import CachedKeyStore, RedisKeyStore
from grimoire.tables.journal.marks import RedisAppliedMarks
from grimoire.tables.journal.outbox import RedisOutbox
from grimoire.tables.journal.progress import RedisJournalProgress
from grimoire.tables.journal.witness_due import RedisWitnessDue
from grimoire.tables.learn.store import RedisLearningStore
from grimoire.tables.maintenance.compaction_store import RedisCompactionStore
from grimoire.tables.maintenance.curator_store import RedisCuratorStore
from grimoire.tables.maintenance.ledger import MaintenanceLedgerStore, agent_watermarks
from grimoire.tables.memory.counters import RedisDeadLetterCounts
from grimoire.tables.memory.imported import ImportWriter
from grimoire.tables.memory.outcome_effects import RedisOutcomeEffects
from grimoire.tables.memory.reads import RedisRecallReads
from grimoire.tables.memory.recall_source import KnnPolicy
from grimoire.tables.memory.recall_view import RedisRecallViews
from grimoire.tables.memory.store import RedisIngestStore, RedisMemoryStore
from grimoire.tables.memory.usage import RedisUsageLedger
from grimoire.tables.memory.writes import RedisMemoryWrites
from grimoire.tables.ports.journal import KeyStore
from grimoire.tables.redis_client import create_redis
from grimoire.tables.schema.store_format import claim_store_format
from grimoire.tables.schema.vector_space import claim_vector_space, index_holds_documents
from grimoire.tables.trust.api_keys import Authenticator, RedisApiKeyStore, RedisAuthMetrics
from grimoire.tables.trust.derivations import RedisDerivationStore
from grimoire.tables.trust.erasure import RedisAgentEraser
from grimoire.tables.trust.witness_store import RedisWitnessLog, Witness
from grimoire.topics.declarations import TopicNames

logger = logging.getLogger(__name__)


def _settle_heap() -> None:
    """Move what start-up built (torch, transformers, the model: ~500,000
    objects) out of the collector's reach. Otherwise every full collection walks
    all of it: a ~300 ms pause inside whichever recall triggers it, about one in
    a few hundred. They never become garbage, so nothing is lost."""
    gc.collect()
    gc.freeze()


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Runtime:
    """Builds the handlers once, on first use, and closes what it opened."""

    def __init__(
        self,
        settings: Settings,
        sink: EventSink,
        embedder: Embedder | None = None,
        lag: Callable[[], int] | None = None,
    ):
        self._settings = settings
        topics = TopicNames(settings.broker.topic_prefix)
        self._counting = CountingSink(
            sink, topics.dead_letters, topics.memory_events, settings.worker.block_interval_s
        )
        self._sink: EventSink = self._counting
        self._lag = lag or (lambda: 0)
        self.worker_id = worker_id()
        self._embedder = embedder
        self._handlers: Handlers | None = None
        self._lock = asyncio.Lock()
        self._redis: Redis | None = None
        self._keystore_redis: Redis | None = None
        self._composed: Composed | None = None
        self._embedder_in_use: Embedder | None = None
        # Journal partitions checked against the store's mark since they were
        # assigned (`catch_up`); one check at a time, so the apply loop's first batch
        # waits for a check the assignment started.
        self._caught_up: set[int] = set()
        self._catching_up = asyncio.Lock()

    async def handlers(self) -> Handlers:
        if self._handlers is None:
            async with self._lock:
                if self._handlers is None:
                    self._handlers = await self._build()
                    _settle_heap()
        return self._handlers

    async def _build(self) -> Handlers:
        settings = self._settings
        embedder = self._embedder
        if embedder is None:
            loop = asyncio.get_running_loop()
            embedder = await loop.run_in_executor(
                None,
                lambda: SentenceTransformerEmbedder.from_settings(settings),
            )
        embedder = CachingEmbedder(embedder, capacity=settings.embedding.cache_size)
        self._redis = create_redis(settings.redis.url, settings.redis.max_connections)
        self._keystore_redis = (
            create_redis(settings.redis.keystore_url, 8) if settings.redis.keystore_url else None
        )
        keys = CachedKeyStore(
            RedisKeyStore(self._keystore_redis or self._redis, settings.broker.topic_prefix)
        )
        composed = await compose(
            settings,
            prefix=settings.broker.topic_prefix,
            redis=self._redis,
            keys=keys,
            embedder=embedder,
            sink=CountedDeadLetters(
                self._sink,
                TopicNames(settings.broker.topic_prefix).dead_letters,
                RedisDeadLetterCounts(self._redis, settings.broker.topic_prefix),
            ),
            worker_id=self.worker_id,
            keystore_redis=self._keystore_redis,
        )
        self._witness = composed.witness
        self._composed = composed
        self._embedder_in_use = embedder
        logger.info("runtime ready (prefix %s)", settings.broker.topic_prefix)
        return composed.handlers

    async def recover(self, failure: BaseException, journal_partitions: list[int]) -> None:
        """A lost store (Redis came back empty: the index is gone) is recreated and
        this worker's journal partitions folded again from their start, so the
        store is whole again before the batch that failed is retried. Any other
        failure is left to the retry."""
        if not is_store_lost(failure) or self._composed is None:
            return
        from grimoire.infra.replay import refold

        settings = self._settings
        logger.error(
            "the store was lost (%s): recreating it and folding journal partitions %s again",
            failure,
            journal_partitions,
        )
        store = self._composed.store
        await claim_store_format(self._redis, settings.broker.topic_prefix)
        await store.ensure_schema()
        assert self._redis is not None and self._embedder_in_use is not None
        await claim_vector_space(
            self._redis,
            settings.broker.topic_prefix,
            self._embedder_in_use.vector_space,
            has_memories=await index_holds_documents(self._redis, settings.broker.topic_prefix),
        )
        self._composed.witness.invalidate()
        report = await refold(settings, self._composed.handlers.applier, journal_partitions)
        logger.error("store rebuilt from the journal: %s", report)

    async def catch_up(self, partition: int, first_offset: int) -> None:
        """Before a journal partition's first batch since it was assigned: when the
        store's mark (`RedisJournalProgress`) is behind where the group resumes, the
        store lost the fold of the entries between (Redis came back from its
        append-only file without its last second): fold them again first. Entries
        whose effects did survive are recognised by the fold and change nothing."""
        async with self._catching_up:
            if partition not in self._caught_up:
                await self._catch_up(partition, first_offset)
                self._caught_up.add(partition)

    async def catch_up_assigned(self, partitions: Sequence[int]) -> None:
        """Right after an assignment: each journal partition checked from where the
        group resumes, so a store that lost its last writes is whole again before
        anything is read from it, whether or not new entries arrive."""
        if not partitions:
            return
        try:
            resumes = await _committed_journal_offsets(self._settings, partitions)
            for partition in sorted(resumes):
                await self.catch_up(partition, resumes[partition])
        except Exception:
            # The apply loop's first batch checks again from where it starts.
            logger.warning("journal partitions %s not checked at assignment", partitions,
                           exc_info=True)  # fmt: skip

    async def _catch_up(self, partition: int, first_offset: int) -> None:
        handlers = await self.handlers()
        assert self._redis is not None
        progress = RedisJournalProgress(self._redis, self._settings.broker.topic_prefix)
        applied = await progress.load(partition)
        if applied is not None and applied + 1 < first_offset:
            from grimoire.infra.replay import refold

            logger.warning(
                "journal partition %d: the store holds the fold up to offset %d but the "
                "group resumes at %d: folding the entries between again",
                partition,
                applied,
                first_offset,
            )
            report = await refold(
                self._settings, handlers.applier, [partition], start=applied + 1, stop=first_offset
            )
            logger.warning("journal partition %d caught up: %s", partition, report)

    async def applied_through(self, offsets: Mapping[int, int]) -> None:
        """Each journal partition's last offset of a batch the fold finished."""
        assert self._redis is not None
        await RedisJournalProgress(self._redis, self._settings.broker.topic_prefix).advance(offsets)

    def partitions_assigned(self) -> None:
        """After every rebalance: forget the witness heads kept for agents, so each
        is read from the log again. A journal partition this worker held before may
        have been another worker's since, whose records moved its agents' heads on;
        a record built from a kept head would no longer follow the stored chain, and
        its refused append would not undo the decisions of its transaction (they
        would stand with no witness record)."""
        self._caught_up.clear()
        if self._composed is not None:
            self._composed.witness.invalidate()

    def pressure(self) -> str:
        """This worker's load now, as a maintenance command records it."""
        probe = WorkerPressure(self._counting, self._lag)
        return assess_pressure(probe.signals(), self._settings.maintenance_policy).value

    async def known_agents(self) -> AsyncIterator[tuple[str, int]]:
        await self.handlers()
        assert self._redis is not None
        async for agent in agent_watermarks(self._redis, self._settings.broker.topic_prefix):
            yield agent

    async def maintenance_handler(self) -> MaintenanceHandler:
        """The handler the fold's maintenance rule runs (the block cadence and the
        maintenance bench ask it directly)."""
        await self.handlers()
        assert self._composed is not None
        return self._composed.maintenance

    async def maintenance_wanted(self, agent_ids: Sequence[str]) -> list[str]:
        return await (await self.maintenance_handler()).wanted(agent_ids)

    async def close(self) -> None:
        if self._composed is not None:
            # The plain clients of a cluster's masters the schema check opened.
            await self._composed.store.routing.aclose()
        if self._redis is not None:
            await self._redis.aclose()
        if self._keystore_redis is not None:
            await self._keystore_redis.aclose()


async def _committed_journal_offsets(
    settings: Settings, partitions: Sequence[int]
) -> dict[int, int]:
    """Where the worker group resumes each journal partition (partitions it never
    committed are left out: it reads those from their start)."""
    journal = TopicNames(settings.broker.topic_prefix).journal
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers,
        group_id=settings.worker.app_id,
        enable_auto_commit=False,
        **settings.kafka_security.aiokafka_kwargs(),
    )
    await consumer.start()
    try:
        found: dict[int, int] = {}
        for partition in partitions:
            offset = await consumer.committed(TopicPartition(journal, partition))
            if offset is not None and offset >= 0:
                found[partition] = offset
        return found
    finally:
        await consumer.stop()


def model_bytes(embedder: Embedder) -> Callable[[Sequence[str]], Awaitable[list[bytes]]]:
    async def embed(texts: Sequence[str]) -> list[bytes]:
        vectors = await embedder.embed(texts)
        return [np.asarray(vector, dtype=np.float32).tobytes() for vector in vectors]

    return embed


def build_runners(
    redis: Redis, prefix: str, store: RedisMemoryStore, embedder: Embedder, settings: Settings
) -> Mapping[Task, TaskRunner]:
    curator = RedisCuratorStore(redis, prefix)
    return {
        Task.DECAY: DecayRunner(store.decay, settings.maintenance.decay_pass_limit),
        Task.CURATOR: CuratorRunner(curator, model_bytes(embedder), store.decay.reschedule),
        Task.COMPACTION: CompactionRunner(
            CompactionTask(
                RedisCompactionStore(redis, prefix, dims=embedder.dims),
                embedder.embed,
                CompactionPolicy(
                    min_age_ms=int(settings.maintenance.compaction_min_age_h * 3_600_000)
                ),
            ),
            store.decay,
            CompactionBudget(max_clusters=settings.maintenance.compaction_budget),
        ),
    }


def worker_topology(settings: Settings) -> WorkerTopology:
    return WorkerTopology(
        topic_prefix=settings.broker.topic_prefix,
        partitions=settings.broker.partitions,
        embed_batch_size=settings.embedding.batch_size,
        embed_batch_within_s=settings.embedding.batch_within_s,
        journal_batch_size=settings.worker.journal_batch_size,
        recall_concurrency=settings.recall.concurrency,
        maintenance_enabled=settings.maintenance.enabled,
        block_interval_s=settings.worker.block_interval_s,
        roles=settings.roles,
    )


@dataclass(frozen=True, slots=True)
class Composed:
    handlers: Handlers
    store: RedisMemoryStore
    witness: Witness
    # The block cadence asks it which agents are due (`maintenance_wanted`).
    maintenance: MaintenanceHandler


async def compose(
    settings: Settings,
    *,
    prefix: str,
    redis: Redis,
    keys: KeyStore,
    embedder: Embedder,
    sink: EventSink,
    worker_id: str,
    keystore_redis: Redis | None = None,
) -> Composed:
    """Everything that folds the journal into `prefix` and answers recalls from it:
    the worker's handlers, and a replay's (into the same prefix or a new one).

    Tenant keys live in the key store's Redis (`keystore_redis`, else `redis`)
    under the deployment's prefix, beside the journal keys: a replay into another
    prefix checks the same keys."""
    store = RedisMemoryStore(
        redis,
        prefix,
        embedder.dims,
        clock_ms=lambda: int(time.time() * 1000),
        knn_policy=KnnPolicy(
            settings.recall.knn.ef_runtime,
            settings.recall.knn.hybrid_policy or None,
            common_term_docs=settings.recall.bm25.common_term_docs or None,
            common_term_share=settings.recall.bm25.common_term_share,
            common_term_floor=settings.recall.bm25.common_term_floor,
        ),
        decoded_nodes=settings.recall.decoded_nodes,
    )
    # Before the schema: an index over keys of another layout is not to be touched.
    await claim_store_format(redis, prefix)
    await store.ensure_schema()
    await claim_vector_space(
        redis,
        prefix,
        embedder.vector_space,
        has_memories=await index_holds_documents(redis, prefix),
    )
    # Each handler gets the concern it is typed for, all over the store's one core
    # (one decoded-node cache, one set of scripts and routing for the worker).
    core = store.core
    writes = RedisMemoryWrites(core)
    reads = RedisRecallReads(core)
    topics = TopicNames(settings.broker.topic_prefix)
    witness = Witness(RedisWitnessLog(redis, prefix))
    learning = RedisLearningStore(redis, prefix)
    ingest = IngestHandler(
        RedisIngestStore(core),
        embedder,
        sink,
        topics,
        settings.input_limits,
        eidolon_weight=settings.embedding.eidolon_state_weight,
        learning=learning,
    )
    maintenance = MaintenanceHandler(
        ledgers=MaintenanceLedgerStore(redis, prefix),
        field_states=reads,
        runners=build_runners(redis, prefix, store, embedder, settings),
        sink=sink,
        topics=topics,
        worker_id=worker_id,
        block_interval_ms=int(settings.worker.block_interval_s * 1000),
        live_count=reads.count,
        policy=settings.maintenance_policy,
        limits=settings.input_limits,
        lease_ms=int(settings.maintenance.lease_s * 1000),
        decay=core.decay,
        count_estimates=reads,
    )
    authenticator = Authenticator(
        RedisApiKeyStore(keystore_redis or redis, settings.broker.topic_prefix),
        enabled=settings.worker.auth_enabled,
    )
    auth_metrics = RedisAuthMetrics(redis, prefix)
    # Clade membership lives in the key store (kept by a wipe, like tenant keys).
    clade_registry = RedisCladeRegistry(keystore_redis or redis, prefix)
    sequencer = Sequencer(
        keys,
        sink,
        topics,
        settings.input_limits,
        authenticator=authenticator,
        auth_metrics=auth_metrics,
        defaults=RedisDefaultConfig(keystore_redis or redis, prefix),
        partitions=settings.broker.partitions,
        clades=clade_registry,
    )
    steps = StepLog()
    configs = RedisConfigStore(redis, prefix)
    fact_store = RedisFactStore(redis, prefix)
    facts = FactHandler(fact_store, sink, topics, settings.input_limits)
    publication = Publication(witness, RedisOutbox(redis, prefix), sink, topics)
    sharing = Sharing(
        clade_registry,
        RedisPublishedStore(redis, prefix),
        reads.recall_source,
        CladeSender(sink, topics, worker_id),
    )
    derivations = RedisDerivationStore(redis, prefix, dims=embedder.dims)
    clade = CladeReceiver(
        writes,
        RedisCladeCopies(redis, prefix),
        reads.recall_source,
        embedder,
        RetractionHandler(derivations, embedder, curator=RedisCuratorStore(redis, prefix)),
        sink,
        topics,
        settings.input_limits,
        discount=settings.recall.clade_discount,
    )
    rules = fold_rules(
        ingest=ingest,
        outcomes=OutcomeHandler(
            RedisOutcomeEffects(core),
            sink,
            topics,
            settings.input_limits,
            learning=learning,
            configs=configs,
            rerank=settings.ranking_policy.weights,
            evidence=EvidenceWriter(writes, embedder),
            sharing=sharing,
        ),
        maintenance=maintenance,
        usage=StoreUsage(RedisUsageLedger(core), learning),
        commands=CommandHandler(
            retractor=RetractionHandler(
                derivations,
                embedder,
                curator=RedisCuratorStore(redis, prefix),
                witness=steps,
            ),
            eraser=Forgetting(RedisAgentEraser(redis, prefix), keys, witness),
            sink=sink,
            topics=topics,
            limits=settings.input_limits,
            steps=steps,
            configs=configs,
            facts=facts,
            importer=ImportHandler(ImportWriter(redis, prefix), embedder),
            sharing=sharing,
        ),
        witness=PublishedWitness(witness, sink, topics),
        publication=publication,
        configs=configs,
        facts=facts,
        due=RedisWitnessDue(redis, prefix),
        clade=clade,
        auto_share=AutoShare(sharing, configs, RedisCuratorStore(redis, prefix)),
    )
    applier = JournalApplier(
        keys=keys,
        marks=RedisAppliedMarks(redis, prefix),
        rules=rules,
        sink=sink,
        topics=topics,
        max_run=settings.embedding.batch_size,
        is_outage=is_outage,
        publication=publication,
    )
    recall = RecallHandler(
        reads,
        embedder,
        sink,
        topics,
        settings.recall_limits,
        settings.input_limits,
        settings.ranking_policy,
        eidolon_weight=settings.embedding.eidolon_state_weight,
        usage=sequencer,
        configs=configs,
        authenticator=authenticator,
        auth_metrics=auth_metrics,
        learning=learning,
        views=RedisRecallViews(redis, prefix, configs=True, learning=learning is not None),
    )
    fact_queries = FactQueryHandler(
        fact_store,
        sink,
        topics,
        settings.input_limits,
        authenticator=authenticator,
        auth_metrics=auth_metrics,
    )
    return Composed(Handlers(sequencer, applier, recall, fact_queries), store, witness, maintenance)
