"""`/metrics` for Prometheus (prometheus-client, the reference client).

Two kinds of series:

- **Read from Redis at scrape time** (`StoreCollector`), so every API process
  reports the same deployment-wide numbers whichever one is scraped: ingest and
  embedding counters, decisions by action, authentication refusals, dead letters
  by reason, per-agent cognitive metrics (docs/design.md §8) with their healthy ranges,
  recent maintenance durations, and the journal lag when a probe is given. A
  reading is kept `http_metrics_cache_s` seconds, so close scrapes share it.
- **Observed by this process** (`HttpMetrics`): recall latency per stage as the
  worker reported it in the answers this process received, the round trip of
  recall and search, and requests this process refused.

Collectors are synchronous in prometheus-client, so the route first `refresh`es
the Redis reading (async), then renders the registry.

Who sees which agents (docs/security.md): the per-agent series (those with an
`agent` label) name agent ids, so with tenant keys on a scrape sees them only for
the agents its key reaches (`Authorization: Bearer`; an admin key sees every one)
and a scrape without a key sees the deployment-wide series alone. The reading is
the same for every caller; `HttpMetrics.scoped` filters what one caller is shown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.asyncio import Redis

from grimoire.infra.http.cognitive import RANGES, values
from grimoire.infra.http.deps import JournalLag
from grimoire.infra.settings import Settings
from grimoire.tables.maintenance.ledger import agent_watermarks
from grimoire.tables.memory.counters import DEAD_LETTER_FIELD
from grimoire.tables.memory.inspect import (
    agent_counters,
    cognitive_reading,
    deployment_counters,
    maintenance_runs,
)

__all__ = ["AGENT_LABEL", "AgentFilter", "HttpMetrics", "StoreCollector"]

logger = logging.getLogger(__name__)

# Seconds: a recall's stages run from well under a millisecond to seconds.
LATENCY_BUCKETS: Final = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

# Deployment counters (the metrics hash) → (series, help).
_DEPLOYMENT_COUNTERS: Final = {
    "staging_purge_passes": ("grimoire_staging_purge_passes", "Staging purge passes run."),
    "staging_purged_batches": (
        "grimoire_staging_purged_batches",
        "Record batches the staging purge deleted.",
    ),
    "staging_purged_records": (
        "grimoire_staging_purged_records",
        "Records the staging purge deleted.",
    ),
    "staging_purged_bytes": (
        "grimoire_staging_purged_bytes",
        "Bytes of batch objects the staging purge deleted (s3).",
    ),
    "staging_purge_failures": (
        "grimoire_staging_purge_failures",
        "Topics a staging purge pass failed on.",
    ),
    "staging_vacuums_early": (
        "grimoire_staging_vacuums_early",
        "Purge passes that vacuumed before every deletion reached the volume servers "
        "(those bytes leave the disk at the next pass).",
    ),
    "ingest_batches": ("grimoire_ingest_batches", "Ingest batches the apply loops folded."),
    "ingest_candidates": (
        "grimoire_ingest_candidates",
        "Memory candidates the write path decided on (not seen before).",
    ),
    "embed_hits": ("grimoire_embed_cache_hits", "Embeddings served from the cache."),
    "embed_misses": ("grimoire_embed_cache_misses", "Embeddings the model had to compute."),
    "embed_model_calls": ("grimoire_embed_model_calls", "Calls into the embedding model."),
    "embed_model_seconds": (
        "grimoire_embed_model_seconds",
        "Seconds spent in the embedding model by the write path.",
    ),
}
# The agents' write-path counters (`AgentStateStore.stats`) that are decisions.
_ACTIONS: Final = ("admit", "quarantine", "merge", "aggregate", "reject")
# Dead letters by reason: `dead_letters:<reason>` fields of the metrics hash, counted
# by the worker as it sends them (`CountedDeadLetters`, tables/memory/counters.py).
DEAD_LETTER_FIELD_PREFIX: Final = DEAD_LETTER_FIELD
_REFUSAL_OUTCOMES: Final = ("unauthenticated", "forbidden")
_SURFACES: Final = ("http", "kafka")
_AGENT_READS: Final = 8  # agents read side by side during a scrape

#: The label that names an agent: series carrying it are shown per caller.
AGENT_LABEL: Final = "agent"
#: Which agents' series a caller may see; None: every agent.
AgentFilter = Callable[[str], bool] | None


class HttpMetrics:
    """This app's registry: its own series and the Redis collector."""

    def __init__(self, collector: StoreCollector | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.auth_refused = Counter(
            "grimoire_auth_refused",
            "Requests this process refused, by surface and reason.",
            ["surface", "reason"],
            registry=self.registry,
        )
        self.recall_stage = Histogram(
            "grimoire_recall_stage_seconds",
            "Recall time per stage as the worker reported it, in answers this process received.",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.recall_round_trip = Histogram(
            "grimoire_http_recall_seconds",
            "Recall and search round trips through Kafka, as this process saw them.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.collector = collector
        if collector is not None:
            self.registry.register(collector)

    def scoped(self, allows: AgentFilter) -> CollectorRegistry:
        """The registry as a caller who may see the agents `allows` admits sees it
        (None: everything)."""
        if allows is None:
            return self.registry
        view = CollectorRegistry(auto_describe=False)
        view.register(_AgentScoped(self.registry, allows))
        return view

    def observe_recall(self, route: str, seconds: float, timings_ms: dict[str, float]) -> None:
        self.recall_round_trip.labels(route).observe(seconds)
        for stage, elapsed_ms in timings_ms.items():
            if isinstance(elapsed_ms, int | float) and elapsed_ms >= 0:
                self.recall_stage.labels(stage).observe(elapsed_ms / 1000.0)


class _AgentScoped(Collector):
    """Every family of `registry`, less the samples naming an agent `allows` refuses
    (a family left empty stays, with its help: the series exists, none is shown)."""

    def __init__(self, registry: CollectorRegistry, allows: Callable[[str], bool]) -> None:
        self._registry = registry
        self._allows = allows

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            kept = [
                sample
                for sample in family.samples
                if AGENT_LABEL not in sample.labels or self._allows(sample.labels[AGENT_LABEL])
            ]
            if len(kept) == len(family.samples):
                yield family
                continue
            narrowed = Metric(family.name, family.documentation, family.type, family.unit)
            narrowed.samples = kept
            yield narrowed


@dataclass(frozen=True, slots=True)
class _AgentReading:
    agent_id: str
    cognitive: dict[str, float | int | None]
    window_added: int
    runs: tuple[tuple[str, float], ...]  # (task, elapsed seconds) of recent runs


class StoreCollector(Collector):
    """Deployment-wide series read from Redis; `refresh()` before each render."""

    def __init__(
        self,
        redis: Redis,
        prefix: str,
        settings: Settings,
        *,
        journal_lag: JournalLag | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._settings = settings
        self._journal_lag = journal_lag
        self._clock = clock
        self._families: list[Metric] = []
        self._read_at: float | None = None
        self._lock = asyncio.Lock()

    def collect(self) -> Iterator[Metric]:
        yield from self._families

    async def refresh(self) -> None:
        async with self._lock:
            now = self._clock()
            fresh = self._read_at is not None and now - self._read_at < (
                self._settings.http.metrics_cache_s
            )
            if fresh:
                return
            started = time.perf_counter()
            families = await self._read()
            elapsed = GaugeMetricFamily(
                "grimoire_metrics_read_seconds",
                "How long the last scrape's Redis reading took.",
                value=time.perf_counter() - started,
            )
            self._families = [*families, elapsed]
            self._read_at = now

    async def _read(self) -> list[Metric]:
        families: list[Metric] = []
        counters = await deployment_counters(self._redis, self._prefix)
        families.extend(_deployment_families(counters))
        watermarks = [pair async for pair in agent_watermarks(self._redis, self._prefix)]
        agents = [agent for agent, _ in watermarks]
        families.append(
            GaugeMetricFamily(
                "grimoire_agents", "Agents with at least one ingested event.", value=len(agents)
            )
        )
        families.extend(_decision_families(await agent_counters(self._redis, self._prefix, agents)))
        # The most recently active agents get series of their own.
        watermarks.sort(key=lambda pair: (-pair[1], pair[0]))
        chosen = [agent for agent, _ in watermarks[: self._settings.http.metrics_agents]]
        readings = await self._agent_readings(chosen)
        families.extend(_cognitive_families(readings))
        families.extend(_maintenance_families(readings))
        if self._journal_lag is not None:
            families.extend(await self._lag_families())
        return families

    async def _agent_readings(self, agents: Sequence[str]) -> list[_AgentReading]:
        gate = asyncio.Semaphore(_AGENT_READS)
        window_ms = int(self._settings.http.cognitive_window_h * 3_600_000)

        async def one(agent_id: str) -> _AgentReading:
            async with gate:
                reading = await cognitive_reading(
                    self._redis,
                    self._prefix,
                    agent_id,
                    window_ms=window_ms,
                )
                runs = await maintenance_runs(self._redis, self._prefix, agent_id)
            return _AgentReading(
                agent_id=agent_id,
                cognitive=values(reading),
                window_added=reading.window_memories,
                runs=tuple(
                    (run.task, run.elapsed_ms / 1000.0)
                    for run in runs
                    if run.elapsed_ms is not None
                ),
            )

        return list(await asyncio.gather(*(one(agent) for agent in agents)))

    async def _lag_families(self) -> list[Metric]:
        assert self._journal_lag is not None
        try:
            lag = await self._journal_lag()
        except Exception:  # the rest of the scrape stands without it
            logger.warning("journal lag unavailable", exc_info=True)
            return []
        if not lag:
            return []
        family = GaugeMetricFamily(
            "grimoire_journal_lag",
            "Journal entries not yet applied by the worker group, per journal partition.",
            labels=["partition"],
        )
        for partition, behind in sorted(lag.items()):
            family.add_metric([str(partition)], behind)
        return [family]


def _deployment_families(counters: dict[str, float]) -> Iterable[Metric]:
    for field, (name, help_text) in _DEPLOYMENT_COUNTERS.items():
        yield CounterMetricFamily(name, help_text, value=counters.get(field, 0.0))
    by_reason = CounterMetricFamily(
        "grimoire_auth_refusals",
        "Requests refused for their tenant key, every surface and process, by reason.",
        labels=["reason"],
    )
    for outcome in _REFUSAL_OUTCOMES:
        by_reason.add_metric([outcome], counters.get(f"auth_{outcome}", 0.0))
    yield by_reason
    by_surface = CounterMetricFamily(
        "grimoire_auth_refusals_by_surface",
        "Requests refused for their tenant key, every process, by surface.",
        labels=["surface"],
    )
    for surface in _SURFACES:
        by_surface.add_metric([surface], counters.get(f"auth_refused_{surface}", 0.0))
    yield by_surface
    dead = {
        field.removeprefix(DEAD_LETTER_FIELD_PREFIX): value
        for field, value in counters.items()
        if field.startswith(DEAD_LETTER_FIELD_PREFIX)
    }
    if dead:
        family = CounterMetricFamily(
            "grimoire_dead_letters", "Inputs dead-lettered, by reason.", labels=["reason"]
        )
        for reason, value in sorted(dead.items()):
            family.add_metric([reason], value)
        yield family


def _decision_families(by_agent: dict[str, dict[str, float]]) -> Iterable[Metric]:
    totals: dict[str, float] = {}
    for counters in by_agent.values():
        for name, value in counters.items():
            totals[name] = totals.get(name, 0.0) + value
    yield CounterMetricFamily(
        "grimoire_candidates",
        "Memory candidates the admission gate decided on, every agent.",
        value=totals.get("candidates", 0.0),
    )
    decisions = CounterMetricFamily(
        "grimoire_decisions",
        "Admission decisions by action, every agent.",
        labels=["action"],
    )
    for action in _ACTIONS:
        decisions.add_metric([action], totals.get(action, 0.0))
    yield decisions
    yield CounterMetricFamily(
        "grimoire_off_topic",
        "Candidates judged off the agent's focus, every agent.",
        value=totals.get("off_topic", 0.0),
    )


_COGNITIVE_SERIES: Final = {
    "admission_rate": ("grimoire_admission_rate", "Stored / candidates (docs/design.md §8)."),
    "average_quality": (
        "grimoire_average_quality",
        "Mean quality of live memories written in the window (docs/design.md §8).",
    ),
    "grimoire_size": ("grimoire_memories_live", "Live (active) memories: the grimoire size."),
    "retrieval_hit_rate": (
        "grimoire_retrieval_hit_rate",
        "Share of recalled memories a positive outcome also named (docs/design.md §8).",
    ),
}


def _cognitive_families(readings: Sequence[_AgentReading]) -> Iterable[Metric]:
    for metric, (name, help_text) in _COGNITIVE_SERIES.items():
        family = GaugeMetricFamily(name, help_text, labels=["agent"])
        for reading in readings:
            value = reading.cognitive.get(metric)
            if value is not None:
                family.add_metric([reading.agent_id], float(value))
        yield family
    added = GaugeMetricFamily(
        "grimoire_memories_window",
        "Live memories written in the cognitive window (the grimoire's growth).",
        labels=["agent"],
    )
    for reading in readings:
        added.add_metric([reading.agent_id], reading.window_added)
    yield added
    low = GaugeMetricFamily(
        "grimoire_cognitive_healthy_low",
        "Lower end of a cognitive metric's healthy range (seed 001).",
        labels=["metric"],
    )
    high = GaugeMetricFamily(
        "grimoire_cognitive_healthy_high",
        "Upper end of a cognitive metric's healthy range (seed 001).",
        labels=["metric"],
    )
    for spec in RANGES:
        if spec.low is not None:
            low.add_metric([spec.metric], spec.low)
        if spec.high is not None:
            high.add_metric([spec.metric], spec.high)
    yield low
    yield high


def _maintenance_families(readings: Sequence[_AgentReading]) -> Iterable[Metric]:
    by_task: dict[str, list[float]] = {}
    for reading in readings:
        for task, seconds in reading.runs:
            by_task.setdefault(task, []).append(seconds)
    runs = GaugeMetricFamily(
        "grimoire_maintenance_recent_runs",
        "Maintenance tasks in the agents' recent logs (the last 50 each), by task.",
        labels=["task"],
    )
    duration = GaugeMetricFamily(
        "grimoire_maintenance_recent_seconds",
        "Duration of those recent maintenance tasks: mean and max, by task.",
        labels=["task", "stat"],
    )
    for task, durations in sorted(by_task.items()):
        runs.add_metric([task], len(durations))
        duration.add_metric([task, "mean"], sum(durations) / len(durations))
        duration.add_metric([task, "max"], max(durations))
    yield runs
    yield duration
