"""grimoire.streams.inbound.recall_request: recall request validation."""

from __future__ import annotations

from typing import Any

import pytest

from grimoire.streams.inbound.events import Rejection
from grimoire.streams.inbound.recall_request import (
    RECALL_REQUEST_SCHEMA,
    RecallLimits,
    RecallQuery,
    parse_recall_request,
)
from grimoire.streams.inbound.validators import InputLimits
from grimoire.streams.recall.options import RetrievalBudgets
from tests.support.inbound import DROP, payload

LIMITS = RecallLimits()
INPUT = InputLimits()
REQUEST = {
    "agent_id": "agent-1",
    "query": "disk full",
    "reply_to": "grimoire.replies.client-1",
    "correlation_id": "c-1",
}


def request(**overrides: Any) -> bytes:
    return payload(REQUEST, overrides)


def parsed(raw: bytes, limits: RecallLimits = LIMITS) -> RecallQuery:
    result = parse_recall_request(raw, limits, INPUT)
    assert isinstance(result, RecallQuery), result
    return result


def test_minimal_request() -> None:
    assert parsed(request()) == RecallQuery(
        agent_id="agent-1",
        query="disk full",
        reply_to="grimoire.replies.client-1",
        correlation_id="c-1",
        as_of_ms=None,
    )


def test_default_k_comes_from_limits() -> None:
    assert parsed(request(), RecallLimits(defaults=RetrievalBudgets(max_items=7))).k == 7


@pytest.mark.parametrize("k", [1, 5, 100])
def test_explicit_k(k: int) -> None:
    assert parsed(request(k=k)).k == k


def test_k_bound_follows_limits() -> None:
    assert parsed(request(k=3), RecallLimits(max_k=3)).k == 3
    rejected = parse_recall_request(request(k=4), RecallLimits(max_k=3), INPUT)
    assert isinstance(rejected, Rejection)
    assert (rejected.reason, rejected.field) == ("invalid_value", "k")


def test_schema_accepted() -> None:
    assert parsed(request(schema=RECALL_REQUEST_SCHEMA)).agent_id == "agent-1"
    assert RECALL_REQUEST_SCHEMA == "grimoire.recall_request/1"


@pytest.mark.parametrize(
    ("as_of", "expected"),
    [
        (1_767_225_600_000, 1_767_225_600_000),
        ("2026-01-01T00:00:00Z", 1_767_225_600_000),
        ("2026-01-01T01:00:00+01:00", 1_767_225_600_000),
    ],
)
def test_as_of_parsed(as_of: object, expected: int) -> None:
    assert parsed(request(as_of=as_of)).as_of_ms == expected


def test_null_as_of_is_absent() -> None:
    assert parsed(request(as_of=None)).as_of_ms is None


REJECTIONS = [
    pytest.param(b"{", "invalid_json", None, id="bad-json"),
    pytest.param(b"[]", "not_an_object", None, id="list"),
    pytest.param(request(reply_to=DROP), "missing_field", "reply_to", id="no-reply-to"),
    pytest.param(request(reply_to=""), "missing_field", "reply_to", id="empty-reply-to"),
    pytest.param(request(reply_to=5), "wrong_type", "reply_to", id="reply-to-int"),
    pytest.param(request(reply_to="bad topic!"), "invalid_value", "reply_to", id="reply-to-space"),
    pytest.param(request(reply_to="x/y"), "invalid_value", "reply_to", id="reply-to-slash"),
    pytest.param(request(reply_to="x" * 129), "oversize", "reply_to", id="reply-to-long"),
    pytest.param(request(k=0), "invalid_value", "k", id="k-zero"),
    pytest.param(request(k=-2), "invalid_value", "k", id="k-negative"),
    pytest.param(request(k=101), "invalid_value", "k", id="k-over-max"),
    pytest.param(request(k="5"), "wrong_type", "k", id="k-string"),
    pytest.param(request(k=True), "wrong_type", "k", id="k-bool"),
    pytest.param(request(query=DROP), "missing_field", "query", id="no-query"),
    pytest.param(request(query="   "), "missing_field", "query", id="blank-query"),
    pytest.param(request(query="q" * 4001), "oversize", "query", id="query-long"),
    pytest.param(request(query="a\x00b"), "control_characters", "query", id="query-nul"),
    pytest.param(request(correlation_id=DROP), "missing_field", "correlation_id", id="no-corr"),
    pytest.param(request(correlation_id="c 1"), "invalid_value", "correlation_id", id="corr-space"),
    pytest.param(request(agent_id=DROP), "missing_field", "agent_id", id="no-agent"),
    pytest.param(request(as_of=1), "timestamp_out_of_range", "as_of", id="as-of-out-of-range"),
    pytest.param(request(as_of="2026-01-01"), "invalid_value", "as_of", id="as-of-naive"),
    pytest.param(
        request(schema="grimoire.recall_request/2"), "unsupported_schema", "schema", id="schema"
    ),
]


