"""`python -m bench ingest`: the real pipeline (tansu + Redis + worker) under a generated
stream, against the bare model embedding the same texts in the same run.

Two profiles. `memory`: tansu on its memory engine, Redis without a data file, tenant
keys off (the figures the bench has always reported). `durable`: the stack as `make
run` keeps it, the broker's log in the local S3 store and Redis with its append-only
file, and tenant keys on (every input is checked against its key before it is
journaled): the all-distinct stream runs on it in the same session, and the report
sets its ratio against the memory profile's and counts the broker's bytes on disk per
event."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from redis.asyncio import Redis
from tqdm import tqdm

from bench.cpu_sample import EMBED_LANES, cpu_report, find_service_pids, sample_cpu
from bench.event_stream import BenchEvent, generate
from bench.services import bench_ports, on_services, ready_client, state_root
from grimoire.infra.embedding.embedder import SentenceTransformerEmbedder
from grimoire.infra.local.services import LocalServices
from grimoire.infra.local.worker_process import start_worker, stop_worker
from grimoire.infra.settings import Settings
from grimoire.streams.inbound.events import Accepted, normalize_event
from grimoire.streams.model.records import EventType
from grimoire.streams.trust.tenancy import TenantScope
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.memory.agent_state import AgentStateStore
from grimoire.tables.trust.api_keys import RedisApiKeyStore
from grimoire.topics.client import GrimoireClient
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import EpisodeV1

logger = logging.getLogger(__name__)

PROBES = 30
_PROBE_VOCABULARY = (
    "granite orchid comet lantern harbor violin glacier saffron meadow falcon canyon "
    "ember quartz willow tundra compass marble lotus beacon prairie cobalt juniper "
    "summit thistle atlas cinder delta fjord garnet hazel iris jasper kelp lagoon "
    "mosaic nectar onyx pylon quill raven sierra topaz umber vortex wharf yonder zephyr"
)
_PROBE_WORDS = _PROBE_VOCABULARY.split(" ")


def _event_type(topics: TopicNames, topic: str) -> EventType:
    return {
        topics.episodes: EventType.EPISODE,
        topics.tool_events: EventType.TOOL,
        topics.transcripts: EventType.TRANSCRIPT,
    }[topic]


def _candidate_texts(topics: TopicNames, events: list[BenchEvent], settings: Settings) -> list[str]:
    texts: list[str] = []
    for event in events:
        outcome = normalize_event(
            _event_type(topics, event.topic), event.value, settings.input_limits
        )
        if not isinstance(outcome, Accepted):
            raise RuntimeError(f"generator produced an invalid event: {outcome}")
        texts.extend(c.text for c in outcome.candidates)
    return texts


async def _embed_only(
    embedder: SentenceTransformerEmbedder, texts: list[str], batch: int
) -> tuple[float, float]:
    """Wall seconds and this process's CPU seconds (all threads: the model's
    lanes) for the bare model on `texts`, in the worker's batches."""
    await embedder.embed(texts[:batch])  # warm-up, as the worker is warm
    started, cpu_started = time.perf_counter(), time.process_time()
    for start in range(0, len(texts), batch):
        await embedder.embed(texts[start : start + batch])
    return time.perf_counter() - started, time.process_time() - cpu_started


async def _decided(redis: Redis, state: AgentStateStore, agents: list[str]) -> float:
    # One round trip for every agent's count: the poll shares the two cores with the
    # pipeline it measures (a whole hash per agent, ten times a second, was ~2 % of
    # a core between this process and Redis).
    async with redis.pipeline(transaction=False) as pipe:
        for agent in agents:
            pipe.hget(state.stats_key(agent), "candidates")
        counts = await pipe.execute()
    return sum(float(count) for count in counts if count is not None)


async def _settle(redis: Redis, prefix: str, agents: list[str], quiet_s: float = 2.0) -> float:
    """Seconds until no agent's witness chain grows for `quiet_s` (the worker has
    applied what was journaled during the load), at most a minute."""
    keys = Keyspace(prefix)
    started = time.perf_counter()
    last: list[int] = []
    quiet_since = started
    while time.perf_counter() - started < 60:
        lengths = list(await asyncio.gather(*(redis.xlen(keys.witness(a)) for a in agents)))
        now = time.perf_counter()
        if lengths != last:
            last, quiet_since = lengths, now
        elif now - quiet_since >= quiet_s:
            return quiet_since - started
        await asyncio.sleep(0.2)
    return time.perf_counter() - started


