"""The cognitive metrics' healthy ranges, the series read from the metrics hash,
and `grimoire stats` printing both."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from grimoire.infra import cli
from grimoire.infra.cli import upkeep
from grimoire.infra.http import metrics
from grimoire.infra.http.cognitive import RANGES, assess
from grimoire.tables.memory.inspect import CognitiveReading


def reading(**changes: Any) -> CognitiveReading:
    values: dict[str, Any] = {
        "candidates": 100,
        "stored": 50,
        "window_ms": 7 * 24 * 3_600_000,
        "window_end_ms": 1_790_000_000_000,
        "window_memories": 40,
        "window_quality": 0.62,
        "live": 48,
        "recalled": 10,
        "hits": 4,
    }
    values.update(changes)
    return CognitiveReading(**values)


def test_healthy_readings_are_healthy_and_say_their_ranges() -> None:
    report = assess(reading())
    assert {name: m["status"] for name, m in report.items()} == {
        "admission_rate": "healthy",
        "average_quality": "healthy",
        "grimoire_size": "unrated",
        "retrieval_hit_rate": "healthy",
    }
    assert report["admission_rate"]["value"] == 0.5
    assert report["admission_rate"]["healthy_range"] == [0.4, 0.6]
    assert report["admission_rate"]["alarm"] == "< 20% or > 80%"
    assert report["grimoire_size"]["value"] == 48
    assert report["grimoire_size"]["basis"]["added_in_window"] == 40
    assert report["retrieval_hit_rate"]["value"] == 0.4
    assert report["retrieval_hit_rate"]["healthy_range"] == [0.3, None]


@pytest.mark.parametrize(
    ("changes", "metric", "status"),
    [
        ({"stored": 30}, "admission_rate", "watch"),
        ({"stored": 10}, "admission_rate", "alarm"),
        ({"stored": 90}, "admission_rate", "alarm"),
        ({"candidates": 0, "stored": 0}, "admission_rate", "no_data"),
        ({"window_quality": 0.45}, "average_quality", "watch"),
        ({"window_quality": 0.3}, "average_quality", "alarm"),
        ({"window_quality": None, "window_memories": 0}, "average_quality", "no_data"),
        ({"hits": 2}, "retrieval_hit_rate", "watch"),
        ({"hits": 0}, "retrieval_hit_rate", "alarm"),
        ({"recalled": 0, "hits": 0}, "retrieval_hit_rate", "no_data"),
    ],
)
def test_statuses_follow_the_seeds_ranges(
    changes: dict[str, Any], metric: str, status: str
) -> None:
    assert assess(reading(**changes))[metric]["status"] == status


def test_every_range_has_its_seed_text() -> None:
    assert [r.metric for r in RANGES] == [
        "admission_rate",
        "average_quality",
        "grimoire_size",
        "retrieval_hit_rate",
    ]
    assert all(r.healthy and r.alarm and r.computed for r in RANGES)


class _Families(Collector):
    def __init__(self, families: list[Any]) -> None:
        self.families = families

    def collect(self) -> Any:
        yield from self.families


def render(*families: Any) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families([f for group in families for f in group]))
    return generate_latest(registry).decode()


def test_the_metrics_hash_becomes_counters_and_dead_letters_appear_when_counted() -> None:
    counters = {
        "ingest_candidates": 12.0,
        "embed_hits": 3.0,
        "auth_unauthenticated": 2.0,
        "auth_forbidden": 1.0,
        "auth_refused_http": 2.0,
        "auth_refused_kafka": 1.0,
    }
    text = render(metrics._deployment_families(counters))
    assert "grimoire_ingest_candidates_total 12.0" in text
    assert "grimoire_embed_cache_hits_total 3.0" in text
    assert 'grimoire_auth_refusals_total{reason="unauthenticated"} 2.0' in text
    assert 'grimoire_auth_refusals_by_surface_total{surface="kafka"} 1.0' in text
    assert "grimoire_dead_letters" not in text  # nothing counts them yet
    counted = render(metrics._deployment_families({"dead_letters:oversize": 4.0}))
    assert 'grimoire_dead_letters_total{reason="oversize"} 4.0' in counted


def test_decisions_are_summed_over_agents() -> None:
    text = render(
        metrics._decision_families(
            {"a": {"candidates": 3, "admit": 2, "reject": 1}, "b": {"candidates": 1, "merge": 1}}
        )
    )
    assert "grimoire_candidates_total 4.0" in text
    assert 'grimoire_decisions_total{action="admit"} 2.0' in text
    assert 'grimoire_decisions_total{action="merge"} 1.0' in text
    assert 'grimoire_decisions_total{action="quarantine"} 0.0' in text


def test_cognitive_and_maintenance_series_per_agent() -> None:
    one = metrics._AgentReading(
        agent_id="golem-1",
        cognitive={
            "admission_rate": 0.5,
            "average_quality": None,
            "grimoire_size": 48,
            "retrieval_hit_rate": 0.4,
        },
        window_added=40,
        runs=(("decay", 0.010), ("decay", 0.030), ("curator", 0.2)),
    )
    text = render(metrics._cognitive_families([one]), metrics._maintenance_families([one]))
    assert 'grimoire_admission_rate{agent="golem-1"} 0.5' in text
    assert "grimoire_average_quality{" not in text  # no data: no sample
    assert 'grimoire_memories_live{agent="golem-1"} 48.0' in text
    assert 'grimoire_cognitive_healthy_low{metric="admission_rate"} 0.4' in text
    assert 'grimoire_maintenance_recent_runs{task="decay"} 2.0' in text
    assert 'grimoire_maintenance_recent_seconds{stat="max",task="decay"} 0.03' in text


def test_grimoire_stats_prints_json_or_a_table_with_the_ranges(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    report = {
        "agent_id": "golem-1",
        "candidates": 100,
        "stored": 50,
        "live_memories": 48,
        "watermark_ms": 1_790_000_000_000,
        "tick": 7,
        "cognitive": assess(reading()),
    }

    async def fake_stats(settings: object, agent_id: str) -> dict[str, Any]:
        return {**report, "agent_id": agent_id}

    monkeypatch.setattr(upkeep, "_stats", fake_stats)
    assert cli.main(["stats", "--agent", "golem-1"]) == 0
    printed = orjson.loads(capsys.readouterr().out)
    assert printed["cognitive"]["admission_rate"]["status"] == "healthy"
    assert cli.main(["stats", "--agent", "golem-1", "--table"]) == 0
    table = capsys.readouterr().out
    assert "admission_rate" in table
    assert "40-60% of candidates pass the gate" in table
    assert "unrated" in table
