"""Workers split by role (agents/roles.py) on the real broker and Redis: one folds
the journal, one serves recalls. A recall answered by the recall worker is a
journal entry the ingest worker applies, and with the recall worker gone nobody
answers recalls while ingest carries on: the ingest worker never subscribed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from grimoire.infra.local.worker_process import start_worker, stop_worker
from grimoire.infra.settings import Settings
from grimoire.tables.keyspace import Keyspace
from grimoire.topics.client import RecallTimeout
from grimoire.topics.schemas import EpisodeV1
from tests.support.workers import ROOT, client_for, prefixed_settings, start_ready_worker

T0 = 1_790_000_000_000
AGENT = "golem-roles"


@pytest.fixture(scope="module")
def split_settings(settings: Settings) -> Settings:
    return prefixed_settings(settings, "roles", maintenance_enabled=False)


@pytest.fixture(scope="module")
async def split_workers(
    split_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[dict[str, Any]]:
    logs: Path = tmp_path_factory.mktemp("worker-roles")
    held: dict[str, Any] = {"logs": logs}
    try:
        folding = split_settings.with_values(worker_roles="ingest")
        held["ingest"] = start_worker(folding, logs / "ingest.log", cwd=ROOT)
        reading = split_settings.with_values(worker_roles="recall")
        held["recall"] = await start_ready_worker(reading, logs / "recall.log", timeout=180)
        deadline = time.monotonic() + 120
        while "_on_partitions_assigned" not in (logs / "ingest.log").read_text(errors="replace"):
            assert held["ingest"].poll() is None, (logs / "ingest.log").read_text()[-4000:]
            assert time.monotonic() < deadline, "the ingest worker never joined the group"
            await asyncio.sleep(0.2)
        yield held
    finally:
        for name in ("ingest", "recall"):
            if name in held:
                stop_worker(held[name])


async def test_split_roles_fold_and_answer_apart(
    split_settings: Settings, split_workers: dict[str, Any], eventually: Any
) -> None:
    settings = split_settings
    keys = Keyspace(settings.broker.topic_prefix)
    redis = Redis.from_url(settings.redis.url)
    try:
        async with client_for(settings) as client:
            await client.publish_episode(
                EpisodeV1(
                    agent_id=AGENT,
                    ts=T0,
                    text="the relayer on shard seven stalled after a config push",
                    event_id="roles-1",
                )
            )

            async def decisions() -> int:
                # Keyed by candidate id: one per memory candidate an event made.
                return int(await redis.hlen(keys.decided(AGENT)))

            await eventually(decisions, timeout=120, interval=0.3)
            first = await decisions()

            # Answered by the recall worker, and its usage entry folded by the other.
            answer = await client.recall(AGENT, "why did the relayer stall?", k=3, timeout=30)
            assert [item.source_event_id for item in answer.items] == ["roles-1"]
            memory_id = answer.items[0].id

            async def used() -> bool:
                return bool(await redis.exists(keys.usage(AGENT, memory_id)))

            await eventually(used, timeout=60, interval=0.3)

            stop_worker(split_workers["recall"])
            # Ingest goes on without it ...
            await client.publish_episode(
                EpisodeV1(
                    agent_id=AGENT,
                    ts=T0 + 12_000,
                    text="rolled the config push back and the relayer caught up",
                    event_id="roles-2",
                )
            )

            async def more() -> bool:
                return await decisions() > first

            await eventually(more, timeout=120, interval=0.3)
            # ... and no one answers a recall: the ingest worker's group membership
            # (rebalanced by now: the ingest fold above ran after the leave) holds
            # no recall partitions.
            with pytest.raises(RecallTimeout):
                await client.recall(AGENT, "why did the relayer stall?", k=3, timeout=8)
            assert split_workers["ingest"].poll() is None
    finally:
        await redis.aclose()
