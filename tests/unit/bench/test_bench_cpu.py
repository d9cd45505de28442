"""The benches' CPU split: which thread is what, and cores between two samples."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from bench.cpu_sample import (
    EMBED_LANES,
    EMBED_QUERY,
    EVENT_LOOP,
    OTHER_THREADS,
    CpuSample,
    cpu_report,
    find_service_pids,
    sample_cpu,
    thread_kind,
)
from grimoire.infra.local.services import ServicePorts


def test_the_main_thread_is_the_event_loop_and_the_model_threads_go_by_name() -> None:
    assert thread_kind(100, 100, "python") == EVENT_LOOP
    assert thread_kind(100, 101, "embed-lane") == EMBED_LANES
    assert thread_kind(100, 102, "embed-query") == EMBED_QUERY
    assert thread_kind(100, 103, "python") == OTHER_THREADS
    # A main thread renamed is still the main thread.
    assert thread_kind(100, 100, "embed-lane") == EVENT_LOOP


def test_cores_per_process_and_per_kind_of_thread() -> None:
    before = CpuSample(
        processes={"worker": 1_000, "redis": 50, "gone": 10},
        threads={"worker": {EVENT_LOOP: 600, EMBED_LANES: 400}},
    )
    after = CpuSample(
        processes={"worker": 1_800, "redis": 90, "gone": None},
        # A kind first seen in the later sample counts from zero.
        threads={"worker": {EVENT_LOOP: 900, EMBED_LANES: 800, OTHER_THREADS: 100}},
    )
    report = cpu_report(before, after, 4.0, clock_ticks=100)
    assert report.processes == {"worker": 2.0, "redis": 0.1, "gone": None}
    assert report.threads == {"worker": {EMBED_LANES: 1.0, EVENT_LOOP: 0.75, OTHER_THREADS: 0.25}}
    assert report.kind("worker", EMBED_LANES) == 1.0
    assert report.kind("worker", EMBED_QUERY) == 0.0
    assert report.kind("redis", EVENT_LOOP) == 0.0


def test_a_sample_of_this_process_sees_a_busy_thread() -> None:
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        first = sample_cpu({"me": os.getpid()}, split=["me"])
        threading.Event().wait(0.5)
        second = sample_cpu({"me": os.getpid()}, split=["me"])
    finally:
        stop.set()
        spinner.join()
    report = cpu_report(first, second, 0.5)
    assert report.processes["me"] is not None
    assert report.kind("me", OTHER_THREADS) > 0.1


def test_a_process_that_is_gone_reads_as_none() -> None:
    sample = sample_cpu({"ghost": 2**22 + 12345}, split=["ghost"])
    assert sample.processes == {"ghost": None}
    assert sample.threads == {"ghost": {}}


def test_service_pids_come_from_the_pid_files(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "tansu-19092.pid").write_text("4242\n")
    (tmp_path / "run" / "redis-16379.pid").write_text("not a pid")
    ports = ServicePorts(kafka=19092, redis=16379)
    assert find_service_pids(tmp_path, ports) == {"tansu": 4242}
    assert find_service_pids(None, ports) == {}


@pytest.mark.parametrize("clock", [0, None])
def test_the_clock_defaults_to_the_systems(clock: int | None) -> None:
    sample = CpuSample(processes={"p": 0})
    later = CpuSample(processes={"p": os.sysconf("SC_CLK_TCK")})
    assert cpu_report(sample, later, 1.0, clock_ticks=clock).processes == {"p": 1.0}
