"""Two workers in one consumer group, real broker and Redis: each agent's maintenance
runs on exactly one worker per due tick (docs/design.md §6, issue 5 must-show 2), and only
the ticks with something due run at all."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from grimoire.infra.local.worker_process import start_worker, stop_worker
from grimoire.infra.settings import Settings
from grimoire.tables.maintenance.ledger import MaintenanceLedgerStore
from grimoire.topics.client import GrimoireClient
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import EpisodeV1

ROOT = Path(__file__).resolve().parents[2]
BASE_TS = 1_790_000_000_000
AGENTS = 12
CURATOR_EVERY = 5
WAVES = ((1, 5), (6, 10), (11, 15))


@pytest.fixture
async def two_workers(
    settings: Settings, tmp_path: Path
) -> AsyncIterator[tuple[Settings, list[subprocess.Popen[bytes]]]]:
    group = settings.with_values(
        topic_prefix=f"mt{uuid.uuid4().hex[:8]}",
        app_id=f"grimoire-mt-{uuid.uuid4().hex[:6]}",
        maintenance_enabled=True,
        block_interval_s=0.5,
        maintenance_curator_every_ticks=CURATOR_EVERY,
        maintenance_compaction_every_ticks=1_000,
    )
    processes: list[subprocess.Popen[bytes]] = []
    logs = [tmp_path / f"worker-{n}.log" for n in range(2)]
    try:
        for n, log in enumerate(logs):
            own = group.with_values(data_dir=tmp_path / f"data-{n}")
            processes.append(start_worker(own, log, cwd=ROOT))
        async with GrimoireClient(
            group.bootstrap_servers, group.broker.topic_prefix, partitions=group.broker.partitions
        ) as probe:
            await probe.wait_until_ready(timeout=180)
        yield group, processes
    except BaseException:
        for log in logs:
            if log.exists():
                sys.stderr.write(log.read_text(errors="replace")[-4000:])
        raise
    finally:
        for process in processes:
            stop_worker(process)


async def test_each_due_tick_is_maintained_by_exactly_one_worker(
    two_workers: tuple[Settings, list[subprocess.Popen[bytes]]],
    eventually: Any,
    read_topic: Any,
) -> None:
    group, processes = two_workers
    agents = [f"golem-{n}-{uuid.uuid4().hex[:4]}" for n in range(AGENTS)]
    redis = Redis.from_url(group.redis.url)
    ledgers = MaintenanceLedgerStore(redis, group.broker.topic_prefix)
    try:
        async with GrimoireClient(
            group.bootstrap_servers, group.broker.topic_prefix, partitions=group.broker.partitions
        ) as client:
            for first, last in WAVES:
                for tick in range(first, last + 1):
                    for n, agent in enumerate(agents):
                        await client.publish_episode(
                            EpisodeV1(
                                agent_id=agent,
                                ts=BASE_TS + tick * 12_000,
                                tick=tick,
                                text=f"tick {tick}: probe {n} saw queue depth {tick * 7 + n}",
                                event_id=f"{agent}-{tick}",
                            ),
                        )
                await client.flush()

                async def wave_maintained(last: int = last) -> bool:
                    for agent in agents:
                        ledger = await ledgers.ledger(agent)
                        if ledger.decay is None or ledger.curator != last:
                            return False
                    return True

                await eventually(wave_maintained, timeout=90, interval=0.2)

        history = {agent: await ledgers.history(agent) for agent in agents}
    finally:
        await redis.aclose()
    assert all(process.poll() is None for process in processes), "a worker died"

    names = TopicNames(group.broker.topic_prefix)
    expected_runs = sum(1 for _ in agents) * 2  # at least the curator runs per agent

    def enough(records: list[Any]) -> bool:
        return sum(b"GrimoireMaintenance" in r.value for r in records) >= expected_runs

    records = await read_topic(
        group.bootstrap_servers, names.memory_events, until=enough, timeout=30
    )
    events = [orjson.loads(r.value) for r in records if b"maintenance_event" in r.value]

    # The ledger log in Redis and the events on the topic tell the same story:
    # every (agent, task, tick) ran once, by one worker.
    runs_by_worker: dict[tuple[str, str, int], set[str]] = defaultdict(set)
    counts: Counter[tuple[str, str, int]] = Counter()
    for event in events:
        if event["type"] == "GrimoireMaintenance":
            continue
        task = {"GrimoireDecay": "decay", "CuratorCycleComplete": "curator"}.get(event["type"])
        if task is None:
            continue
        key = (event["agent_id"], task, event["tick"])
        counts[key] += 1
        runs_by_worker[key].add(event["worker"])
    assert counts, "no maintenance ran"
    assert max(counts.values()) == 1, [k for k, c in counts.items() if c > 1]
    assert all(len(workers) == 1 for workers in runs_by_worker.values())
    for agent, entries in history.items():
        keys = [(e["task"], int(e["tick"])) for e in entries]
        assert len(keys) == len(set(keys)), (agent, keys)
        curator_ticks = [tick for task, tick in keys if task == "curator"]
        # One curator cycle per crossed boundary of CURATOR_EVERY ticks, never more.
        assert curator_ticks == [5, 10, 15], (agent, curator_ticks)
        # One decay pass, the one that seeded the schedule: 15 blocks of event
        # time cross no decay band, so no later tick finds an entry due (and the
        # block timer sends no command that would find nothing).
        assert len([tick for task, tick in keys if task == "decay"]) == 1, (agent, keys)
        for entry in entries:
            assert (agent, entry["task"], int(entry["tick"])) in counts
    # Both workers took part: the group split the agents' partitions between them.
    workers = {worker for found in runs_by_worker.values() for worker in found}
    assert len(workers) == 2, workers
