"""`python -m bench recall`: recall latency for one agent holding 10,000 and 100,000 memories.

For each size the agent's store is grown to that many memories (`bench_corpus`),
then recall is timed twice with distinct questions, so no query embedding ever
comes from a cache:

* in process: the recall handler the worker runs (`Runtime(...).handlers()`),
  called with a raw request as the Faust agent would call it; the time runs to
  the reply leaving the handler and covers parsing, the query embedding, every
  Redis round trip, the usage write and encoding the reply;
* Kafka round trip: `GrimoireClient.recall` against a real worker process.

The bare model embedding one query is timed on its own (`query_embed_ms`), and the
in-process recalls' CPU is split (`in_process_cpu_ms`): this process's (the handler's
Python and its query embedding) and the Redis server's, with the Redis commands a
recall runs (a script counts once, and so does each command it runs inside).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from bench.corpus import DERIVED_SIMILARITY, LoadReport, recall_queries
from bench.cpu_sample import redis_cpu_s
from bench.services import (
    corpus_on_redis,
    on_services,
    own_services,
    ready_client,
)
from grimoire.agents.handlers.recall import RecallHandler
from grimoire.agents.ports import InputMessage, MemorySink
from grimoire.infra.embedding.embedder import SentenceTransformerEmbedder
from grimoire.infra.local.worker_process import start_worker, stop_worker
from grimoire.infra.runtime import Runtime
from grimoire.infra.settings import Settings
from grimoire.tables.keyspace import Keyspace
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import RecallRequestV1

logger = logging.getLogger(__name__)

AGENT = "golem-recall"
REPLY_CLIENT = "bench-recall"  # the reply topic is `{prefix}.replies.bench-recall`
WARMUP = 5
DEFAULT_SIZES = (10_000, 100_000)
DEFAULT_QUERIES = 200
# A benchmark of empty answers measures nothing: most questions must find memories.
MIN_NONEMPTY = 0.9
TARGET_P99_MS = 50.0


@dataclass(frozen=True, slots=True)
class Latency:
    p50_ms: float
    p99_ms: float

    @classmethod
    def of(cls, samples_ms: Sequence[float]) -> Latency:
        return cls(
            p50_ms=round(float(np.percentile(samples_ms, 50)), 2),
            p99_ms=round(float(np.percentile(samples_ms, 99)), 2),
        )

    def asdict(self) -> dict[str, float]:
        return {"p50_ms": self.p50_ms, "p99_ms": self.p99_ms}


@dataclass(frozen=True, slots=True)
class Answer:
    """What one recall returned, as far as the benchmark cares."""

    items: int
    timings_ms: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Measured:
    latencies_ms: tuple[float, ...]
    answers: tuple[Answer, ...]

    def check(self, where: str) -> None:
        nonempty = sum(1 for answer in self.answers if answer.items) / len(self.answers)
        if nonempty < MIN_NONEMPTY:
            raise RuntimeError(f"{where}: only {nonempty:.0%} of recalls returned items")

    def items(self) -> dict[str, float]:
        counts = [answer.items for answer in self.answers]
        return {
            "mean": round(float(np.mean(counts)), 2),
            "nonempty": round(sum(1 for c in counts if c) / len(counts), 3),
        }

    def stages(self) -> dict[str, dict[str, float]]:
        """p50/p99 of each stage the handler reports, and what lies outside them."""
        names = sorted({name for answer in self.answers for name in answer.timings_ms})
        stages = {
            name: [answer.timings_ms.get(name, 0.0) for answer in self.answers] for name in names
        }
        if "total" in stages:
            # Parsing the request and encoding the reply: inside `handle`, outside `total`.
            stages["outside_total"] = [
                max(0.0, latency - total)
                for latency, total in zip(self.latencies_ms, stages["total"], strict=True)
            ]
        return {
            name: {"p50": Latency.of(values).p50_ms, "p99": Latency.of(values).p99_ms}
            for name, values in stages.items()
        }


def _request(query: str, index: int, reply_to: str) -> bytes:
    return RecallRequestV1(
        agent_id=AGENT, query=query, reply_to=reply_to, correlation_id=f"bench-{index}"
    ).dumps_json()


class ReplyClock(MemorySink):
    """A sink that notes when the reply left: the caller's wait ends there."""

    def __init__(self, reply_to: str) -> None:
        super().__init__()
        self.reply_to = reply_to
        self.replied_at: float | None = None

    async def send(
        self, topic: str, key: str, value: bytes, *, partition: int | None = None
    ) -> None:
        if topic == self.reply_to:
            self.replied_at = time.perf_counter()
        await super().send(topic, key, value, partition=partition)


async def _handle(
    handler: RecallHandler, sink: ReplyClock, raw: bytes, topic: str
) -> tuple[Answer, float]:
    """The answer, and when its reply left (`time.perf_counter`)."""
    sink.sent.clear()
    sink.replied_at = None
    await handler.handle(InputMessage(value=raw, topic=topic))
    replies = sink.on(sink.reply_to)
    if len(replies) != 1 or sink.replied_at is None:
        raise RuntimeError(f"expected one reply, got {len(replies)}: {sink.sent[:3]}")
    payload = orjson.loads(replies[0])
    if payload.get("error"):
        raise RuntimeError(f"recall failed: {payload['error']}")
    answer = Answer(len(payload.get("items") or ()), payload.get("timings_ms") or {})
    return answer, sink.replied_at