async def _probe_latencies(client: GrimoireClient) -> list[float]:
    """Publish a fresh memory and time until a recall returns it, at a paced rate."""
    latencies: list[float] = []
    rng = random.Random(11)
    for index in range(PROBES):
        # Probes must not be near-duplicates of each other, or admission rightly
        # merges them into the first one instead of storing them.
        words = " ".join(rng.sample(_PROBE_WORDS, 7))
        text = f"alert {index}: {words}"
        published = time.perf_counter()
        await client.publish_episode(
            EpisodeV1(
                agent_id="bench-probe",
                ts=1_790_000_000_000 + index * 12_000,
                text=text,
                episode_type="alert",
                importance=0.9,
            )
        )
        deadline = published + 10.0
        while time.perf_counter() < deadline:
            answer = await client.recall("bench-probe", text, k=3)
            if any(item.text == text for item in answer.items):
                latencies.append((time.perf_counter() - published) * 1000)
                break
            await asyncio.sleep(0.005)
        else:
            latencies.append(10_000.0)
        await asyncio.sleep(0.1)
    return latencies


async def _run_mix(
    base: Settings,
    state_dir: Path,
    embedder: SentenceTransformerEmbedder,
    *,
    events: int,
    agents: int,
    distinct: bool,
    service_pids: dict[str, int],
    api_key: str | None = None,
    broker_data: Path | None = None,
    prefix: str | None = None,
) -> dict[str, Any]:
    settings = base.with_values(topic_prefix=prefix or f"bench{uuid.uuid4().hex[:6]}")
    topics = TopicNames(settings.broker.topic_prefix)
    stream = list(generate(topics, events=events, agents=agents, distinct=distinct))
    texts = _candidate_texts(topics, stream, settings)
    embed_s, embed_cpu_s = await _embed_only(embedder, texts, settings.embedding.batch_size)

    worker = start_worker(
        settings, state_dir / "log" / f"worker-{settings.broker.topic_prefix}.log"
    )
    redis = Redis.from_url(settings.redis.url)
    try:
        async with ready_client(settings, timeout=180, api_key=api_key) as client:
            state = AgentStateStore(redis, settings.broker.topic_prefix)
            agent_ids = sorted({event.key for event in stream})
            pids = {"worker": worker.pid, **service_pids, "bench": os.getpid()}
            cpu_before = sample_cpu(pids, split=["worker"])
            bytes_before = _disk_bytes(broker_data)
            started = time.perf_counter()
            for event in stream:
                await client.publish_raw(event.topic, event.key, event.value, wait=False)
            await client.flush()
            # The load's progress: candidates the workers have decided so far.
            bar = tqdm(total=len(texts), unit="candidate", desc="bench ingest", file=sys.stderr)
            while (decided := int(await _decided(redis, state, agent_ids))) < len(texts):
                bar.update(decided - bar.n)
                await asyncio.sleep(0.1)
            bar.update(len(texts) - bar.n)
            bar.close()
            ingest_s = time.perf_counter() - started
            cpu_after = sample_cpu(pids, split=["worker"])
            # Texts the model ran during the load (the probes' come later).
            load_misses = float(
                await redis.hget(Keyspace(settings.broker.topic_prefix).metrics, "embed_misses")
                or 0
            )
            # Maintenance commands issued during the load sit behind it in the
            # journal: the probes time a fresh event on a worker that has caught
            # up, and the catching up is reported on its own.
            settle_s = await _settle(redis, settings.broker.topic_prefix, agent_ids)
            # The broker's bytes for the load: the inputs, their journal entries, the
            # memory-events, offsets; the probes' come after.
            broker_bytes = _disk_bytes(broker_data) - bytes_before
            latencies = await _probe_latencies(client)
            stats = await asyncio.gather(*(state.stats(agent) for agent in agent_ids))
            metrics = {
                k.decode(): float(v)
                for k, v in (
                    await redis.hgetall(Keyspace(settings.broker.topic_prefix).metrics)
                ).items()
            }
    finally:
        await redis.aclose()
        stop_worker(worker)

    admitted = sum(s.get("admit", 0.0) + s.get("quarantine", 0.0) for s in stats)
    hits, misses = metrics.get("embed_hits", 0.0), metrics.get("embed_misses", 0.0)
    events_per_s = len(stream) / ingest_s
    embed_only_per_s = len(stream) / embed_s
    cpu = cpu_report(cpu_before, cpu_after, ingest_s)
    report: dict[str, Any] = {
        "events": len(stream),
        "candidates": len(texts),
        "distinct_text_ratio": round(len(set(texts)) / len(texts), 4),
        "events_per_s": round(events_per_s, 1),
        "embed_only_per_s": round(embed_only_per_s, 1),
        "ratio": round(events_per_s / embed_only_per_s, 3),
        "ingest_to_recallable_ms": {
            "p50": round(float(np.percentile(latencies, 50)), 1),
            "p99": round(float(np.percentile(latencies, 99)), 1),
            "probes": len(latencies),
        },
        "settle_s": round(settle_s, 1),
        "admission_rate": round(admitted / len(texts), 4),
        "cache_hit_rate": round(hits / (hits + misses), 4) if hits + misses else 0.0,
        "batch_size": settings.embedding.batch_size,
        "model_busy": round(metrics.get("embed_model_seconds", 0.0) / ingest_s, 3),
        "mean_batch": round(
            metrics.get("ingest_candidates", 0.0) / max(1.0, metrics.get("ingest_batches", 0.0)), 1
        ),
        # Where the ratio goes: cores per process over the load, the worker split
        # into its event loop and the model's lanes; the model's CPU per text the
        # model ran, in the pipeline and bare (the bare run has the cores to itself).
        "cpu": dict(cpu.processes),
        "cpu_worker_threads": dict(cpu.threads.get("worker", {})),
        "model_cpu_ms_per_text": {
            "pipeline": round(
                cpu.kind("worker", EMBED_LANES) * ingest_s * 1000 / max(1.0, load_misses), 2
            ),
            "bare": round(embed_cpu_s * 1000 / len(texts), 2),
        },
    }
    if broker_data is not None:
        report["broker_bytes_per_event"] = round(broker_bytes / len(stream), 1)
    return report


