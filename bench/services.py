"""The broker, Redis and worker a bench runs against: where their state lives, the
ports they listen on (each overridable from the environment, so two benches, or a
bench and the tests, can run side by side), a client once the worker answers, and a
whole bench on services of its own."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

from bench.corpus import CorpusLoader
from grimoire.agents.ports import Embedder
from grimoire.infra.local.services import LocalServices, ServicePorts
from grimoire.infra.settings import Settings
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.redis_client import create_redis
from grimoire.topics.client import GrimoireClient

__all__ = [
    "bench_ports",
    "corpus_on_redis",
    "cpu_model",
    "on_services",
    "own_services",
    "ready_client",
    "run_on_own_services",
    "state_root",
]


def state_root() -> Path:
    """Where the benches keep their services' state (GRIMOIRE_STATE_DIR, as the
    `grimoire` command does), as given: callers that pass it on resolve it."""
    return Path(os.environ.get("GRIMOIRE_STATE_DIR", ".grimoire"))


def bench_ports(kafka: int, redis: int, *, name: str = "") -> ServicePorts:
    """The ports from GRIMOIRE_BENCH[_<NAME>]_KAFKA_PORT / _REDIS_PORT, else these."""
    variable = f"GRIMOIRE_BENCH_{name.upper()}_" if name else "GRIMOIRE_BENCH_"
    return ServicePorts(
        kafka=int(os.environ.get(f"{variable}KAFKA_PORT", str(kafka))),
        redis=int(os.environ.get(f"{variable}REDIS_PORT", str(redis))),
    )


def own_services(name: str, kafka: int, redis: int) -> LocalServices:
    """Services in `bench-<name>` under the state root, on the bench ports (else
    these), with the wheels every bench shares."""
    root = state_root()
    return LocalServices(
        root / f"bench-{name}", bench_ports(kafka, redis), wheel_cache=root / "wheels"
    )


def on_services(settings: Settings, services: LocalServices, **values: Any) -> Settings:
    """`settings` naming these services' broker and Redis, with `values` changed too."""
    return settings.with_values(
        broker_url=f"kafka://{services.kafka_bootstrap}", redis_url=services.redis_url, **values
    )


def cpu_model() -> str:
    """The machine's CPU, for the report (results from different hosts differ)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


@contextlib.asynccontextmanager
async def ready_client(
    settings: Settings, *, timeout: float, prefix: str | None = None, **options: Any
) -> AsyncIterator[GrimoireClient]:
    """A client of the deployment `settings` name (on `prefix` instead of its topic
    prefix when given), once the worker answers: a bench times the work, not the
    worker's start."""
    async with GrimoireClient(
        settings.bootstrap_servers,
        prefix if prefix is not None else settings.broker.topic_prefix,
        partitions=settings.broker.partitions,
        **options,
    ) as client:
        await client.wait_until_ready(timeout=timeout)
        yield client


async def corpus_on_redis(
    settings: Settings, embedder: Embedder, agent_id: str
) -> tuple[Any, RedisMemoryStore, CorpusLoader]:
    """The deployment's Redis client and memory store (its index ensured), and a
    loader growing `agent_id`'s corpus there in the worker's batch size, state
    weight and input limits, so the store looks as the worker would have left it."""
    redis = create_redis(settings.redis.url, 8)
    store = RedisMemoryStore(
        redis, settings.broker.topic_prefix, embedder.dims, clock_ms=lambda: int(time.time() * 1000)
    )
    await store.ensure_schema()
    loader = CorpusLoader(
        store,
        embedder,
        agent_id,
        batch_size=settings.embedding.batch_size,
        eidolon_weight=settings.embedding.eidolon_state_weight,
        limits=settings.input_limits,
    )
    return redis, store, loader


def run_on_own_services(
    settings: Settings,
    name: str,
    bench: Callable[[Settings, Path], Coroutine[Any, Any, dict[str, Any]]],
    *,
    kafka_port: int,
    redis_port: int,
) -> dict[str, Any]:
    """`bench(settings naming them, log dir)` against a broker and Redis of its own
    (ports GRIMOIRE_BENCH_<NAME>_KAFKA_PORT / _REDIS_PORT, default `kafka_port` /
    `redis_port`; state in `.grimoire/bench-<name>`), stopped at the end if started
    here; the report gains the elapsed time and the CPU."""
    began = time.perf_counter()
    state_dir = state_root().resolve()
    services = LocalServices(
        state_dir / f"bench-{name}",
        bench_ports(kafka_port, redis_port, name=name),
        wheel_cache=state_dir / "wheels",
        ready_timeout=120.0,
    )
    started = services.up()
    base = on_services(settings, services)
    try:
        report = asyncio.run(bench(base, state_dir / f"bench-{name}" / "log"))
    finally:
        if started:
            services.down()
    report["elapsed_s"] = round(time.perf_counter() - began, 1)
    report["cpu"] = cpu_model()
    report["cpus"] = os.cpu_count()
    return report
