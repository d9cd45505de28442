"""Export, import and facts over HTTP against the real Redis, tenant keys on.

An agent's facts are seeded as the fold writes them (the pure timeline's changes
applied by `RedisFactStore`); the export route must stream the very bytes
`grimoire export` writes, the import route must send that file's chunks as the
CLI's import does (recorded by a gateway: the journal's side is tested in
tests/integration/test_exchange.py), and the fact routes must answer the
bi-temporal queries. No worker: writes are checked where they leave the API.
Each test gets its own key prefix and removes it."""

from __future__ import annotations

import io
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from grimoire.infra.exchange import export_agent
from grimoire.infra.settings import Settings
from grimoire.streams.exchange.chunks import chunk_from_wire
from grimoire.streams.facts.timeline import assert_fact
from grimoire.streams.facts.values import fact_id_for
from grimoire.streams.trust.tenancy import TenantScope
from grimoire.tables.facts.store import RedisFactStore
from grimoire.tables.trust.api_keys import RedisApiKeyStore
from tests.support.contract import delete_prefixed
from tests.support.facts import agent_fact
from tests.support.gateway import RecordingGateway
from tests.support.http_deps import bearer, in_process, keyed_deps

pytestmark = pytest.mark.integration

T0 = 1_790_000_000_000
AGENT = "fleet-x/golem-1"
HEIR = "fleet-x/golem-2"
RIVAL = "rival-1"
# (subject, predicate, object, valid_from block, known at ms, event id)
FACTS = (
    ("alice", "works_at", "acme", 100, T0, "f-1"),
    ("acme", "located_in", "berlin", 50, T0 + 100, "f-2"),
    ("alice", "works_at", "globex", 200, T0 + 1_000, "f-3"),  # closes f-1 at block 200
)


@dataclass
class Api:
    http: httpx.AsyncClient
    gateway: RecordingGateway
    settings: Settings
    key: dict[str, str]  # reaches fleet-x/
    heir_key: dict[str, str]  # reaches HEIR only
    rival_key: dict[str, str]

    async def get(self, path: str, key: dict[str, str] | None = None, **query: Any) -> Any:
        answer = await self.http.get(
            f"/v1/agents/{AGENT}{path}", params=query, headers=self.key if key is None else key
        )
        return answer


async def _seed(store: RedisFactStore) -> None:
    for order, (subject, predicate, obj, block, ts, event) in enumerate(FACTS):
        fact = agent_fact(
            AGENT,
            event,
            subject,
            obj,
            valid_from=block,
            known_ms=ts,
            predicate=predicate,
            order=order,
        )
        await store.apply(AGENT, assert_fact(await store.versions(AGENT, subject, predicate), fact))


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[Api]:
    redis = Redis.from_url(settings.redis.url)
    prefix = f"hx{uuid.uuid4().hex[:8]}"
    try:
        await _seed(RedisFactStore(redis, prefix))
        keys = RedisApiKeyStore(redis, prefix)
        _, token = await keys.create(TenantScope(agent_prefix="fleet-x/"), "fleet", now_ms=1)
        _, heir = await keys.create(TenantScope(agent_ids=frozenset({HEIR})), "heir", now_ms=1)
        _, rival = await keys.create(TenantScope(agent_ids=frozenset({RIVAL})), "rival", now_ms=1)
        gateway = RecordingGateway()
        scoped = settings.with_values(topic_prefix=prefix)
        deps = keyed_deps(redis, prefix, gateway, keys, scoped)
        async with in_process(deps) as http:
            yield Api(http, gateway, scoped, bearer(token), bearer(heir), bearer(rival))
    finally:
        await delete_prefixed(redis, prefix)


# ---- export / import --------------------------------------------------------------


async def test_the_export_route_streams_what_grimoire_export_writes(api: Api) -> None:
    answer = await api.get("/export")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/x-ndjson")
    out = io.BytesIO()
    report = await export_agent(api.settings, AGENT, out, progress=False)
    assert answer.content == out.getvalue()
    lines = answer.content.splitlines()
    header, trailer = orjson.loads(lines[0]), orjson.loads(lines[-1])
    assert header["agent_id"] == AGENT and header["counts"] == report.counts
    assert report.lines >= len(FACTS)
    assert trailer["sha256"] == report.sha256
    without = await api.get("/export", vectors="false")
    assert without.status_code == 200
    assert orjson.loads(without.content.splitlines()[0])["vectors"] is False


