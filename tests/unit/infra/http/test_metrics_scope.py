"""`/metrics` and agent ids: with tenant keys on, the per-agent series (labelled
`agent`) show only the agents the scrape's key reaches (an admin key: every one;
no key: none, the deployment-wide series alone); a key that does not authenticate
is a 401, counted. With keys off, everything shows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from grimoire.infra.http.metrics import HttpMetrics, StoreCollector
from grimoire.streams.trust.tenancy import TenantScope, format_token

AGENTS = ("golem-1", "golem-2", "fleet-a/x")


class FixedReading(StoreCollector):
    """A Redis reading with a per-agent gauge and a deployment-wide counter."""

    def __init__(self) -> None:
        family = GaugeMetricFamily("grimoire_memories_live", "Live memories.", labels=["agent"])
        for n, agent in enumerate(AGENTS):
            family.add_metric([agent], n + 1)
        self._fixed: list[Metric] = [
            family,
            CounterMetricFamily("grimoire_ingest_batches", "Batches.", value=7),
        ]

    def collect(self) -> Iterator[Metric]:
        yield from self._fixed

    async def refresh(self) -> None:
        return None


async def scrape(api: Any, token: str | None = None) -> tuple[int, str]:
    api.app.state.metrics = HttpMetrics(FixedReading())
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    answer = await api.http.get("/metrics", headers=headers)
    return answer.status_code, answer.text


def shown(text: str) -> set[str]:
    return {agent for agent in AGENTS if f'agent="{agent}"' in text}


async def test_without_a_key_no_agent_is_named(api: Any) -> None:
    status, text = await scrape(api)
    assert status == 200
    assert shown(text) == set()
    assert "grimoire_ingest_batches_total 7.0" in text
    assert "# HELP grimoire_memories_live" in text  # the series exists, none shown


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        (TenantScope(agent_ids=frozenset({"golem-1"})), {"golem-1"}),
        (TenantScope(agent_prefix="fleet-a/"), {"fleet-a/x"}),
        (TenantScope(admin=True), set(AGENTS)),
    ],
)
async def test_a_key_sees_the_agents_it_reaches(
    api: Any, scope: TenantScope, expected: set[str]
) -> None:
    status, text = await scrape(api, await api.token(scope))
    assert status == 200
    assert shown(text) == expected
    assert "grimoire_ingest_batches_total 7.0" in text


@pytest.mark.parametrize("revoked", [False, True])
async def test_a_key_that_does_not_authenticate_is_refused_and_counted(
    api: Any, revoked: bool
) -> None:
    token = format_token("ab" * 8, "s" * 43)
    if revoked:
        token = await api.token(TenantScope(admin=True))
        for record in await api.keys.list():
            await api.keys.revoke(record.key_id)
    status, text = await scrape(api, token)
    assert status == 401
    assert "golem" not in text
    assert api.refusals.counts["auth_refused_http"] == 1


async def test_with_keys_off_every_agent_shows(make_api: Any) -> None:
    api = await make_api(auth=False)
    status, text = await scrape(api)
    assert status == 200
    assert shown(text) == set(AGENTS)
