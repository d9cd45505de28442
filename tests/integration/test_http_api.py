"""The HTTP API against the real broker, worker and Redis, with tenant keys on.

One agent's events go in through `POST .../events` and are applied by the worker;
then every route answers: its happy path, bad input (400), no key (401) and a key
of another tenant (403). Writes (retract, pin, unpin, forget, compact) are Kafka
commands the journal applies, so their effect is awaited through the API's reads.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import yaml
from redis.asyncio import Redis

from grimoire.infra.http.app import openapi_text
from grimoire.infra.settings import Settings
from grimoire.streams.trust.tenancy import TenantScope
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.trust.api_keys import RedisApiKeyStore
from tests.support.http_deps import bearer, in_process, keyed_deps
from tests.support.live import Live

pytestmark = pytest.mark.integration

T0 = 1_790_000_000_000
Eventually = Callable[..., Awaitable[Any]]


@dataclass
class Setup:
    http: httpx.AsyncClient
    redis: Redis
    prefix: str
    agent: str  # the tenant's agent, with events
    other: str  # another tenant's agent, with events
    doomed: str  # the tenant's agent that gets forgotten
    key: dict[str, str]  # reaches `agent` and `doomed` (a prefix key)
    other_key: dict[str, str]  # reaches `other` only
    admin_key: dict[str, str]


async def _publish(http: httpx.AsyncClient, agent: str, key: dict[str, str], **body: Any) -> str:
    answer = await http.post(f"/v1/agents/{agent}/events", json=body, headers=key)
    assert answer.status_code == 202, answer.text
    event_id: str = answer.json()["event_id"]
    return event_id


@pytest.fixture
async def api(live: Live) -> AsyncIterator[Setup]:
    client = live.client
    store = RedisApiKeyStore(live.redis, live.prefix)
    deps = keyed_deps(
        live.redis,
        live.prefix,
        client,
        store,
        live.settings.with_values(http_metrics_cache_s=0.0),
    )
    suffix = uuid.uuid4().hex[:8]
    fleet = f"fleet-{suffix}/"
    agent, doomed, other = f"{fleet}golem-1", f"{fleet}golem-2", f"rival-{suffix}"
    _, token = await store.create(TenantScope(agent_prefix=fleet), "fleet", now_ms=1)
    _, other_token = await store.create(
        TenantScope(agent_ids=frozenset({other})), "rival", now_ms=1
    )
    _, admin_token = await store.create(TenantScope(admin=True), "operator", now_ms=1)
    async with in_process(deps, timeout=30) as http:
        setup = Setup(
            http=http,
            redis=live.redis,
            prefix=live.prefix,
            agent=agent,
            other=other,
            doomed=doomed,
            key=bearer(token),
            other_key=bearer(other_token),
            admin_key=bearer(admin_token),
        )
        episodes = (
            ("RPC endpoint timed out twice on node seven", "TimeoutError: rpc read timed out"),
            ("disk full on node seven, backups paused", "OSError: No space left on device"),
            ("deployed the fix for the RPC timeout to staging", None),
        )
        for n, (text, error) in enumerate(episodes):
            await _publish(
                http, agent, setup.key, kind="episode", ts=T0 + n * 1000, text=text,
                error=error, importance=0.9, event_id=f"e-{n}", run_id="r-1",
                tags=["topic/ops"],
            )  # fmt: skip
        await _publish(
            http, agent, setup.key, kind="transcript", ts=T0 + 5000, turn_id="t-1",
            line={"role": "user", "content": "why did the RPC endpoint time out?"},
        )  # fmt: skip
        await _publish(http, other, setup.other_key, kind="episode", ts=T0, text="rival secret")
        await _publish(http, doomed, setup.key, kind="episode", ts=T0, text="soon forgotten")

        async def applied() -> bool:
            counts = {}
            for name in (agent, other, doomed):
                stats = await http.get(f"/v1/agents/{name}/stats", headers=setup.admin_key)
                counts[name] = stats.json()["candidates"]
            return counts == {agent: 4, other: 1, doomed: 1}

        await live.eventually(applied, timeout=60)
        yield setup


async def _recalled(api: Setup, query: str = "rpc timeout", **body: Any) -> dict[str, Any]:
    answer = await api.http.post(
        f"/v1/agents/{api.agent}/recall", json={"query": query, **body}, headers=api.key
    )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def _agent_routes(api: Setup, memory_id: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """Every route under the agent, filled in, with a body that would be accepted."""
    spec = yaml.safe_load(openapi_text())
    bodies: dict[str, dict[str, Any]] = {
        "recall": {"query": "rpc"},
        "search": {"query": "rpc"},
        "events": {"kind": "episode", "ts": T0, "text": "x"},
        "retract": {"source_event_id": "e-0"},
        "config": {"top_k": 3},
    }
    routes = []
    for path, item in spec["paths"].items():
        if "{agent}" not in path:
            continue
        filled = (
            path.replace("{agent}", api.agent)
            .replace("{memory_id}", memory_id)
            .replace("{episode_id}", "run:r-1")
        )
        for method in item:
            routes.append((method.upper(), filled, bodies.get(path.rsplit("/", 1)[-1])))
    return routes


async def test_every_route_refuses_no_key_and_another_tenants_key(api: Setup) -> None:
    memory_id = (await _recalled(api))["items"][0]["id"]
    routes = _agent_routes(api, memory_id)
    assert len(routes) == 28
    metrics = Keyspace(api.prefix).metrics

    async def refused(field: str) -> int:
        return int(await api.redis.hget(metrics, field) or 0)

    before = {f: await refused(f) for f in ("auth_unauthenticated", "auth_forbidden")}
    for method, path, body in routes:
        none = await api.http.request(method, path, json=body)
        assert none.status_code == 401, (method, path, none.text)
        assert none.json()["error"] == "unauthenticated"
        wrong = await api.http.request(method, path, json=body, headers=api.other_key)
        assert wrong.status_code == 403, (method, path, wrong.text)
        assert wrong.json()["error"] == "forbidden"
        bad = await api.http.request(
            method, path.replace(api.agent, "has space"), json=body, headers=api.admin_key
        )
        assert bad.status_code == 400, (method, path, bad.text)
    assert await refused("auth_unauthenticated") == before["auth_unauthenticated"] + 28
    assert await refused("auth_forbidden") == before["auth_forbidden"] + 28
    assert int(await api.redis.hget(metrics, "auth_refused_http") or 0) >= 30


async def _at_least(read: Callable[[], Awaitable[int]], wanted: int) -> bool:
    return await read() >= wanted


async def test_recall_and_search(api: Setup, eventually: Eventually) -> None:
    result = await _recalled(api, explain=True, k=3)
    assert result["agent_id"] == api.agent
    assert 0 < len(result["items"]) <= 3
    assert result["items"][0]["scores"]  # explain
    assert "total" in result["timings_ms"]
    memory_id = result["items"][0]["id"]
    usage = Keyspace(api.prefix).usage(api.agent, memory_id)

    async def used() -> int:
        return int(await api.redis.hget(usage, "included_count_total") or 0)

    # Usage is a journal entry applied after the answer: wait for the recall's.
    await eventually(lambda: used(), timeout=30)
    search = await api.http.post(
        f"/v1/agents/{api.agent}/search", json={"query": "rpc timeout", "k": 3}, headers=api.key
    )
    assert search.status_code == 200
    assert [i["id"] for i in search.json()["items"]] == [i["id"] for i in result["items"]]
    # A recall after the search: its usage is applied after anything the search left.
    await _recalled(api, explain=True, k=3)
    await eventually(lambda: _at_least(used, 2), timeout=30)
    assert await used() == 2  # the two recalls; the search counted nothing
    # Another tenant's memories never come back, and its key is refused.
    rival = await api.http.post(
        f"/v1/agents/{api.agent}/search", json={"query": "rival secret"}, headers=api.key
    )
    assert all("rival" not in item["gist"] for item in rival.json()["items"])
    bad = await api.http.post(
        f"/v1/agents/{api.agent}/recall",
        json={"query": "q", "filters": {"kinds": ["nope"]}},
        headers=api.key,
    )
    assert bad.status_code == 400
    assert bad.json()["field"] == "filters.kinds"


async def test_a_memory_with_its_full_text_and_its_graph(api: Setup) -> None:
    item = (await _recalled(api, "disk full on node seven"))["items"][0]
    answer = await api.http.get(f"/v1/agents/{api.agent}/memories/{item['id']}", headers=api.key)
    assert answer.status_code == 200
    memory = answer.json()
    assert memory["id"] == item["id"]
    assert memory["agent_id"] == api.agent
    assert memory["text"] == "disk full on node seven, backups paused"
    assert memory["hyperedge_ids"] == ["run:r-1"]
    assert memory["deleted"] is False
    assert "canonical" not in memory and "eidolon" not in memory
    assert isinstance(memory["nexus_keys"], list)
    assert memory["nexus_keys"], memory

    graph = await api.http.get(
        f"/v1/agents/{api.agent}/memories/{item['id']}/graph?depth=2", headers=api.key
    )
    assert graph.status_code == 200
    found = graph.json()
    types = {node["id"]: node["type"] for node in found["nodes"]}
    assert types[item["id"]] == "memory"
    assert {f"key:{key}" for key in memory["nexus_keys"]} <= set(types)
    assert all(
        types[e["source"]] == "memory" and types[e["target"]] == "key" for e in found["edges"]
    )
    assert sum(1 for kind in types.values() if kind == "memory") > 1  # neighbours via run:r-1

    # Another agent's memory under this agent's path reads as absent.
    rival = await api.http.post(
        f"/v1/agents/{api.other}/search", json={"query": "rival"}, headers=api.other_key
    )
    rival_id = rival.json()["items"][0]["id"]
    for path in (f"memories/{rival_id}", f"memories/{rival_id}/graph", "memories/nope"):
        missing = await api.http.get(f"/v1/agents/{api.agent}/{path}", headers=api.key)
        assert missing.status_code == 404, path
        assert missing.json()["error"] == "not_found"
    for query in ("depth=0", "depth=9", "depth=x", "per_key=0"):
        bad = await api.http.get(
            f"/v1/agents/{api.agent}/memories/{item['id']}/graph?{query}", headers=api.key
        )
        assert bad.status_code == 400, query


async def test_episodes_and_their_roles(api: Setup) -> None:
    answer = await api.http.get(f"/v1/agents/{api.agent}/episodes", headers=api.key)
    assert answer.status_code == 200
    episodes = {e["episode_id"]: e for e in answer.json()}
    assert episodes["run:r-1"]["members"] == 3
    assert episodes["turn:t-1"]["members"] == 1
    assert answer.json()[0]["episode_id"] == "turn:t-1"  # newest first
    one = await api.http.get(f"/v1/agents/{api.agent}/episodes?limit=1", headers=api.key)
    assert len(one.json()) == 1
    detail = await api.http.get(f"/v1/agents/{api.agent}/episodes/run:r-1", headers=api.key)
    assert detail.status_code == 200
    members = detail.json()["members"]
    assert len(members) == 3
    assert {m["role"] for m in members} <= {"trigger", "context", "action", "outcome"}
    assert [m["ts"] for m in members] == sorted(m["ts"] for m in members)
    missing = await api.http.get(f"/v1/agents/{api.agent}/episodes/run:nope", headers=api.key)
    assert missing.status_code == 404
    rival = await api.http.get(f"/v1/agents/{api.other}/episodes", headers=api.other_key)
    assert rival.json() == []
    bad = await api.http.get(f"/v1/agents/{api.agent}/episodes?limit=0", headers=api.key)
    assert bad.status_code == 400


async def test_playbook_stats_and_audit(api: Setup) -> None:
    none = await api.http.get(f"/v1/agents/{api.agent}/playbook", headers=api.key)
    assert none.status_code == 404
    await api.redis.set(Keyspace(api.prefix).playbook(api.agent), "# PLAYBOOK\n\n## Global\n")
    playbook = await api.http.get(f"/v1/agents/{api.agent}/playbook", headers=api.key)
    assert playbook.status_code == 200
    assert playbook.headers["content-type"].startswith("text/markdown")
    assert playbook.text.startswith("# PLAYBOOK")

    stats = (await api.http.get(f"/v1/agents/{api.agent}/stats", headers=api.key)).json()
    assert stats["candidates"] == 4
    assert stats["live_memories"] >= 1
    cognitive = stats["cognitive"]
    assert set(cognitive) == {
        "admission_rate",
        "average_quality",
        "grimoire_size",
        "retrieval_hit_rate",
    }
    assert cognitive["admission_rate"]["value"] == round(stats["stored"] / 4, 4)
    assert cognitive["admission_rate"]["healthy_range"] == [0.4, 0.6]
    assert cognitive["grimoire_size"]["value"] == stats["live_memories"]
    assert cognitive["average_quality"]["value"] is not None

    audit = (await api.http.get(f"/v1/agents/{api.agent}/audit", headers=api.key)).json()
    assert audit["verified"] is True
    assert audit["records"] >= 1
    assert audit["first_broken"] is None


async def test_agents_a_key_may_see(api: Setup) -> None:
    mine = await api.http.get("/v1/agents", headers=api.key)
    assert mine.status_code == 200
    assert mine.json()["agents"] == sorted([api.agent, api.doomed])
    everyone = (await api.http.get("/v1/agents", headers=api.admin_key)).json()["agents"]
    assert {api.agent, api.doomed, api.other} <= set(everyone)
    assert (await api.http.get("/v1/agents")).status_code == 401
    assert (
        await api.http.get("/v1/agents", headers={"Authorization": "Bearer x"})
    ).status_code == 401


async def test_pin_unpin_retract_and_forget_through_the_journal(
    api: Setup, eventually: Eventually
) -> None:
    item = (await _recalled(api, "deployed the fix"))["items"][0]
    path = f"/v1/agents/{api.agent}/memories/{item['id']}"

    async def field(name: str, wanted: Any) -> bool:
        memory = (await api.http.get(path, headers=api.key)).json()
        return bool(memory.get(name) == wanted)

    pinned = await api.http.post(f"{path}/pin", headers=api.key)
    assert pinned.status_code == 202
    assert pinned.json()["command"] == "pin"
    await eventually(lambda: field("pinned", True), timeout=30)
    assert (await api.http.post(f"{path}/unpin", headers=api.key)).status_code == 202
    await eventually(lambda: field("pinned", False), timeout=30)
    missing = await api.http.post(f"/v1/agents/{api.agent}/memories/nope/pin", headers=api.key)
    assert missing.status_code == 404

    source = item["source_event_id"]
    retract = await api.http.post(
        f"/v1/agents/{api.agent}/retract", json={"source_event_id": source}, headers=api.key
    )
    assert retract.status_code == 202
    await eventually(lambda: field("retracted", True), timeout=30)
    bad = await api.http.post(f"/v1/agents/{api.agent}/retract", json={}, headers=api.key)
    assert bad.status_code == 400

    compact = await api.http.post(f"/v1/agents/{api.agent}/compact", headers=api.key)
    assert compact.status_code == 202

    doomed = await api.http.post(
        f"/v1/agents/{api.doomed}/search", json={"query": "forgotten"}, headers=api.key
    )
    doomed_id = doomed.json()["items"][0]["id"]
    forget = await api.http.post(f"/v1/agents/{api.doomed}/forget", headers=api.key)
    assert forget.status_code == 202

    async def gone() -> bool:
        answer = await api.http.get(
            f"/v1/agents/{api.doomed}/memories/{doomed_id}", headers=api.key
        )
        return answer.status_code == 404

    await eventually(gone, timeout=30)


async def test_metrics_for_prometheus(api: Setup) -> None:
    await _recalled(api)
    # Per-agent series name agents: only for a key that reaches them (docs/security.md).
    keyless = await api.http.get("/metrics")
    assert keyless.status_code == 200
    assert 'agent="' not in keyless.text
    assert "grimoire_ingest_candidates_total" in keyless.text
    answer = await api.http.get("/metrics", headers=api.admin_key)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    text = answer.text
    for series in (
        "grimoire_agents ",
        'grimoire_decisions_total{action="admit"}',
        "grimoire_ingest_candidates_total",
        'grimoire_auth_refusals_by_surface_total{surface="http"}',
        f'grimoire_admission_rate{{agent="{api.agent}"}}',
        f'grimoire_memories_live{{agent="{api.agent}"}}',
        'grimoire_cognitive_healthy_low{metric="admission_rate"} 0.4',
        'grimoire_recall_stage_seconds_count{stage="total"}',
        'grimoire_http_recall_seconds_count{route="recall"}',
        "grimoire_metrics_read_seconds",
    ):
        assert series in text, series
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(samples) > 30


async def test_a_configuration_change_over_http_rules_the_next_event(
    api: Setup, eventually: Eventually
) -> None:
    """Ingest off, an event (skipped), ingest on with top_k 1, two events (written):
    each change is a `configure` command the journal applies before the next event."""
    agent = f"{api.agent}-cfg"
    path = f"/v1/agents/{agent}/config"
    witness = Keyspace(api.prefix).witness(agent)

    async def links(count: int) -> None:
        async def applied() -> bool:
            return int(await api.redis.xlen(witness)) >= count

        await eventually(applied, timeout=120, interval=0.2)

    defaults = await api.http.get(path, headers=api.key)
    assert defaults.status_code == 200 and defaults.json()["config"]["ingest_enabled"] is True
    bad = await api.http.put(path, json={"top_k": 0}, headers=api.key)
    assert (bad.status_code, bad.json()["error"]) == (400, "invalid_value")
    off = await api.http.put(path, json={"ingest_enabled": False}, headers=api.key)
    assert off.status_code == 202 and off.json()["config"]["ingest_enabled"] is False
    await links(1)
    await _publish(api.http, agent, api.key, kind="episode", ts=T0, text="relayer stalled")
    await links(2)
    on = await api.http.put(path, json={"ingest_enabled": None, "top_k": 1}, headers=api.key)
    assert on.status_code == 202
    await links(3)
    texts = [
        "alert: rollup batch 812 posted forty minutes late",
        "alert: liquidation bot missed a margin call on vault 9",
    ]
    for n, text in enumerate(texts):
        await _publish(
            api.http, agent, api.key, kind="episode", ts=T0 + 1 + n, text=text, importance=0.9
        )
    await links(5)
    config = (await api.http.get(path, headers=api.key)).json()["config"]
    assert (config["ingest_enabled"], config["top_k"]) == (True, 1)
    decided = await api.redis.hgetall(Keyspace(api.prefix).decided(agent))
    assert len(decided) == 2  # the event sent while ingest was off was never decided
    answer = await api.http.post(
        f"/v1/agents/{agent}/recall", json={"query": "rollup batch late"}, headers=api.key
    )
    assert answer.status_code == 200 and len(answer.json()["items"]) == 1


class _Recorder:
    """Stands in for the Kafka client where only what is sent matters (the fold of a
    `configure` is tested through the broker above)."""

    def __init__(self) -> None:
        self.commands: list[Any] = []

    async def send_command(self, command: Any) -> None:
        self.commands.append(command)


async def test_the_deployments_defaults_are_kept_and_sent_to_every_agent(
    settings: Settings, redis_client: Redis
) -> None:
    prefix = f"defaults{uuid.uuid4().hex[:6]}"
    store = RedisApiKeyStore(redis_client, prefix)
    _, admin = await store.create(TenantScope(admin=True), "operator", now_ms=1)
    await redis_client.zadd(Keyspace(prefix).agents, {"a-1": T0, "a-2": T0})
    recorder = _Recorder()
    deps = keyed_deps(redis_client, prefix, recorder, store, settings)  # type: ignore[arg-type]
    key = bearer(admin)
    async with in_process(deps) as http:
        assert (await http.get("/v1/config", headers=key)).json()["config"]["top_k"] is None
        bad = await http.put("/v1/config", json={"layers": ["dream"]}, headers=key)
        assert bad.status_code == 400 and recorder.commands == []
        answer = await http.put("/v1/config", json={"ingest_enabled": False}, headers=key)
        assert answer.status_code == 202 and answer.json()["agents"] == 2
        kept = (await http.get("/v1/config", headers=key)).json()["config"]
        assert kept["ingest_enabled"] is False
    assert [(c.agent_id, c.command, c.config) for c in recorder.commands] == [
        ("a-1", "configure", {"ingest_enabled": False}),
        ("a-2", "configure", {"ingest_enabled": False}),
    ]
    # Kept in the key store, outside the fold: a wipe of the memory state keeps it.
    assert await redis_client.exists(Keyspace(prefix).default_config)