async def test_export_bad_input_and_wrong_tenant(api: Api) -> None:
    bad = await api.get("/export", vectors="maybe")
    assert bad.status_code == 400 and bad.json()["field"] == "vectors"
    wrong = await api.get("/export", key=api.rival_key)
    assert wrong.status_code == 403 and wrong.json()["error"] == "forbidden"


async def _exported(api: Api) -> bytes:
    answer = await api.get("/export")
    assert answer.status_code == 200
    return answer.content


async def test_an_import_sends_the_files_chunks_through_the_journal(api: Api) -> None:
    file = await _exported(api)
    answer = await api.http.post(f"/v1/agents/{AGENT}/import", content=file, headers=api.key)
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert body["agent_id"] == AGENT and body["successor_of"] is None
    assert body["chunks"] == len(api.gateway.commands) >= 1
    token = api.key["Authorization"].removeprefix("Bearer ")
    for index, command in enumerate(api.gateway.commands):
        assert command.command == "import" and command.agent_id == AGENT
        assert command.api_key == token  # the worker judges the caller's key again
        chunk = chunk_from_wire(command.import_chunk)
        assert (chunk.import_id, chunk.index, chunk.total) == (
            body["import_id"],
            index,
            body["chunks"],
        )
    # The same file again is the same import (its chunks are applied once).
    again = await api.http.post(f"/v1/agents/{AGENT}/import", content=file, headers=api.key)
    assert again.json()["import_id"] == body["import_id"]


async def test_a_successor_import_needs_a_key_that_reaches_the_predecessor(api: Api) -> None:
    file = await _exported(api)
    path = f"/v1/agents/{HEIR}/import"
    refused = await api.http.post(
        path, params={"as_successor_of": AGENT}, content=file, headers=api.heir_key
    )
    assert refused.status_code == 403, refused.text
    assert AGENT in refused.json()["detail"]
    assert api.gateway.commands == []
    answer = await api.http.post(
        path, params={"as_successor_of": AGENT, "discount": "0.5"}, content=file, headers=api.key
    )
    assert answer.status_code == 202, answer.text
    assert answer.json()["successor_of"] == AGENT and answer.json()["agent_id"] == HEIR
    # A successor inherits memories (facts stay the predecessor's own): whatever
    # it sends goes to the successor.
    assert answer.json()["chunks"] == len(api.gateway.commands)
    assert {c.agent_id for c in api.gateway.commands} <= {HEIR}


async def test_import_bad_input_is_a_clear_400_and_another_tenant_a_403(api: Api) -> None:
    file = await _exported(api)
    post = api.http.post
    lines = file.splitlines()
    tampered = b"\n".join([lines[0], lines[1].replace(b"alice", b"mallory"), *lines[2:]])
    cases = {
        b"": "missing_field",
        b"not json\n": "invalid_value",
        tampered: "invalid_value",
        b"\n".join(lines[:-1]): "invalid_value",  # no trailer
    }
    for content, code in cases.items():
        answer = await post(f"/v1/agents/{AGENT}/import", content=content, headers=api.key)
        assert answer.status_code == 400, (content[:40], answer.text)
        assert answer.json()["error"] == code
    # Restoring AGENT's file as another agent needs `as_successor_of`.
    other = await post(f"/v1/agents/{HEIR}/import", content=file, headers=api.key)
    assert other.status_code == 400 and "as-successor-of" in other.json()["detail"]
    bad_discount = await post(
        f"/v1/agents/{HEIR}/import",
        params={"as_successor_of": AGENT, "discount": "2"},
        content=file,
        headers=api.key,
    )
    assert bad_discount.status_code == 400 and bad_discount.json()["field"] == "discount"
    wrong = await post(f"/v1/agents/{AGENT}/import", content=file, headers=api.rival_key)
    assert wrong.status_code == 403
    assert api.gateway.commands == []


# ---- facts ------------------------------------------------------------------------


def _triples(body: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(f["subject"], f["predicate"], f["object"]) for f in body["facts"]]


