"""Decoding fact asserts and fact queries: what the SDK sends is accepted and
normalised; anything malformed is a rejection with a machine-readable reason."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from grimoire.streams.facts.values import fact_id_for
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.inbound.fact import FactQuery, FactQueryKind, parse_fact, parse_fact_query
from grimoire.streams.inbound.validators import InputLimits
from grimoire.topics.schemas import FactQueryV1, FactV1

TS = 1_790_000_000_000
LIMITS = InputLimits()


def test_an_sdk_fact_is_accepted_and_normalised() -> None:
    raw = FactV1(agent_id="g", ts=TS, subject=" @Alice ", predicate="Works At",
                 object="New  York", valid_from=7, event_id="e1").dumps_json()  # fmt: skip
    fact = parse_fact(raw, LIMITS)
    assert not isinstance(fact, Rejection)
    assert (fact.subject, fact.predicate, fact.object, fact.object_is_entity) == (
        "alice", "works_at", "new_york", True,
    )  # fmt: skip
    assert (fact.fact_id, fact.valid_from, fact.known_from_ms) == (fact_id_for("g", "e1"), 7, TS)
    value = parse_fact(
        FactV1(agent_id="g", ts=TS, subject="pool", predicate="fee", object=" 0.05% ",
               valid_from=1, object_is_entity=False).dumps_json(), LIMITS,
    )  # fmt: skip
    assert not isinstance(value, Rejection)
    assert (value.object, value.object_is_entity) == ("0.05%", False)
    assert value.source_event_id.startswith("sha256:")


BASE: dict[str, Any] = {"agent_id": "g", "ts": TS, "subject": "a", "predicate": "p",
                        "object": "b", "valid_from": 1}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "reason", "field"),
    [
        ({"subject": None}, "missing_field", "subject"),
        ({"subject": "@"}, "invalid_value", "subject"),
        ({"predicate": "  "}, "missing_field", "predicate"),
        ({"valid_from": -1}, "invalid_value", "valid_from"),
        ({"valid_from": "7"}, "wrong_type", "valid_from"),
        ({"ts": None}, "missing_field", "ts"),
        ({"object_is_entity": "yes"}, "wrong_type", "object_is_entity"),
        ({"schema": "grimoire.fact/2"}, "unsupported_schema", "schema"),
        ({"agent_id": "a b"}, "invalid_value", "agent_id"),
    ],
)
def test_a_malformed_fact_is_rejected_with_its_reason(
    change: dict[str, Any], reason: str, field: str
) -> None:
    data = {**BASE, **change}
    rejected = parse_fact(orjson.dumps({k: v for k, v in data.items() if v is not None}), LIMITS)
    assert isinstance(rejected, Rejection)
    assert (rejected.reason, rejected.field) == (reason, field)


def query(**fields: Any) -> bytes:
    base: dict[str, Any] = {"agent_id": "g", "reply_to": "p.replies.c1", "correlation_id": "c"}
    return FactQueryV1(**{**base, **fields}).dumps_json()


def test_fact_queries_parse_per_kind() -> None:
    parsed = parse_fact_query(query(query="neighbours", entity="Alice", hops=2), LIMITS,
                              reply_namespace="p.replies.")  # fmt: skip
    assert isinstance(parsed, FactQuery)
    assert (parsed.kind, parsed.entity, parsed.hops) == (FactQueryKind.NEIGHBOURS, "alice", 2)
    known = parse_fact_query(query(query="as_known_at", ts=TS, subject="Alice"), LIMITS)
    assert isinstance(known, FactQuery) and (known.ts_ms, known.subject) == (TS, "alice")


@pytest.mark.parametrize(
    ("fields", "reason", "field"),
    [
        ({"query": "valid_at"}, "missing_field", "block"),
        ({"query": "as_known_at"}, "missing_field", "ts"),
        ({"query": "neighbours"}, "missing_field", "entity"),
        ({"query": "neighbours", "entity": "a", "hops": 9}, "invalid_value", "hops"),
        ({"query": "everything"}, "invalid_value", "query"),
        ({"query": "valid_at", "block": 1, "reply_to": "other.topic"}, "invalid_value", "reply_to"),
    ],
)
def test_a_malformed_fact_query_is_rejected(
    fields: dict[str, Any], reason: str, field: str
) -> None:
    rejected = parse_fact_query(query(**fields), LIMITS, reply_namespace="p.replies.")
    assert isinstance(rejected, Rejection)
    assert (rejected.reason, rejected.field) == (reason, field)