@pytest.mark.parametrize(("raw", "reason", "field"), REJECTIONS)
def test_rejections(raw: bytes, reason: str, field: str | None) -> None:
    result = parse_recall_request(raw, LIMITS, INPUT)
    assert isinstance(result, Rejection), result
    assert result.reason == reason
    assert result.field == field


def test_rejection_keeps_agent_id() -> None:
    result = parse_recall_request(request(k=0), LIMITS, INPUT)
    assert isinstance(result, Rejection)
    assert result.agent_id == "agent-1"
    result = parse_recall_request(request(agent_id=3, k=0), LIMITS, INPUT)
    assert isinstance(result, Rejection)
    assert result.agent_id is None


def test_filters_budgets_state_and_flags_are_parsed() -> None:
    from grimoire.streams.recall.options import ProvenanceFilters, RetrievalMode

    q = parsed(
        request(
            filters={
                "since": 1_700_000_000_000,
                "until": "2026-01-01T00:00:00Z",
                "session_id": "s1",
                "run_id": "r1",
                "actor_id": "ops",
                "event_type_prefix": "tool",
                "kinds": ["insight", "episode"],
                "layers": ["action"],
            },
            budgets={"eidolon_k": 5, "max_hops": 1, "token_budget": 300, "max_items": 4},
            state={"digest": ["err:timeout"], "regime": "bear", "circuit": "causal"},
            mode="light",
            explain=True,
            expand_episodes=True,
            record_usage=False,
        )
    )
    assert q.filters == ProvenanceFilters(
        since_ms=1_700_000_000_000,
        until_ms=1_767_225_600_000,
        session_id="s1",
        run_id="r1",
        actor_id="ops",
        event_type_prefix="tool",
        kinds=("episode", "insight"),
        layers=("action",),
    )
    assert (q.budgets.eidolon_k, q.budgets.walk.max_hops, q.budgets.token_budget, q.k) == (
        5,
        1,
        300,
        4,
    )
    assert q.state.digest == ("err:timeout",) and q.state.regime == "bear"
    assert (q.mode, q.explain, q.expand_episodes, q.record_usage) == (
        RetrievalMode.LIGHT,
        True,
        True,
        False,
    )


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"filters": {"kinds": ["dream"]}}, "filters.kinds"),
        ({"filters": {"since": 1_800_000_000_000, "until": 1_700_000_000_000}}, "filters.since"),
        ({"budgets": {"max_hops": 99}}, "budgets.max_hops"),
        ({"budgets": {"token_budget": -1}}, "token_budget"),
        ({"budgets": []}, "budgets"),
        ({"state": {"circuit": "telepathy"}}, "state.circuit"),
        ({"mode": "maximal"}, "mode"),
        ({"explain": "yes"}, "explain"),
        ({"k": 3, "budgets": {"max_items": 4}}, "k"),
    ],
)
def test_bad_optional_parts_are_rejected_with_their_field(
    overrides: dict[str, Any], field: str
) -> None:
    result = parse_recall_request(request(**overrides), LIMITS, INPUT)
    assert isinstance(result, Rejection)
    assert result.field == field