async def test_facts_valid_at_a_block_and_as_known_at_a_time(api: Api) -> None:
    early = await api.get("/facts", valid_at=150)
    assert early.status_code == 200, early.text
    assert _triples(early.json()) == [
        ("acme", "located_in", "berlin"),
        ("alice", "works_at", "acme"),
    ]
    late = (await api.get("/facts", valid_at=250)).json()
    assert _triples(late) == [("acme", "located_in", "berlin"), ("alice", "works_at", "globex")]
    closed = (await api.get("/facts", valid_at=150, subject="Alice")).json()["facts"][0]
    assert (closed["valid_from"], closed["valid_until"]) == (100, 200)
    # Before the agent learned of globex, it believed alice still worked at acme.
    then = (await api.get("/facts", known_at=T0 + 500, valid_at=250)).json()
    assert then["query"] == "as_known_at"
    assert _triples(then) == [("acme", "located_in", "berlin"), ("alice", "works_at", "acme")]
    narrowed = (await api.get("/facts", valid_at=250, predicate="works at")).json()
    assert _triples(narrowed) == [("alice", "works_at", "globex")]
    assert (await api.get("/facts", known_at=T0 - 1)).json()["facts"] == []


async def test_fact_neighbours(api: Api) -> None:
    now = await api.get("/facts/neighbours", entity="Alice", hops=2)
    assert now.status_code == 200, now.text
    assert [(n["entity"], n["hops"]) for n in now.json()["neighbours"]] == [("globex", 1)]
    then = (await api.get("/facts/neighbours", entity="alice", hops=2, valid_at=150)).json()
    assert [(n["entity"], n["hops"]) for n in then["neighbours"]] == [("acme", 1), ("berlin", 2)]
    assert then["neighbours"][0]["via"] == [fact_id_for(AGENT, "f-1")]


async def test_asserting_a_fact_publishes_it_as_the_sdk_does(api: Api) -> None:
    fact = {"ts": T0 + 5_000, "subject": "Bob", "predicate": "works at", "object": "Acme",
            "valid_from": 300, "event_id": "f-9"}  # fmt: skip
    answer = await api.http.post(f"/v1/agents/{AGENT}/facts", json=fact, headers=api.key)
    assert answer.status_code == 202, answer.text
    assert answer.json()["fact_id"] == fact_id_for(AGENT, "f-9")
    assert (answer.json()["subject"], answer.json()["predicate"]) == ("bob", "works_at")
    [(topic, key, value)] = api.gateway.published
    assert topic == api.gateway.topics.facts and key == AGENT
    assert orjson.loads(value) == {**fact, "agent_id": AGENT}


async def test_facts_bad_input_is_a_clear_400_and_another_tenant_a_403(api: Api) -> None:
    for query, field in (
        ({}, "valid_at"),
        ({"valid_at": "soon"}, "valid_at"),
        ({"valid_at": -1}, "valid_at"),
        ({"valid_at": 1, "subject": "   "}, "subject"),
    ):
        answer = await api.get("/facts", **query)
        assert answer.status_code == 400, (query, answer.text)
        assert answer.json()["field"] == field
    for query, field in (({}, "entity"), ({"entity": "a", "hops": 9}, "hops")):
        answer = await api.get("/facts/neighbours", **query)
        assert answer.status_code == 400 and answer.json()["field"] == field
    post = api.http.post
    missing = await post(
        f"/v1/agents/{AGENT}/facts", json={"ts": T0, "subject": "a", "object": "b",
                                           "valid_from": 1}, headers=api.key,
    )  # fmt: skip
    assert missing.status_code == 400 and missing.json() == {
        "error": "missing_field",
        "detail": missing.json()["detail"],
        "field": "predicate",
    }
    unknown = await post(f"/v1/agents/{AGENT}/facts", json={"color": 1}, headers=api.key)
    assert unknown.status_code == 400 and unknown.json()["field"] == "color"
    assert api.gateway.published == []
    for path in ("/facts?valid_at=1", "/facts/neighbours?entity=alice"):
        wrong = await api.http.get(f"/v1/agents/{AGENT}{path}", headers=api.rival_key)
        assert wrong.status_code == 403
    wrong = await post(f"/v1/agents/{AGENT}/facts", json={}, headers=api.rival_key)
    assert wrong.status_code == 403
