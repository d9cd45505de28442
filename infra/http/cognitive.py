"""The cognitive quality metrics of docs/design.md §8 (seed 001, "Cognitive Quality
Metrics"), with the healthy ranges the seed gives, as the stats route, `grimoire
stats` and the metrics scrape report them.

- admission rate: stored (admitted + quarantined) / candidates; healthy 40-60 %,
  alarm < 20 % or > 80 %.
- average quality: the mean quality of the live memories written in the window
  (7 days of event time by default); healthy 0.5-0.8, alarm < 0.4.
- grimoire size: live (active) memories, and how many the window added; healthy
  "slow growth, plateau", alarm "unbounded growth".
- retrieval hit rate: the share of recalled items later followed by a positive
  outcome: of the memories the agent's ended runs recalled, those a successful
  run credited (two counters in the agent's stats, incremented with the run's
  credits by the journal's fold, so a replay counts the same); healthy > 30 %
  after 7 days, alarm < 10 %.

Grimoire size has no numeric range in the seed ("slow growth, plateau"), so it is
reported unrated with its growth over the window beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from grimoire.tables.memory.inspect import CognitiveReading

__all__ = ["RANGES", "HealthyRange", "assess", "values"]

HEALTHY: Final = "healthy"
WATCH: Final = "watch"  # outside the healthy range, not yet at the alarm
ALARM: Final = "alarm"
NO_DATA: Final = "no_data"
UNRATED: Final = "unrated"


@dataclass(frozen=True, slots=True)
class HealthyRange:
    metric: str
    computed: str
    healthy: str
    alarm: str
    low: float | None = None  # healthy from
    high: float | None = None  # healthy up to
    alarm_below: float | None = None
    alarm_above: float | None = None

    @property
    def rated(self) -> bool:
        return self.low is not None or self.high is not None

    def status(self, value: float | None) -> str:
        if not self.rated:
            return UNRATED
        if value is None:
            return NO_DATA
        if (self.alarm_below is not None and value < self.alarm_below) or (
            self.alarm_above is not None and value > self.alarm_above
        ):
            return ALARM
        if (self.low is not None and value < self.low) or (
            self.high is not None and value > self.high
        ):
            return WATCH
        return HEALTHY

    def describe(self) -> dict[str, Any]:
        return {
            "computed": self.computed,
            "healthy": self.healthy,
            "alarm": self.alarm,
            "healthy_range": [self.low, self.high] if self.rated else None,
        }


RANGES: Final = (
    HealthyRange(
        "admission_rate",
        "stored (admitted + quarantined) / candidates",
        "40-60% of candidates pass the gate",
        "< 20% or > 80%",
        low=0.40,
        high=0.60,
        alarm_below=0.20,
        alarm_above=0.80,
    ),
    HealthyRange(
        "average_quality",
        "mean quality of live memories written in the window",
        "0.5-0.8",
        "< 0.4 or declining",
        low=0.5,
        high=0.8,
        alarm_below=0.4,
    ),
    HealthyRange(
        "grimoire_size",
        "live (active) memories",
        "slow growth, then a plateau",
        "unbounded growth",
    ),
    HealthyRange(
        "retrieval_hit_rate",
        "of the memories ended runs recalled, the share a successful run credited",
        "> 30% after 7 days",
        "< 10%",
        low=0.30,
        alarm_below=0.10,
    ),
)
_BY_NAME: Final = {r.metric: r for r in RANGES}


def values(reading: CognitiveReading) -> dict[str, float | int | None]:
    return {
        "admission_rate": reading.admission_rate,
        "average_quality": reading.window_quality,
        "grimoire_size": reading.live,
        "retrieval_hit_rate": reading.hit_rate,
    }


def assess(reading: CognitiveReading) -> dict[str, dict[str, Any]]:
    """Each metric's value, healthy range and status (healthy | watch | alarm |
    no_data | unrated), with what it was computed from."""
    basis: dict[str, dict[str, Any]] = {
        "admission_rate": {"candidates": reading.candidates, "stored": reading.stored},
        "average_quality": {
            "window_ms": reading.window_ms,
            "window_end_ms": reading.window_end_ms,
            "memories": reading.window_memories,
        },
        "grimoire_size": {
            "window_ms": reading.window_ms,
            "added_in_window": reading.window_memories,
        },
        "retrieval_hit_rate": {
            "recalled": reading.recalled,
            "hits": reading.hits,
        },
    }
    report: dict[str, dict[str, Any]] = {}
    for name, value in values(reading).items():
        spec = _BY_NAME[name]
        report[name] = {
            "value": round(value, 4) if isinstance(value, float) else value,
            "status": spec.status(value),
            **spec.describe(),
            "basis": basis[name],
        }
    return report
