"""The pure parts of `python -m bench fleet` (bench/fleet_plan.py): the schedule, and how
lag, percentiles, maintenance share, bytes per memory, CPU and the search's next
size are computed."""

from __future__ import annotations

import itertools

import orjson
import pytest

from bench.corpus import corpus_events
from bench.fleet_plan import (
    FleetShape,
    agent_offset_s,
    agent_tick,
    bytes_per_memory,
    cpu_cores,
    ends_run,
    index_bytes,
    lag_summary,
    machine_busy,
    maintenance_share,
    next_search_size,
    percentile,
    proc_cpu_ticks,
    recalls,
    run_id,
    run_quality,
    schedule,
    summarise_ms,
    union_s,
)


def test_the_schedule_has_one_slot_per_agent_and_block_in_time_order() -> None:
    shape = FleetShape(agents=10, blocks=7, speed=4.0)
    slots = list(schedule(shape))
    assert len(slots) == 70
    assert [s.at_s for s in slots] == sorted(s.at_s for s in slots)
    assert {(s.agent, s.block) for s in slots} == {(a, b) for a in range(10) for b in range(7)}
    # Every agent publishes inside its block, within the spread share of it.
    for slot in slots:
        start = slot.block * shape.wall_block_s
        assert start <= slot.at_s < start + shape.spread * shape.wall_block_s + 1e-9
    assert shape.wall_block_s == 3.0
    assert agent_offset_s(shape, 0) == 0.0


def test_each_agent_recalls_once_every_five_blocks_staggered() -> None:
    shape = FleetShape(agents=50, blocks=20)
    for agent in range(shape.agents):
        blocks = [b for b in range(shape.blocks) if recalls(shape, agent, b)]
        assert len(blocks) == 4
        assert all(later - earlier == 5 for earlier, later in itertools.pairwise(blocks))
    # Staggered: a fifth of the fleet recalls in every block.
    for block in range(shape.blocks):
        assert sum(recalls(shape, a, block) for a in range(shape.agents)) == 10


def test_runs_end_every_six_blocks_staggered_and_match_the_corpus_run_ids() -> None:
    shape = FleetShape(agents=12, blocks=18)
    for agent in range(shape.agents):
        ending = [b for b in range(shape.blocks) if ends_run(shape, agent, b)]
        assert len(ending) == 3
        assert all(later - earlier == 6 for earlier, later in itertools.pairwise(ending))
        # The run a block belongs to changes right after the block that ends it.
        for block in ending[:-1]:
            assert run_id(shape, agent, block) != run_id(shape, agent, block + 1)
    assert sum(ends_run(shape, a, 0) for a in range(shape.agents)) == 2
    # The plan's run id is the one the corpus story puts on that tick's events.
    agent = 3
    story = corpus_events("fleet-x", seed=1)
    events = [orjson.loads(next(story).value) for _ in range(2 * 20)]
    for block in range(10):
        tick = agent_tick(shape, agent, block)
        heartbeat = events[2 * tick]
        assert heartbeat["tick"] == tick
        assert heartbeat["run_id"] == run_id(shape, agent, block)


def test_run_quality_is_deterministic_and_in_range() -> None:
    values = [run_quality(a, t) for a in range(20) for t in range(20)]
    assert all(0.0 <= v <= 1.0 for v in values)
    assert values == [run_quality(a, t) for a in range(20) for t in range(20)]
    assert len(set(values)) > 300
    assert run_quality(1, 2, seed=1) != run_quality(1, 2, seed=2)


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([5.0], 99) == 5.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile(values, 0)
    summary = summarise_ms([1.04, 2.0, 3.0])
    assert summary == {"count": 3, "p50": 2.0, "p99": 3.0, "max": 3.0}


