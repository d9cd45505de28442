"""The pure parts of the recall benchmark's corpus: events, queries, derived vectors."""

from __future__ import annotations

from itertools import islice

import numpy as np
import pytest

from bench.corpus import (
    DERIVED_SIMILARITY,
    corpus_events,
    derive_vector,
    pool_pick,
    recall_queries,
)
from bench.recall import CpuMark, Latency
from grimoire.streams.inbound.events import Accepted, normalize_event
from grimoire.streams.inbound.validators import InputLimits
from tests.support.vectors import random_unit

DIMS = 384


def test_derived_vector_is_deterministic_per_seed_and_memory() -> None:
    base = random_unit(1, DIMS)
    first = derive_vector(base, "m-1", seed=7)
    assert np.array_equal(first, derive_vector(base, "m-1", seed=7))
    assert not np.array_equal(first, derive_vector(base, "m-2", seed=7))
    assert not np.array_equal(first, derive_vector(base, "m-1", seed=8))


def test_derived_vector_is_unit_and_at_the_requested_similarity() -> None:
    base = random_unit(2, DIMS)
    low, high = DERIVED_SIMILARITY
    for index in range(50):
        vector = derive_vector(base, f"m-{index}", seed=7)
        assert vector.dtype == np.float32
        assert float(np.linalg.norm(vector)) == pytest.approx(1.0, abs=1e-5)
        assert low - 1e-5 <= float(vector @ base) <= high + 1e-5


def test_derived_vector_accepts_an_exact_similarity() -> None:
    base = random_unit(3, DIMS)
    vector = derive_vector(base, "m", seed=1, similarity=(0.9, 0.9))
    assert float(vector @ base) == pytest.approx(0.9, abs=1e-5)


def test_pool_pick_is_stable_and_in_range() -> None:
    picks = [pool_pick(f"m-{index}", 7, 5) for index in range(200)]
    assert picks == [pool_pick(f"m-{index}", 7, 5) for index in range(200)]
    assert set(picks) == set(range(5))


def test_corpus_events_are_deterministic_and_valid() -> None:
    first = list(islice(corpus_events("golem", seed=3), 120))
    assert first == list(islice(corpus_events("golem", seed=3), 120))
    assert first != list(islice(corpus_events("golem", seed=4), 120))
    edges: set[str] = set()
    keys: set[str] = set()
    for event in first:
        outcome = normalize_event(event.event_type, event.value, InputLimits())
        assert isinstance(outcome, Accepted), outcome
        for candidate in outcome.candidates:
            keys.update(key.split(":", 1)[0] for key in candidate.keys)
            if candidate.hyperedge is not None:
                edges.add(candidate.hyperedge.edge_id.split(":", 1)[0])
    assert {"run", "turn"} <= edges
    assert {"err", "path", "url", "tool", "tag", "chan", "regime", "entity", "run"} <= keys


def test_recall_queries_are_distinct_and_deterministic() -> None:
    queries = recall_queries(300)
    assert len(queries) == len(set(queries)) == 300
    assert queries == recall_queries(300)


def test_latency_percentiles() -> None:
    latency = Latency.of([float(value) for value in range(1, 101)])
    assert latency.p50_ms == pytest.approx(50.5)
    assert latency.p99_ms == pytest.approx(99.01)


def test_cpu_mark_splits_process_and_redis_cpu_per_recall() -> None:
    cpu = {"used_cpu_sys": 1.5, "used_cpu_user": 2.0, "used_cpu_sys_children": 9.0}
    stats = {"cmdstat_hmget": {"calls": 10, "usec": 5}, "cmdstat_evalsha": {"calls": 4}}
    before = CpuMark.of(10.0, cpu, stats)
    assert before == CpuMark(process_s=10.0, redis_s=3.5, redis_commands=14)
    later_cpu = {"used_cpu_sys": 1.7, "used_cpu_user": 2.4, "used_cpu_sys_children": 50.0}
    later_stats = {
        "cmdstat_hmget": {"calls": 410},
        "cmdstat_evalsha": {"calls": 24},
        "cmdstat_ft.search": {"calls": 6},
    }
    later = CpuMark.of(12.5, later_cpu, later_stats)
    # 100 recalls: 2.5 s of this process, 0.6 s of the server (its forked
    # children, the index's GC, left out), 426 commands.
    assert before.per_recall(later, 100) == {
        "process": 25.0,
        "redis": 6.0,
        "redis_commands": 4.3,
    }