def _disk_bytes(root: Path | None) -> int:
    """Bytes the files under `root` hold on disk (allocated blocks)."""
    if root is None:
        return 0
    total = 0
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_blocks * 512
        except OSError:
            continue
    return total


async def _bench_key(settings: Settings) -> str:
    """An admin tenant key for the durable profile's client (keys are checked there)."""
    redis = Redis.from_url(settings.redis.url)
    try:
        _, token = await RedisApiKeyStore(redis, settings.broker.topic_prefix).create(
            TenantScope(admin=True), "bench ingest", now_ms=int(time.time() * 1000)
        )
        return token
    finally:
        await redis.aclose()


def _durable_distinct(
    settings: Settings, embedder: SentenceTransformerEmbedder, *, events: int, agents: int
) -> dict[str, Any]:
    """The all-distinct stream on the durable profile with tenant keys on, on a fresh
    store of its own."""
    state_dir = state_root() / "bench-durable"
    ports = bench_ports(19652, 16959, name="durable")
    services = LocalServices(
        state_dir,
        ports,
        wheel_cache=state_dir.parent / "wheels",
        durable=True,
    )
    services.down()  # a fresh store: bytes per event are this run's alone
    for data in (services.object_store_dir, state_dir / f"redis-{ports.redis}"):
        shutil.rmtree(data, ignore_errors=True)
    services.up()
    try:
        prefix = f"bench{uuid.uuid4().hex[:6]}"
        base = on_services(
            settings,
            services,
            auth_enabled=True,
            topic_prefix=prefix,
        )
        token = asyncio.run(_bench_key(base))
        pids = find_service_pids(state_dir, ports)
        if object_store := services.pids().get("object-store"):
            pids["object-store"] = object_store
        return asyncio.run(
            _run_mix(
                base,
                state_dir,
                embedder,
                events=events,
                agents=agents,
                distinct=True,
                service_pids=pids,
                api_key=token,
                broker_data=services.object_store_dir,
                prefix=prefix,
            )
        )
    finally:
        services.down()


def run_ingest_bench(
    settings: Settings,
    *,
    events: int,
    agents: int,
    mixes: tuple[str, ...] = ("repetitive", "distinct"),
    profiles: tuple[str, ...] = ("memory", "durable"),
) -> dict[str, Any]:
    embedder = SentenceTransformerEmbedder.from_settings(settings)
    report: dict[str, Any] = {"cpus": os.cpu_count()}
    if "memory" in profiles:
        report = _memory_mixes(settings, embedder, events=events, agents=agents, mixes=mixes)
    if "durable" in profiles:
        durable = _durable_distinct(settings, embedder, events=events, agents=agents)
        report["durable_all_distinct"] = durable
        memory = report.get("all_distinct") or (report if report.get("mix") == "distinct" else None)
        if memory is not None:
            # The durable profile with key checks against memory storage without them.
            report["durable_vs_memory_ratio"] = round(durable["ratio"] / memory["ratio"], 3)
    return report


def _memory_mixes(
    settings: Settings,
    embedder: SentenceTransformerEmbedder,
    *,
    events: int,
    agents: int,
    mixes: tuple[str, ...],
) -> dict[str, Any]:
    state_dir = state_root() / "bench"
    ports = bench_ports(19692, 16979)
    services = LocalServices(state_dir, ports)
    started_services = services.up()
    base = on_services(settings, services)
    pids = find_service_pids(state_dir, ports)
    try:

        async def run_mixes() -> dict[str, Any]:
            results = {
                mix: await _run_mix(
                    base,
                    state_dir,
                    embedder,
                    events=events,
                    agents=agents,
                    distinct=mix == "distinct",
                    service_pids=pids,
                )
                for mix in mixes
            }
            # The repetitive heartbeat mix is the headline; the all-distinct run nests.
            headline = "repetitive" if "repetitive" in results else "distinct"
            report: dict[str, Any] = {"mix": headline, **results[headline]}
            if headline == "repetitive" and "distinct" in results:
                report["all_distinct"] = results["distinct"]
            report["cpus"] = os.cpu_count()
            return report

        return asyncio.run(run_mixes())
    finally:
        if started_services:
            services.down()
