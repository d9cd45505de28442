"""Where a benchmark's CPU goes: per process, and inside a worker per kind of thread.

A worker's CPU is mostly two things, and a report that gives one number for both
cannot say which one a fleet runs out of: the model's threads (the embedder's bulk
lanes and its query thread, which name themselves `embed-lane` and `embed-query`
for the OS) and the event loop (the process's main thread: decoding, planning,
Redis and Kafka I/O). Each sample reads /proc/<pid>/stat and
/proc/<pid>/task/<tid>/stat; a thread that exits between two samples takes its
ticks with it, which the long-lived threads measured here never do.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench.fleet_plan import cpu_cores, proc_cpu_ticks
from grimoire.infra.embedding.embedder import LANE_THREAD_NAME, QUERY_THREAD_NAME
from grimoire.infra.local.services import ServicePorts

__all__ = [
    "EMBED_LANES",
    "EMBED_QUERY",
    "EVENT_LOOP",
    "OTHER_THREADS",
    "CpuReport",
    "CpuSample",
    "cpu_report",
    "find_service_pids",
    "redis_cpu_s",
    "sample_cpu",
    "thread_kind",
]

EVENT_LOOP: Final = "event_loop"
EMBED_LANES: Final = "embed_lanes"
EMBED_QUERY: Final = "embed_query"
OTHER_THREADS: Final = "other_threads"


def redis_cpu_s(info: Mapping[str, Any]) -> float:
    """CPU seconds a Redis server's own threads have spent, from its `INFO cpu`
    (forked children, its saves and RediSearch's fork GC, are counted apart)."""
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def thread_kind(pid: int, tid: int, comm: str) -> str:
    """Which part of a worker a thread is: the main thread runs the event loop."""
    if tid == pid:
        return EVENT_LOOP
    if comm == LANE_THREAD_NAME:
        return EMBED_LANES
    if comm == QUERY_THREAD_NAME:
        return EMBED_QUERY
    return OTHER_THREADS


@dataclass(frozen=True, slots=True)
class CpuSample:
    """Clock ticks per named process (None: it could not be read) and, for the
    processes whose threads were asked for, per kind of thread."""

    processes: Mapping[str, int | None]
    threads: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


def _ticks(stat_path: Path) -> int | None:
    try:
        return proc_cpu_ticks(stat_path.read_text())
    except (OSError, ValueError, IndexError):
        return None


def _thread_ticks(pid: int) -> dict[str, int]:
    kinds: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                comm = (task / "comm").read_text().strip()
                ticks = _ticks(task / "stat")
                if ticks is not None:
                    kind = thread_kind(pid, int(task.name), comm)
                    kinds[kind] = kinds.get(kind, 0) + ticks
    return kinds


def sample_cpu(pids: Mapping[str, int], *, split: Iterable[str] = ()) -> CpuSample:
    """Ticks of each process in `pids`, and the thread split of those named in `split`."""
    return CpuSample(
        processes={name: _ticks(Path(f"/proc/{pid}/stat")) for name, pid in pids.items()},
        threads={name: _thread_ticks(pids[name]) for name in split if name in pids},
    )


@dataclass(frozen=True, slots=True)
class CpuReport:
    """Cores (1.0: one core the whole window) per process (None: unreadable), and
    per kind of thread for the split processes."""

    processes: Mapping[str, float | None]
    threads: Mapping[str, Mapping[str, float]]

    def kind(self, process: str, kind: str) -> float:
        return self.threads.get(process, {}).get(kind, 0.0)


def cpu_report(
    before: CpuSample, after: CpuSample, wall_s: float, *, clock_ticks: int | None = None
) -> CpuReport:
    """What each process (and each kind of thread of the split ones) used between
    two samples `wall_s` apart."""
    clock = clock_ticks or os.sysconf("SC_CLK_TCK")
    processes: dict[str, float | None] = {}
    for name, ticks in before.processes.items():
        later = after.processes.get(name)
        processes[name] = (
            None
            if ticks is None or later is None
            else round(cpu_cores(ticks, later, clock, wall_s), 3)
        )
    threads: dict[str, dict[str, float]] = {}
    for name, kinds in before.threads.items():
        threads[name] = {
            kind: round(cpu_cores(kinds.get(kind, 0), ticks, clock, wall_s), 3)
            for kind, ticks in sorted(after.threads.get(name, {}).items())
        }
    return CpuReport(processes, threads)


def find_service_pids(state_dir: Path | None, ports: ServicePorts | None) -> dict[str, int]:
    """tansu's and redis's pids from the pid files `LocalServices` writes
    (<state>/run/<prog>-<port>.pid), when the bench knows where they are."""
    if state_dir is None or ports is None:
        return {}
    pids: dict[str, int] = {}
    for name, prog, port in (("tansu", "tansu", ports.kafka), ("redis", "redis", ports.redis)):
        with contextlib.suppress(OSError, ValueError):
            pids[name] = int((state_dir / "run" / f"{prog}-{port}.pid").read_text().strip())
    return pids