def test_lag_is_decision_time_less_scheduled_time_in_wall_blocks() -> None:
    scheduled = {("a", 0): 0.0, ("b", 0): 1.0, ("a", 1): 3.0, ("b", 1): 4.0}
    decided = {("a", 0): 1.5, ("b", 0): 2.5, ("a", 1): 9.0}
    summary = lag_summary(scheduled, decided, wall_block_s=3.0, now=10.0)
    # lags: 0.5, 0.5, 2.0 and, undecided, (10 - 4) / 3 = 2.0 at least
    assert summary["units"] == 4
    assert summary["undecided"] == 1
    assert summary["p50"] == 0.5
    assert summary["max"] == 2.0
    assert summary["p99"] == 2.0
    empty = lag_summary({}, {}, wall_block_s=3.0, now=0.0)
    assert empty["units"] == 0 and empty["max"] is None


def test_maintenance_share_and_bytes_per_memory() -> None:
    # 600 ms of maintenance over 5 blocks of 3 s: 120 ms a block of 3,000 ms.
    assert maintenance_share(600.0, 5, 3.0) == pytest.approx(0.04)
    with pytest.raises(ValueError):
        maintenance_share(1.0, 0, 3.0)
    assert bytes_per_memory(10_000, 5) == 2_000.0
    assert bytes_per_memory(10_000, 0) is None


def test_index_bytes_adds_the_vector_index_the_total_leaves_out() -> None:
    # FT.INFO's total counts the inverted index and tables, not the vectors.
    info = {"total_index_memory_sz_mb": "0.5", "vector_index_sz_mb": 1.5, "num_docs": "9"}
    assert index_bytes(info) == 2 * 1024 * 1024
    assert index_bytes({}) == 0


def test_cpu_from_proc_stat_lines() -> None:
    # A command name with spaces and parentheses must not shift the fields.
    line = "1234 (python (x) y) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 9 0 100 200 300"
    assert proc_cpu_ticks(line) == 300
    assert cpu_cores(100, 300, 100, 4.0) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        cpu_cores(0, 1, 100, 0.0)
    stat = "cpu  100 10 50 800 40 5 5 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"
    assert machine_busy(stat) == (170, 1010)


def test_the_search_doubles_then_bisects_to_ten_percent() -> None:
    good: int | None = None
    bad: int | None = None
    limit = 730  # the largest size that passes
    tried = []
    while (size := next_search_size(good, bad, start=100, ceiling=10_000)) is not None:
        tried.append(size)
        if size <= limit:
            good = size
        else:
            bad = size
        assert len(tried) < 20
    assert tried[:4] == [100, 200, 400, 800]
    assert good is not None and bad is not None
    assert good <= limit < bad
    assert bad - good <= max(1, int(0.1 * good))


def test_the_search_halves_from_a_failing_start_and_stops_at_the_ceiling() -> None:
    assert next_search_size(None, 1000, start=1000, ceiling=8000) == 500
    assert next_search_size(None, 1, start=1, ceiling=8000) is None
    assert next_search_size(4000, None, start=1000, ceiling=6000) is None
    assert next_search_size(None, None, start=250, ceiling=6000) == 250
    assert next_search_size(100, 105, start=100, ceiling=6000) is None


def test_a_shape_refuses_what_cannot_run() -> None:
    for bad in (
        {"agents": 0, "blocks": 1},
        {"agents": 1, "blocks": 0},
        {"agents": 1, "blocks": 1, "speed": 0.0},
        {"agents": 1, "blocks": 1, "spread": 1.0},
        {"agents": 1, "blocks": 1, "recall_every_blocks": 0},
    ):
        with pytest.raises(ValueError):
            FleetShape(**bad)  # type: ignore[arg-type]


def test_union_counts_overlapping_passes_once_and_clips_to_the_window() -> None:
    assert union_s([], 0.0, 10.0) == 0.0
    assert union_s([(1.0, 3.0), (2.0, 4.0), (6.0, 7.0)], 0.0, 10.0) == pytest.approx(4.0)
    assert union_s([(1.0, 2.0), (1.5, 1.8)], 0.0, 10.0) == pytest.approx(1.0)
    assert union_s([(-5.0, 1.0), (9.0, 12.0)], 0.0, 10.0) == pytest.approx(2.0)
