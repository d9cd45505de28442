"""The pure parts of `python -m bench fleet` (bench/fleet.py): who publishes,
recalls and ends a run when, and how the report's numbers are computed from what
was observed. No I/O, no clock: times come in as arguments, so each piece is unit
tested on its own (tests/unit/bench/test_bench_fleet.py).

Schedule. Agent `i` of `N` publishes its block-`b` events at
`b · wall_block_s + spread · wall_block_s · i / N` seconds after the load starts
(`wall_block_s = block_s / speed`: an accelerated clock compresses a 12 s block).
Agents start `i mod run_blocks` blocks into their story (`corpus_events`), so run
ends are spread over the blocks rather than all at one. An agent recalls at block
`b` when `(b + i) mod recall_every_blocks == recall_every_blocks - 1`, and sends
`run_ended` at the last block of each of its runs (the corpus's run = tick //
run_blocks, `TICKS_PER_RUN`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from bench.corpus import TICKS_PER_RUN

__all__ = [
    "FleetShape",
    "Slot",
    "agent_id",
    "agent_offset_s",
    "agent_tick",
    "bytes_per_memory",
    "cpu_cores",
    "ends_run",
    "index_bytes",
    "lag_summary",
    "machine_busy",
    "maintenance_share",
    "next_search_size",
    "percentile",
    "proc_cpu_ticks",
    "recalls",
    "run_id",
    "run_quality",
    "schedule",
    "summarise_ms",
    "union_s",
]

_K = TypeVar("_K")


@dataclass(frozen=True, slots=True)
class FleetShape:
    agents: int
    blocks: int
    block_s: float = 12.0  # the event-time block (the chain's cadence)
    speed: float = 1.0  # wall seconds per block = block_s / speed
    recall_every_blocks: int = 5
    run_blocks: int = TICKS_PER_RUN
    # The agents' publications are spread over this share of each block (real agents
    # do not publish in the same millisecond), leaving the rest for the last to land.
    spread: float = 0.8

    def __post_init__(self) -> None:
        if self.agents < 1 or self.blocks < 1:
            raise ValueError("a fleet needs at least one agent and one block")
        if self.block_s <= 0 or self.speed <= 0:
            raise ValueError("block_s and speed must be positive")
        if self.recall_every_blocks < 1 or self.run_blocks < 1:
            raise ValueError("recall_every_blocks and run_blocks must be at least 1")
        if not 0 <= self.spread < 1:
            raise ValueError("spread must be in [0, 1)")

    @property
    def wall_block_s(self) -> float:
        return self.block_s / self.speed


@dataclass(frozen=True, slots=True)
class Slot:
    """One agent's turn in one block: publish its events at `at_s` (seconds after
    the load's start), then recall and/or end its run."""

    at_s: float
    agent: int
    block: int
    recall: bool
    ends_run: bool


def agent_id(index: int) -> str:
    return f"fleet-{index:05d}"


def agent_offset_s(shape: FleetShape, agent: int) -> float:
    return shape.spread * shape.wall_block_s * agent / shape.agents


def agent_tick(shape: FleetShape, agent: int, block: int) -> int:
    """The agent's tick (its corpus story's) at fleet block `block`."""
    return block + agent % shape.run_blocks


def recalls(shape: FleetShape, agent: int, block: int) -> bool:
    every = shape.recall_every_blocks
    return (block + agent) % every == every - 1


def ends_run(shape: FleetShape, agent: int, block: int) -> bool:
    return agent_tick(shape, agent, block) % shape.run_blocks == shape.run_blocks - 1


def run_id(shape: FleetShape, agent: int, block: int) -> str:
    """The corpus's run id for the agent's tick (`corpus_events`: run-{tick // 6})."""
    return f"run-{agent_tick(shape, agent, block) // shape.run_blocks:06d}"


def run_quality(agent: int, tick: int, seed: int = 7) -> float:
    """A run's quality in [0, 1], the same for the same agent, tick and seed."""
    return round(random.Random(f"{seed}:{agent}:{tick}").random(), 3)


def schedule(shape: FleetShape) -> Iterator[Slot]:
    """Every slot of the load, in time order."""
    for block in range(shape.blocks):
        start = block * shape.wall_block_s
        for agent in range(shape.agents):
            yield Slot(
                at_s=start + agent_offset_s(shape, agent),
                agent=agent,
                block=block,
                recall=recalls(shape, agent, block),
                ends_run=ends_run(shape, agent, block),
            )


