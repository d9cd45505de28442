"""POST .../recall and .../search: the body is checked with the worker's own rules,
turned into the SDK's typed options, and the answer comes back as RecallResultV1
JSON; search counts nothing."""

from __future__ import annotations

from typing import Any

import pytest

from grimoire.topics.client import RecallFailed, RecallTimeout, RecallUnauthorized
from grimoire.topics.options import RecallAffect, RecallBudgets, RecallFilters, RecallState


async def test_recall_sends_the_typed_options_and_answers_the_result(
    api: Any, auth: dict[str, str]
) -> None:
    body = {
        "query": "rpc timeouts",
        "k": 3,
        "as_of": "2026-09-21T12:00:00+00:00",
        "filters": {
            "since": 1_700_000_000_000,
            "session_id": "s-9",
            "kinds": ["warning", "episode"],
        },
        "budgets": {"token_budget": 800, "full_text_items": 2},
        "state": {"regime": "calm", "affect": {"pleasure": -0.5, "SEEKING": 0.6}},
        "mode": "full",
        "explain": True,
        "expand_episodes": True,
    }
    answer = await api.http.post("/v1/agents/golem-1/recall", json=body, headers=auth)
    assert answer.status_code == 200, answer.text
    result = answer.json()
    assert result["agent_id"] == "golem-1"
    assert result["items"][0]["id"] == "m-1"
    assert result["items"][0]["text"] is None  # nested fields keep their None
    assert result["timings_ms"] == {"embed": 3.0, "total": 12.5}
    assert result["schema"] == "grimoire.recall_result/1"
    (sent,) = api.gateway.recalls
    assert sent["query"] == "rpc timeouts"
    assert sent["k"] == 3
    assert sent["as_of"] == 1_789_992_000_000  # ISO-8601 taken as the worker takes it
    assert sent["filters"] == RecallFilters(
        since=1_700_000_000_000, session_id="s-9", kinds=("episode", "warning")
    )
    assert sent["budgets"] == RecallBudgets(token_budget=800, full_text_items=2)
    assert sent["state"] == RecallState(
        regime="calm", affect=RecallAffect(pleasure=-0.5, drives={"SEEKING": 0.6})
    )
    assert (sent["mode"], sent["explain"], sent["expand_episodes"]) == ("full", True, True)
    assert sent["record_usage"] is None  # the worker's default: usage counted
    assert sent["timeout"] == api.app.state.deps.settings.http.recall_timeout_s


async def test_as_of_in_iso_8601_goes_out_as_epoch_ms(api: Any, auth: dict[str, str]) -> None:
    body = {"query": "q", "as_of": "2026-09-21T12:00:00+00:00"}
    assert (await api.http.post("/v1/agents/golem-1/recall", json=body, headers=auth)).is_success
    assert api.gateway.recalls[0]["as_of"] == 1_789_992_000_000


async def test_search_counts_nothing(api: Any, auth: dict[str, str]) -> None:
    answer = await api.http.post("/v1/agents/golem-1/search", json={"query": "q"}, headers=auth)
    assert answer.status_code == 200
    (sent,) = api.gateway.recalls
    assert sent["record_usage"] is False
    assert sent["filters"] is sent["budgets"] is sent["state"] is None


@pytest.mark.parametrize(
    ("body", "error", "field"),
    [
        ({}, "missing_field", "query"),
        ({"query": 7}, "wrong_type", "query"),
        ({"query": "q", "limit": 3}, "invalid_value", "limit"),
        ({"query": "q", "k": 0}, "invalid_value", None),
        ({"query": "q", "k": 10_000}, "invalid_value", None),
        ({"query": "q", "filters": {"kinds": ["nonsense"]}}, "invalid_value", "filters.kinds"),
        ({"query": "q", "filters": {"since": 5, "until": 1}}, None, None),
        ({"query": "q", "budgets": {"nonsense_k": 3}}, None, None),
        ({"query": "q", "mode": "loud"}, "invalid_value", "mode"),
        ({"query": "q", "explain": "yes"}, "wrong_type", "explain"),
        ({"query": "q", "state": {"circuit": "nope"}}, None, None),
    ],
)
async def test_bad_bodies_are_400_with_the_workers_reason(
    api: Any, auth: dict[str, str], body: dict[str, Any], error: str | None, field: str | None
) -> None:
    answer = await api.http.post("/v1/agents/golem-1/recall", json=body, headers=auth)
    assert answer.status_code == 400, answer.text
    refused = answer.json()
    assert refused["detail"]
    if error is not None:
        assert refused["error"] == error
    if field is not None:
        assert refused["field"] == field
    assert api.gateway.recalls == []


@pytest.mark.parametrize(
    ("content", "error"),
    [(b"", "missing_field"), (b"{nope", "invalid_json"), (b"[1, 2]", "not_an_object")],
)
async def test_a_body_that_is_no_json_object_is_400(
    api: Any, auth: dict[str, str], content: bytes, error: str
) -> None:
    answer = await api.http.post("/v1/agents/golem-1/recall", content=content, headers=auth)
    assert answer.status_code == 400
    assert answer.json()["error"] == error


async def test_an_oversized_body_is_refused_unread(api: Any, auth: dict[str, str]) -> None:
    answer = await api.http.post(
        "/v1/agents/golem-1/recall", content=b" " * (1 << 20 | 1), headers=auth
    )
    assert answer.status_code == 413
    assert answer.json()["error"] == "oversize"


@pytest.mark.parametrize(
    ("failure", "status", "error"),
    [
        (RecallTimeout("no reply"), 504, "timeout"),
        (RecallFailed("invalid_value: 'k' is too large"), 400, "invalid_value"),
        (RecallFailed("internal_error: boom"), 502, "internal_error"),
        (RecallUnauthorized("unauthorized: no API key"), 502, "unauthorized"),
    ],
)
async def test_worker_failures_map_to_statuses(
    api: Any, auth: dict[str, str], failure: Exception, status: int, error: str
) -> None:
    api.gateway.fail_with = failure
    answer = await api.http.post("/v1/agents/golem-1/recall", json={"query": "q"}, headers=auth)
    assert answer.status_code == status
    assert answer.json()["error"] == error


async def test_the_answers_stages_feed_the_latency_histograms(
    api: Any, auth: dict[str, str]
) -> None:
    from prometheus_client import generate_latest

    await api.http.post("/v1/agents/golem-1/recall", json={"query": "q"}, headers=auth)
    rendered = generate_latest(api.app.state.metrics.registry).decode()
    assert 'grimoire_recall_stage_seconds_count{stage="embed"} 1.0' in rendered
    assert 'grimoire_recall_stage_seconds_bucket{le="0.005",stage="embed"} 1.0' in rendered
    assert 'grimoire_http_recall_seconds_count{route="recall"} 1.0' in rendered
