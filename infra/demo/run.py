"""`grimoire demo`: local services, a worker, simulated agents, recall questions."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

from grimoire.infra.demo.story import QUESTIONS, tick_events
from grimoire.infra.local.services import LocalServices, ServicePorts
from grimoire.infra.local.worker_process import start_worker, stop_worker
from grimoire.infra.settings import Settings
from grimoire.tables.maintenance.ledger import MaintenanceLedgerStore
from grimoire.tables.memory.agent_state import AgentStateStore, AgentStats
from grimoire.tables.redis_client import create_redis
from grimoire.topics.client import GrimoireClient

logger = logging.getLogger(__name__)

AGENTS = ("golem-alpha", "golem-beta")


def _say(text: str) -> None:
    print(text, flush=True)


async def _simulate(settings: Settings, ticks: int, cadence_s: float) -> None:
    async with GrimoireClient(
        settings.bootstrap_servers,
        settings.broker.topic_prefix,
        partitions=settings.broker.partitions,
    ) as client:
        _say("waiting for the worker to answer (loads the embedding model)...")
        await client.wait_until_ready(timeout=180)
        for tick in range(ticks):
            started = time.monotonic()
            for agent in AGENTS:
                events = tick_events(agent, tick)
                await client.publish_episode(events.episode)
                await client.publish_tool_event(events.tool_event)
                await client.publish_transcript(events.transcript)
            _say(f"tick {tick}: published 3 events for each of {', '.join(AGENTS)}")
            await asyncio.sleep(max(0.0, cadence_s - (time.monotonic() - started)))
        await _print_stats(settings)
        for question in QUESTIONS:
            answer = await client.recall(AGENTS[0], question, k=3)
            _say(f"\nrecall[{AGENTS[0]}] {question!r}  ({answer.timings_ms.get('total')} ms)")
            for rank, item in enumerate(answer.items, start=1):
                lanes = "+".join(item.lanes)
                why = ", ".join(r for r in item.reasons or () if not r.startswith("lane:"))
                shown = item.text if item.text is not None else f"{item.gist} (gist)"
                _say(f"  {rank}. [{item.layer}/{lanes} {item.score:.4f}] {shown}")
                if why:
                    _say(f"      linked by {why}")


async def _print_stats(settings: Settings) -> None:
    redis = create_redis(settings.redis.url, 2)
    try:
        state = AgentStateStore(redis, settings.broker.topic_prefix)
        ledgers = MaintenanceLedgerStore(redis, settings.broker.topic_prefix)
        for agent in AGENTS:
            stats = AgentStats.from_counters(await state.stats(agent))
            field = await state.field(agent)
            _say(
                f"\n{agent}: {stats.candidates} candidates, {stats.admitted} admitted, "
                f"{stats.rejected} rejected, {stats.aggregated} folded into aggregates, "
                f"{stats.merged} merged (admission rate {stats.admission_rate:.0%}, "
                f"mean quality {stats.average_quality:.2f}); focus: {', '.join(field.digest(5))}"
            )
            history = await ledgers.history(agent)
            ran = ", ".join(f"{h['task']}@{h['tick']}" for h in history[-4:]) or "nothing yet"
            _say(f"  maintenance (leader timer, one worker per agent): {ran}")
    finally:
        await redis.aclose()


def run_demo(settings: Settings, *, ticks: int, block_interval_s: float | None) -> int:
    state_dir = Path(os.environ.get("GRIMOIRE_STATE_DIR", ".grimoire")) / "demo"
    ports = ServicePorts(
        kafka=int(os.environ.get("GRIMOIRE_DEMO_KAFKA_PORT", "19092")),
        redis=int(os.environ.get("GRIMOIRE_DEMO_REDIS_PORT", "16379")),
    )
    cadence = block_interval_s if block_interval_s is not None else 1.0
    _say(
        f"Grimoire demo: {ticks} ticks at an accelerated cadence of {cadence:g} s per block "
        f"(production default {settings.worker.block_interval_s:g} s)."
    )
    services = LocalServices(state_dir, ports)
    started_services = services.up()
    for name, line in services.status().items():
        _say(f"  {name}: {line}")
    demo_settings = settings.with_values(
        broker_url=f"kafka://{services.kafka_bootstrap}",
        redis_url=services.redis_url,
        topic_prefix=f"demo{int(time.time())}",
        block_interval_s=cadence,
    )
    worker = start_worker(demo_settings, state_dir / "log" / "worker.log")
    try:
        asyncio.run(_simulate(demo_settings, ticks, cadence))
    finally:
        stop_worker(worker)
        if started_services:
            services.down()
            _say("\nstopped the local services this demo started")
    return 0
