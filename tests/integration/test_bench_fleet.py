"""`bench fleet` at its smallest, through the real broker, Redis and workers split
by role (one folds the journal, one answers recalls): five agents, three blocks on
an accelerated clock (3 s a block). What is checked is the report's shape and that
its counts add up (every event published decided, every recall answered, every run
end reported), not the fleet's targets."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.fleet import FleetOptions, run_trial
from bench.fleet_plan import FleetShape, schedule
from grimoire.infra.settings import Settings

pytestmark = pytest.mark.integration


async def test_a_tiny_fleet_runs_end_to_end_and_its_counts_add_up(
    settings: Settings, tmp_path: Path
) -> None:
    shape = FleetShape(agents=5, blocks=3, speed=4.0)
    options = FleetOptions(
        agents=5,
        blocks=3,
        speed=4.0,
        probes_per_block=1,
        search=False,
        drain_timeout_s=120.0,
        recall_workers=1,
    )

    report = await run_trial(settings, shape, options, log_dir=tmp_path)

    for key in (
        "agents",
        "block_s",
        "events_per_s",
        "lag_blocks",
        "recallable_ms",
        "recall_ms",
        "maintenance_share",
        "redis_bytes_per_memory",
        "cpu",
        "machine",
    ):
        assert key in report, key
    assert report["agents"] == 5
    assert report["block_s"] == 12.0
    assert report["wall_block_s"] == 3.0
    assert report["real_time_equivalent"]["agents"] == 20.0
    for part in ("p50", "p99", "max"):
        assert isinstance(report["lag_blocks"][part], float)
    assert isinstance(report["recall_ms"]["p50"], float)
    assert isinstance(report["recallable_ms"]["p99"], float)

    slots = list(schedule(shape))
    counts = report["counts"]
    # Four events per agent and block, every one decided (or dead-lettered) once.
    assert counts["events_published"] == 4 * 5 * 3
    assert counts["events_decided"] == counts["events_published"]
    assert counts["events_undecided"] == 0
    assert report["lag_blocks_all"]["units"] == counts["units"] == 5 * 3
    assert report["lag_blocks_all"]["undecided"] == 0
    # The first block is the warm-up: left out of the headline lag.
    assert report["lag_blocks"]["units"] == 5 * 2
    assert counts["dead_letters"] == {}
    assert sum(counts["decisions"].values()) >= counts["events_decided"]
    assert counts["recalls"] == sum(s.recall for s in slots) == 3
    assert counts["recalls_answered"] == counts["recalls"]
    assert report["recall_ms"]["count"] == counts["recalls"]
    assert report["recall_handler_ms"]["count"] == counts["recalls"]
    assert report["recall_handler_ms"]["p50"] <= report["recall_ms"]["p50"]
    assert counts["outcomes_sent"] == sum(s.ends_run for s in slots) > 0
    assert counts["outcomes_reported"] == counts["outcomes_sent"]
    assert counts["probes"] == 3
    assert report["recallable_ms"]["missed"] == 0
    assert report["recallable_ms"]["lower_bound"] is False
    assert report["recallable_ms"]["count"] == 3

    assert report["memories"] > 0
    # Counted on the trial's own keys and index: each memory's 384-float vector is
    # held twice (its hash, the vector index), whatever else shares the Redis.
    assert report["redis_bytes_per_memory"] > 2 * 4 * 384
    assert report["redis_stored_bytes"] == pytest.approx(
        report["memories"] * report["redis_bytes_per_memory"], rel=1e-4
    )
    assert report["maintenance"]["passes_by_task"].get("decay", 0) > 0
    assert report["maintenance_share"] >= 0
    assert 0 < report["maintenance"]["busy_share"] <= 1
    assert report["cpu"]["bench"] is not None and report["cpu"]["worker-0"] is not None
    assert report["workers"] == 1 and report["recall_workers"] == 1
    assert report["cpu"]["recall-0"] is not None
    assert report["machine"]["cpus"] >= 1
    assert 0 <= report["machine"]["busy_share"] <= 1
