"""The writes: events, retract, forget and compact go out through Kafka (202) after
the same checks the worker makes; pin and unpin read the store first (tested in
tests/integration/test_http_api.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from grimoire.streams.trust.tenancy import TenantScope


@pytest.fixture
async def token(api: Any) -> str:
    token: str = await api.token(TenantScope(agent_ids=frozenset({"golem-1"})))
    return token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_an_episode_is_checked_then_published_keyed_by_its_agent(
    api: Any, token: str
) -> None:
    body = {"kind": "episode", "ts": 1_790_000_000_000, "text": "RPC timed out", "event_id": "e-1"}
    answer = await api.http.post("/v1/agents/golem-1/events", json=body, headers=bearer(token))
    assert answer.status_code == 202, answer.text
    accepted = answer.json()
    assert accepted["accepted"] is True
    assert accepted["event_id"] == "e-1"
    assert len(accepted["candidates"]) == 1
    ((topic, key, value),) = api.gateway.published
    assert (topic, key) == ("gm.episodes", "golem-1")
    assert orjson.loads(value) == {
        "ts": 1_790_000_000_000,
        "text": "RPC timed out",
        "event_id": "e-1",
        "agent_id": "golem-1",
    }


async def test_a_transcript_line_and_a_tool_event_go_to_their_topics(api: Any, token: str) -> None:
    line = {
        "kind": "transcript",
        "ts": 1_790_000_000_000,
        "line": {"role": "user", "content": "hi there, disk is full"},
    }
    tool = {"kind": "tool_event", "ts": 1_790_000_000_000, "tool": "rpc", "error": "timeout"}
    for body in (line, tool):
        answer = await api.http.post("/v1/agents/golem-1/events", json=body, headers=bearer(token))
        assert answer.status_code == 202, answer.text
    assert [topic for topic, _, _ in api.gateway.published] == ["gm.transcripts", "gm.tool-events"]


@pytest.mark.parametrize(
    ("body", "error", "field"),
    [
        ({"ts": 1_790_000_000_000, "text": "x"}, "missing_field", "kind"),
        ({"kind": "dream", "ts": 1_790_000_000_000, "text": "x"}, "invalid_value", "kind"),
        ({"kind": "episode", "text": "x"}, "missing_field", "ts"),
        ({"kind": "episode", "ts": 1_790_000_000_000, "text": "   "}, "missing_field", "text"),
        ({"kind": "episode", "ts": 5, "text": "x"}, "timestamp_out_of_range", "ts"),
        (
            {"kind": "episode", "ts": 1_790_000_000_000, "text": "x", "agent_id": "golem-2"},
            "invalid_value",
            "agent_id",
        ),
    ],
)
async def test_bad_events_are_400_and_never_published(
    api: Any, token: str, body: dict[str, Any], error: str, field: str
) -> None:
    answer = await api.http.post("/v1/agents/golem-1/events", json=body, headers=bearer(token))
    assert answer.status_code == 400, answer.text
    assert (answer.json()["error"], answer.json()["field"]) == (error, field)
    assert api.gateway.published == []


async def test_retract_sends_a_command_with_a_fresh_id_and_the_callers_key(
    api: Any, token: str
) -> None:
    for _ in range(2):
        answer = await api.http.post(
            "/v1/agents/golem-1/retract", json={"source_event_id": "e-1"}, headers=bearer(token)
        )
        assert answer.status_code == 202
        assert answer.json()["source_event_id"] == "e-1"
    first, second = api.gateway.commands
    assert (first.command, first.agent_id, first.source_event_id) == ("retract", "golem-1", "e-1")
    assert first.api_key == token
    assert first.event_id != second.event_id  # a repeat is a new command


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({}, "missing_field"),
        ({"source_event_id": ""}, "missing_field"),
        ({"source_event_id": "two words"}, "invalid_value"),
        ({"source_event_id": 7}, "wrong_type"),
        ({"source_event_id": "e", "also": 1}, "invalid_value"),
    ],
)
async def test_a_bad_retract_is_400(api: Any, token: str, body: dict[str, Any], error: str) -> None:
    answer = await api.http.post("/v1/agents/golem-1/retract", json=body, headers=bearer(token))
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == error
    assert api.gateway.commands == []


async def test_forget_and_compact(api: Any, token: str) -> None:
    forget = await api.http.post("/v1/agents/golem-1/forget", headers=bearer(token))
    assert forget.status_code == 202
    assert [c.command for c in api.gateway.commands] == ["forget"]
    compact = await api.http.post("/v1/agents/golem-1/compact", headers=bearer(token))
    assert compact.status_code == 202
    assert api.gateway.maintenance == [("golem-1", True)]
    extra = await api.http.post(
        "/v1/agents/golem-1/compact", json={"now": True}, headers=bearer(token)
    )
    assert extra.status_code == 400


async def test_without_http_keys_a_command_carries_the_clients_key_not_the_callers(
    make_api: Any,
) -> None:
    api = await make_api(auth=False)
    answer = await api.http.post(
        "/v1/agents/golem-1/forget", headers={"Authorization": "Bearer whatever"}
    )
    assert answer.status_code == 202
    assert api.gateway.commands[0].api_key is None


async def test_events_and_facts_go_out_with_the_caller_s_key(api: Any, token: str) -> None:
    # The worker checks the caller's own key again before it journals the write.
    body = {"kind": "episode", "ts": 1_790_000_000_000, "text": "RPC timed out"}
    answer = await api.http.post("/v1/agents/golem-1/events", json=body, headers=bearer(token))
    assert answer.status_code == 202, answer.text
    fact = {"ts": 1_790_000_000_000, "subject": "node-7", "predicate": "state", "object": "full"}
    answer = await api.http.post(
        "/v1/agents/golem-1/facts", json={**fact, "valid_from": 3}, headers=bearer(token)
    )
    assert answer.status_code == 202, answer.text
    assert [topic for topic, _, _ in api.gateway.published] == ["gm.episodes", "gm.facts"]
    assert api.gateway.published_keys == [token, token]
    assert all(b"api_key" not in value for _, _, value in api.gateway.published)


async def test_without_http_keys_events_go_out_with_the_client_s_key(make_api: Any) -> None:
    api = await make_api(auth=False)
    body = {"kind": "episode", "ts": 1_790_000_000_000, "text": "RPC timed out"}
    answer = await api.http.post(
        "/v1/agents/golem-1/events", json=body, headers={"Authorization": "Bearer whatever"}
    )
    assert answer.status_code == 202
    assert api.gateway.published_keys == [None]