async def measure_in_process(
    handler: RecallHandler,
    sink: ReplyClock,
    topic: str,
    warmup: Sequence[str],
    timed: Sequence[str],
) -> Measured:
    for index, query in enumerate(warmup):
        await _handle(handler, sink, _request(query, -1 - index, sink.reply_to), topic)
    latencies: list[float] = []
    answers: list[Answer] = []
    for index, query in enumerate(timed):
        raw = _request(query, index, sink.reply_to)
        started = time.perf_counter()
        answer, replied = await _handle(handler, sink, raw, topic)
        latencies.append((replied - started) * 1000)
        answers.append(answer)
    return Measured(tuple(latencies), tuple(answers))


async def measure_kafka(
    settings: Settings, log_path: Path, warmup: Sequence[str], timed: Sequence[str]
) -> Measured:
    worker = start_worker(settings, log_path)
    try:
        async with ready_client(settings, timeout=240) as client:
            for query in warmup:
                await client.recall(AGENT, query, timeout=30)
            latencies: list[float] = []
            answers: list[Answer] = []
            for query in timed:
                started = time.perf_counter()
                answer = await client.recall(AGENT, query, timeout=30)
                latencies.append((time.perf_counter() - started) * 1000)
                answers.append(Answer(len(answer.items), answer.timings_ms))
    finally:
        stop_worker(worker)
    return Measured(tuple(latencies), tuple(answers))


@dataclass(frozen=True, slots=True)
class CpuMark:
    """Where CPU stood at one moment: this process's, and the Redis server's with the
    commands it had run (from `INFO cpu` and `INFO commandstats`)."""

    process_s: float
    redis_s: float
    redis_commands: int

    @classmethod
    def of(
        cls, process_s: float, cpu: Mapping[str, Any], commandstats: Mapping[str, Any]
    ) -> CpuMark:
        return cls(
            process_s=process_s,
            redis_s=redis_cpu_s(cpu),
            redis_commands=sum(int(stat["calls"]) for stat in commandstats.values()),
        )

    @classmethod
    async def now(cls, redis: Redis) -> CpuMark:
        process_s = time.process_time()
        return cls.of(process_s, await redis.info("cpu"), await redis.info("commandstats"))

    def per_recall(self, later: CpuMark, recalls: int) -> dict[str, float]:
        """Each side's CPU (ms) and the Redis commands, per recall from here to `later`.
        The Redis side counts the two INFO calls that took the marks: a few
        microseconds against milliseconds a recall."""
        return {
            "process": round((later.process_s - self.process_s) * 1000 / recalls, 2),
            "redis": round((later.redis_s - self.redis_s) * 1000 / recalls, 2),
            "redis_commands": round((later.redis_commands - self.redis_commands) / recalls, 1),
        }


async def measure_embedding(
    embedder: SentenceTransformerEmbedder, warmup: Sequence[str], timed: Sequence[str]
) -> Latency:
    """The bare model on one query at a time, as a recall embeds it."""
    for query in warmup:
        await embedder.embed([query])
    latencies: list[float] = []
    for query in timed:
        started = time.perf_counter()
        await embedder.embed([query])
        latencies.append((time.perf_counter() - started) * 1000)
    return Latency.of(latencies)


class _Queries:
    """Hands out distinct questions: no text is asked twice in one run."""

    def __init__(self, count: int) -> None:
        self._texts = recall_queries(count)
        self._next = 0

    def take(self, count: int) -> list[str]:
        taken = self._texts[self._next : self._next + count]
        self._next += count
        if len(taken) < count:
            raise RuntimeError("ran out of distinct queries")
        return taken


async def settle_search_index(redis: Redis, index_name: str) -> None:
    """Collect the load's index garbage before timing, as a worker's steady state
    would have. Writes that rewrite an indexed hash leave deleted document ids,
    which RediSearch's fork GC cleans every 30 s: at 100,000 memories one pass
    forked a ~1 GB Redis (a ~40 ms stall of the server) and then took 1.5-1.8 s
    of a core, a quarter of this benchmark's timed window on two cores. A Redis
    that refuses `FT.DEBUG` (a managed one) is timed as it stands."""
    try:
        await redis.execute_command("FT.DEBUG", "GC_FORCEINVOKE", index_name)
    except ResponseError as exc:
        logger.warning("could not collect index %s garbage before timing: %s", index_name, exc)


def _load_summary(report: LoadReport, stored: int) -> dict[str, Any]:
    return {
        "memories": stored,
        "candidates": report.candidates,
        "actions": dict(report.actions),
        "model_texts": report.model_texts,
        "derived_vectors": report.derived_vectors,
    }