# -- metrics ------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile: the smallest value with at least q % of the values
    at or below it (None for no values)."""
    if not values:
        return None
    if not 0 < q <= 100:
        raise ValueError("q must be in (0, 100]")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summarise_ms(values: Sequence[float]) -> dict[str, Any]:
    """p50, p99, max (ms, one decimal) and the count."""
    out: dict[str, Any] = {"count": len(values)}
    for name, q in (("p50", 50.0), ("p99", 99.0), ("max", 100.0)):
        value = percentile(values, q)
        out[name] = None if value is None else round(value, 1)
    return out


def lag_summary(
    scheduled: Mapping[_K, float],
    decided: Mapping[_K, float],
    *,
    wall_block_s: float,
    now: float,
) -> dict[str, Any]:
    """Lag in blocks per unit (an agent's events of one block): (the time its last
    event was decided - its scheduled publish time) / wall_block_s. A unit never
    decided counts with `now` in place of its decision time (a lower bound) and is
    counted in `undecided`."""
    lags: list[float] = []
    undecided = 0
    for key, at in scheduled.items():
        done = decided.get(key)
        if done is None:
            undecided += 1
            done = now
        lags.append((done - at) / wall_block_s)
    out: dict[str, Any] = {"units": len(lags), "undecided": undecided}
    for name, q in (("p50", 50.0), ("p99", 99.0), ("max", 100.0)):
        value = percentile(lags, q)
        out[name] = None if value is None else round(value, 3)
    return out


def maintenance_share(total_ms: float, blocks: int, wall_block_s: float) -> float:
    """Maintenance time per block / the block's wall duration."""
    if blocks < 1 or wall_block_s <= 0:
        raise ValueError("blocks and wall_block_s must be positive")
    return total_ms / blocks / (wall_block_s * 1000.0)


def union_s(intervals: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """Seconds of [start, end] covered by at least one (begin, finish) interval:
    how long something was running, however many ran at once."""
    covered = 0.0
    reach = start
    for begin, finish in sorted(intervals):
        begin, finish = max(begin, reach), min(finish, end)
        if finish > begin:
            covered += finish - begin
            reach = finish
    return covered


def bytes_per_memory(stored_bytes: int, memories: int) -> float | None:
    """Redis memory the run's deployment holds per memory stored (None when none
    was)."""
    if memories <= 0:
        return None
    return stored_bytes / memories


def index_bytes(info: Mapping[str, Any]) -> int:
    """Bytes of one RediSearch index from its FT.INFO: `total_index_memory_sz_mb`
    counts the inverted index, document and key tables and offsets but not the
    vector index, which has a field of its own."""
    megabytes = float(info.get("total_index_memory_sz_mb", 0)) + float(
        info.get("vector_index_sz_mb", 0)
    )
    return round(megabytes * 1024 * 1024)


def proc_cpu_ticks(stat: str) -> int:
    """utime + stime (clock ticks) from a /proc/<pid>/stat line. The command name
    is in parentheses and may hold spaces, so fields are counted after its `)`."""
    rest = stat[stat.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    return int(rest[11]) + int(rest[12])


def machine_busy(stat: str) -> tuple[int, int]:
    """(busy, total) clock ticks over every CPU from /proc/stat's first line; idle
    and iowait are not busy."""
    fields = [int(v) for v in stat.splitlines()[0].split()[1:]]
    total = sum(fields[:8])  # guest time is already inside user and nice
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return total - idle, total


def cpu_cores(ticks_before: int, ticks_after: int, clock_ticks: int, wall_s: float) -> float:
    """CPU seconds over wall seconds: 1.0 is one core busy the whole time."""
    if wall_s <= 0:
        raise ValueError("wall_s must be positive")
    return (ticks_after - ticks_before) / clock_ticks / wall_s


def next_search_size(
    good: int | None, bad: int | None, *, start: int, ceiling: int, resolution: float = 0.1
) -> int | None:
    """The next fleet size to try in a search for the largest one that passes:
    doubling from `start` while every trial passed, halving while every trial
    failed, then bisecting until the gap is at most `resolution` of the passing
    size (or one agent). None: done (or past `ceiling`, or below one agent)."""
    if good is None and bad is None:
        return start
    if bad is None:
        assert good is not None
        nxt = good * 2
        return nxt if nxt <= ceiling else None
    if good is None:
        nxt = bad // 2
        return nxt if nxt >= 1 else None
    if bad - good <= max(1, math.floor(resolution * good)):
        return None
    return (good + bad) // 2