async def _drop_prefix(redis_url: str, prefix: str) -> None:
    """Remove this run's index and keys from a Redis the benchmark did not start."""
    redis = Redis.from_url(redis_url)
    try:
        keys = Keyspace(prefix)
        await redis.ft(keys.index_name).dropindex(delete_documents=True)
        async for key in redis.scan_iter(match=keys.deployment_pattern, count=1000):
            await redis.delete(key)
    finally:
        await redis.aclose()


async def _run(
    settings: Settings, state_dir: Path, *, sizes: Sequence[int], queries: int
) -> dict[str, Any]:
    kafka_queries = max(1, queries // 2)
    per_size = 2 * WARMUP + queries + kafka_queries
    pool = _Queries(len(sizes) * per_size + WARMUP + queries)
    embedder = SentenceTransformerEmbedder.from_settings(settings)
    query_embed = await measure_embedding(embedder, pool.take(WARMUP), pool.take(queries))
    logger.info("query embedding: %s", query_embed)

    redis, store, loader = await corpus_on_redis(settings, embedder, AGENT)
    sink = ReplyClock(TopicNames(settings.broker.topic_prefix).reply_topic(REPLY_CLIENT))
    runtime = Runtime(settings, sink, embedder)
    topic = TopicNames(settings.broker.topic_prefix).recall_requests
    report: dict[str, Any] = {
        "in_process": {},
        "kafka_round_trip": {},
        "query_embed_ms": {"p50": query_embed.p50_ms, "p99": query_embed.p99_ms},
        "load_s": {},
        "load": {},
        "in_process_items": {},
        "kafka_items": {},
        "in_process_stages_ms": {},
        "in_process_cpu_ms": {},
    }
    try:
        handlers = await runtime.handlers()
        for size in sizes:
            loaded = await loader.load_until(size)
            # The loader keeps one object per memory it wrote (its stand-in for
            # the store's dedupe state), which no worker holds: out of the
            # collector's reach, it cannot add full-collection pauses (~80 ms
            # at 100,000) to the handler being timed.
            gc.collect()
            gc.freeze()
            await settle_search_index(redis, store.index_name)
            stored = await store.count(AGENT)
            logger.info("loaded %d memories in %.1fs: %s", stored, loaded.seconds, loaded)
            label = str(size)
            report["load_s"][label] = round(loaded.seconds, 1)
            report["load"][label] = _load_summary(loaded, stored)

            warmup, timed = pool.take(WARMUP), pool.take(queries)
            await measure_in_process(handlers.recall, sink, topic, warmup, ())
            before = await CpuMark.now(redis)
            local = await measure_in_process(handlers.recall, sink, topic, (), timed)
            after = await CpuMark.now(redis)
            report["in_process_cpu_ms"][label] = before.per_recall(after, queries)
            local.check(f"in-process recall at {size}")
            report["in_process"][label] = Latency.of(local.latencies_ms).asdict()
            report["in_process_items"][label] = local.items()
            report["in_process_stages_ms"][label] = local.stages()
            logger.info("in process at %d: %s", size, report["in_process"][label])

            log_path = state_dir / "log" / f"worker-{settings.broker.topic_prefix}-{size}.log"
            remote = await measure_kafka(
                settings, log_path, pool.take(WARMUP), pool.take(kafka_queries)
            )
            remote.check(f"recall over Kafka at {size}")
            report["kafka_round_trip"][label] = Latency.of(remote.latencies_ms).asdict()
            report["kafka_items"][label] = remote.items()
            logger.info("kafka at %d: %s", size, report["kafka_round_trip"][label])
    finally:
        await runtime.close()
        await redis.aclose()
        embedder.close()
    largest = str(max(sizes))
    report["target_p99_ms"] = TARGET_P99_MS
    report["meets_target"] = report["in_process"][largest]["p99_ms"] <= TARGET_P99_MS
    report["queries"] = {
        "in_process": queries,
        "kafka_round_trip": kafka_queries,
        "query_embed": queries,
        "warmup": WARMUP,
        "distinct": True,
    }
    low, high = DERIVED_SIMILARITY
    report["vectors"] = (
        f"model vectors for the first {loader.pool_size} candidate texts and every state "
        f"digest; the rest derived from a model vector of the same template at cosine "
        f"{low}-{high}"
    )
    report["agent"] = AGENT
    report["cpus"] = os.cpu_count()
    return report


def run_recall_bench(
    settings: Settings, *, sizes: Sequence[int] = DEFAULT_SIZES, queries: int = DEFAULT_QUERIES
) -> dict[str, Any]:
    if not sizes or any(size <= 0 for size in sizes) or list(sizes) != sorted(set(sizes)):
        raise ValueError("sizes must be positive and increasing")
    if queries < 1:
        raise ValueError("queries must be at least 1")
    services = own_services("recall", 19892, 17179)
    started_services = services.up()
    settings = on_services(settings, services, topic_prefix=f"brecall{uuid.uuid4().hex[:6]}")
    try:
        return asyncio.run(_run(settings, services.state_dir, sizes=sizes, queries=queries))
    finally:
        if started_services:
            services.down()
        else:
            asyncio.run(_drop_prefix(settings.redis.url, settings.broker.topic_prefix))
