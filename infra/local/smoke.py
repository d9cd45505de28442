"""`grimoire smoke` (`make smoke`): start the stack as `make run` does, exercise every
documented HTTP route and every MCP tool against it, check tenant keys on HTTP and
on Kafka, read the metrics, load the inspector in headless Chromium (a screenshot
goes to `bench-results/`), stop everything, and print one JSON object as the last
line."""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml
from aiokafka import AIOKafkaConsumer

from grimoire.infra.http.app import openapi_text
from grimoire.infra.local.up import Stack, UpOptions, start_stack
from grimoire.infra.settings import Settings
from grimoire.streams.trust.tenancy import TenantScope
from grimoire.tables.redis_client import create_redis
from grimoire.tables.trust.api_keys import RedisApiKeyStore
from grimoire.topics.client import GrimoireClient
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import RecallRequestV1

__all__ = ["SmokeOptions", "run_smoke"]

logger = logging.getLogger(__name__)

T0 = 1_790_000_000_000
AGENT = "smoke-fleet/golem-1"
DOOMED = "smoke-fleet/golem-2"  # forgotten at the end
HEIR = "smoke-fleet/golem-3"  # inherits AGENT's export through POST …/import
# A fact of AGENT, asserted while seeding (valid from block 0).
FACT = {"ts": T0 + 5, "subject": "node-seven", "predicate": "hosts", "object": "rpc-endpoint",
        "valid_from": 0, "event_id": "smoke-fact-0"}  # fmt: skip
OTHER = "smoke-rival"
TEXTS = (
    "alert: rpc endpoint on node seven timed out during the deploy window",
    "alert: disk full on node seven, the log volume at 98 percent",
    "note: rotated the logs on node seven and the rpc endpoint recovered",
)


@dataclass(frozen=True, slots=True)
class SmokeOptions:
    up: UpOptions
    screenshot: Path = Path("bench-results/inspector.png")
    ready_timeout_s: float = 240.0


@dataclass
class _Http:
    endpoints: int = 0
    ok: int = 0
    failures: list[str] = field(default_factory=list)


async def _eventually(check: Callable[[], Awaitable[Any]], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.5)
    raise TimeoutError(f"not within {timeout_s:.0f}s")


async def _seed(http: httpx.AsyncClient, key: dict[str, str], timeout_s: float) -> list[str]:
    """Three episodes of one run (trigger, action, outcome) and one of the doomed
    agent; returns the agent's memory ids once recall finds them."""
    for n, text in enumerate(TEXTS):
        body = {
            "kind": "episode", "ts": T0 + n, "text": text, "event_id": f"smoke-{n}",
            "importance": 0.9, "episode_type": "alert", "run_id": "smoke-1",
            "entities": ["node-seven"], "tags": ["ops/rpc"],
        }  # fmt: skip
        answer = await http.post(f"/v1/agents/{AGENT}/events", json=body, headers=key)
        answer.raise_for_status()
    # Far enough into event time (tick 60) for the curator's first cycle to be due,
    # so the agent has a PLAYBOOK.md once maintenance ran.
    later = {
        "kind": "episode", "ts": T0 + 60 * 12_000, "tick": 60, "text": TEXTS[0],
        "event_id": "smoke-later", "importance": 0.9, "episode_type": "alert",
    }  # fmt: skip
    (await http.post(f"/v1/agents/{AGENT}/events", json=later, headers=key)).raise_for_status()
    doomed = {"kind": "episode", "ts": T0, "text": "a memory to forget", "importance": 0.9}
    (await http.post(f"/v1/agents/{DOOMED}/events", json=doomed, headers=key)).raise_for_status()

    async def recalled() -> list[str]:
        answer = await http.post(
            f"/v1/agents/{AGENT}/recall", json={"query": "node seven rpc", "k": 5}, headers=key
        )
        if answer.status_code != 200:
            return []
        ids = [item["id"] for item in answer.json().get("items", [])]
        return ids if len(ids) >= 2 else []

    found: list[str] = await _eventually(recalled, timeout_s)
    (await http.post(f"/v1/agents/{AGENT}/facts", json=FACT, headers=key)).raise_for_status()

    async def fact_applied() -> bool:
        answer = await http.get(f"/v1/agents/{AGENT}/facts?valid_at=1", headers=key)
        return answer.status_code == 200 and bool(answer.json().get("facts"))

    await _eventually(fact_applied, 60)
    await http.post(f"/v1/agents/{AGENT}/compact", headers=key)

    async def playbook() -> bool:
        answer = await http.get(f"/v1/agents/{AGENT}/playbook", headers=key)
        return answer.status_code == 200

    await _eventually(playbook, 90)
    return found


def _documented() -> list[tuple[str, str]]:
    spec = yaml.safe_load(openapi_text())
    return [
        (method.upper(), path)
        for path, item in spec["paths"].items()
        for method in item
        if method in {"get", "post", "put", "delete"}
    ]


# The last of these run last (forget destroys what the others read).
_LATE = ("/retract", "/forget")


async def _every_route(
    http: httpx.AsyncClient, key: dict[str, str], memory_id: str, report: _Http
) -> None:
    listed = await http.get(f"/v1/agents/{AGENT}/episodes", headers=key)
    episodes = listed.json() if listed.status_code == 200 else []
    if isinstance(episodes, dict):
        episodes = episodes.get("episodes", [])
    episode_id = str(episodes[0]["episode_id"]) if episodes else "run:smoke-1"
    bodies: dict[str, Any] = {
        "recall": {"query": "node seven rpc", "explain": True},
        "search": {"query": "disk full"},
        "events": {"kind": "episode", "ts": T0 + 9, "text": "smoke: one more event"},
        "retract": {"source_event_id": "smoke-0"},
        "config": {"top_k": 5},
        "facts": {**FACT, "object": "rpc-gateway", "valid_from": 10, "event_id": "smoke-fact-1"},
        "publish": {"memory_id": memory_id},
        "unpublish": {"memory_id": memory_id},
    }
    # Routes whose query is required, or worth setting (by the path's last segment).
    queries: dict[str, dict[str, Any]] = {
        "facts": {"valid_at": 1},
        "neighbours": {"entity": "node-seven", "hops": 2},
        "export": {"vectors": "false"},
        "import": {"as_successor_of": AGENT},
    }
    exported = await http.get(f"/v1/agents/{AGENT}/export", headers=key)
    routes = sorted(_documented(), key=lambda r: any(r[1].endswith(late) for late in _LATE))
    for method, path in routes:
        agent = DOOMED if path.endswith("/forget") else HEIR if path.endswith("/import") else AGENT
        filled = (
            path.replace("{agent}", agent)
            .replace("{memory_id}", memory_id)
            .replace("{episode_id}", episode_id)
            .replace("{name}", "inspector.js")
            .replace("{clade}", "smoke-clade")
        )
        tail = path.rsplit("/", 1)[-1]
        body = bodies.get(tail) if method in {"POST", "PUT"} else None
        query = queries.get(tail) if method == "GET" or tail == "import" else None
        if tail == "import":  # the body is an export file, not JSON
            answer = await http.request(
                method, filled, content=exported.content, params=query, headers=key
            )
        else:
            answer = await http.request(method, filled, json=body, params=query, headers=key)
        report.endpoints += 1
        if answer.status_code < 300:
            report.ok += 1
        else:
            report.failures.append(f"{method} {filled}: {answer.status_code} {answer.text[:200]}")


async def _tenant_refusals(http: httpx.AsyncClient, stack: Stack) -> tuple[bool, bool]:
    none = await http.get(f"/v1/agents/{AGENT}/stats")
    redis = create_redis(stack.redis_url, 2)
    try:
        store = RedisApiKeyStore(redis, stack.settings.broker.topic_prefix)
        _, rival = await store.create(
            TenantScope(agent_ids=frozenset({OTHER})), "smoke rival", now_ms=T0
        )
    finally:
        await redis.aclose()
    cross = await http.get(
        f"/v1/agents/{AGENT}/stats", headers={"Authorization": f"Bearer {rival}"}
    )
    return none.status_code == 401, cross.status_code == 403


async def _kafka_refusals(stack: Stack) -> tuple[bool, bool]:
    settings = stack.settings
    topics = TopicNames(settings.broker.topic_prefix)
    async with GrimoireClient(
        settings.bootstrap_servers,
        settings.broker.topic_prefix,
        partitions=settings.broker.partitions,
        security=settings.kafka_security,
    ) as keyless:
        # Without a key: answered nowhere (no error reply either), dead-lettered
        # `unauthorized`.
        keyless_correlation = uuid.uuid4().hex
        unkeyed = RecallRequestV1(
            agent_id=AGENT,
            query="node seven",
            reply_to=keyless.reply_topic,
            correlation_id=keyless_correlation,
        )
        await keyless.publish_raw(topics.recall_requests, AGENT, unkeyed.dumps_json())
        # A reply address outside the deployment's reply namespace: never answered,
        # dead-lettered with the field named.
        correlation = uuid.uuid4().hex
        request = RecallRequestV1(
            agent_id=AGENT,
            query="node seven",
            reply_to=f"{topics.memory_events}",
            correlation_id=correlation,
            api_key=stack.token,
        )
        await keyless.publish_raw(topics.recall_requests, AGENT, request.dumps_json())
    consumer = AIOKafkaConsumer(
        topics.dead_letters,
        bootstrap_servers=settings.bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **settings.kafka_security.aiokafka_kwargs(),
    )
    await consumer.start()
    outside = unauthorized = False
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (outside and unauthorized):
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                for record in records:
                    letter = orjson.loads(record.value or b"{}")
                    preview = str(letter.get("payload", ""))
                    if correlation in preview and letter.get("field") == "reply_to":
                        outside = True
                    if keyless_correlation in preview and letter.get("reason") == "unauthorized":
                        unauthorized = True
    finally:
        await consumer.stop()
    return unauthorized, outside


async def _mcp(stack: Stack, memory_id: str) -> dict[str, Any]:
    from mcp import Client

    async with Client(stack.mcp_url) as client:
        tools = sorted(tool.name for tool in (await client.list_tools()).tools)
        result = await client.call_tool("recall", {"query": "node seven rpc", "agent": AGENT})
        text = "".join(getattr(part, "text", "") for part in result.content)
        calls = {"recall": not result.is_error and "node seven" in text}
        for name, arguments in (
            ("search", {"query": "disk full", "agent": AGENT}),
            ("read_playbook", {"agent": AGENT}),
            ("remember", {"text": "smoke: remembered through MCP", "agent": AGENT}),
            ("fetch_memory", {"memory_id": memory_id, "agent": AGENT}),
            ("causal_neighbours", {"memory_id": memory_id, "hops": 2, "agent": AGENT}),
            ("facts", {"neighbours_of": "node-seven", "agent": AGENT}),
        ):
            if name in tools:
                calls[name] = not (await client.call_tool(name, arguments)).is_error
        if "facts" in tools:
            read = await client.call_tool("facts", {"valid_at": 1, "agent": AGENT})
            text = "".join(getattr(part, "text", "") for part in read.content)
            calls["facts_valid_at"] = not read.is_error and "rpc-endpoint" in text
    return {"tools": tools, "recall_ok": calls["recall"], "calls": calls}


async def _metrics(http: httpx.AsyncClient) -> int:
    text = (await http.get("/metrics")).text
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


async def _smoke(stack: Stack, options: SmokeOptions) -> dict[str, Any]:
    key = {"Authorization": f"Bearer {stack.token}"}
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=60) as http:
        memory_ids = await _seed(http, key, options.ready_timeout_s)
        unauthorized, cross_tenant = await _tenant_refusals(http, stack)
        kafka_unauthorized, outside = await _kafka_refusals(stack)
        mcp = await _mcp(stack, memory_ids[0])
        inspector = await inspect_in_browser(stack, options.screenshot)
        routes = _Http()
        await _every_route(http, key, memory_ids[0], routes)
        series = await _metrics(http)
    return {
        "http": {
            "endpoints": routes.endpoints,
            "ok": routes.ok,
            "unauthorized_rejected": unauthorized,
            "cross_tenant_rejected": cross_tenant,
            "failures": routes.failures,
        },
        "kafka_auth": {
            "unauthorized_rejected": kafka_unauthorized,
            "reply_to_outside_namespace_rejected": outside,
        },
        "mcp": mcp,
        "metrics": {"series": series},
        "inspector": inspector,
    }


async def inspect_in_browser(stack: Stack, screenshot: Path) -> dict[str, Any]:
    """The inspector in headless Chromium (Debian's, driven by Playwright): key,
    agent, a search, the first result opened with its graph; a screenshot."""
    from playwright.async_api import async_playwright, expect

    chromium = shutil.which("chromium")
    if chromium is None:
        raise RuntimeError("no chromium on PATH: run `make browser`")
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(30_000)
            await page.goto(f"{stack.api_url}/inspector")
            await expect(page.locator("body[data-ready=true]")).to_have_count(1)
            await page.get_by_test_id("api-key").fill(stack.token)
            await page.get_by_test_id("save-key").click()
            await page.get_by_test_id("agent-select").select_option(AGENT)
            await page.get_by_test_id("search-query").fill("node seven rpc")
            await page.get_by_test_id("search-button").click()
            results = page.get_by_test_id("result-item")
            await expect(results.first).to_be_visible()
            found = await results.count()
            await results.first.get_by_test_id("result-open").click()
            nodes = page.get_by_test_id("graph-node")
            await expect(nodes.first).to_be_attached()
            graph_nodes = await nodes.count()
            text = await page.get_by_test_id("memory-text").text_content()
            await page.screenshot(path=str(screenshot), full_page=True)
        finally:
            await browser.close()
    return {
        "screenshot": str(screenshot),
        "graph_nodes": graph_nodes,
        "results": found,
        "memory_text": (text or "")[:80],
    }


def run_smoke(settings: Settings, options: SmokeOptions) -> dict[str, Any]:
    stack = start_stack(settings.with_values(auth_enabled=True), options.up)
    try:
        report = asyncio.run(_smoke(stack, options))
    finally:
        stack.stop()
    report["passed"] = (
        report["http"]["endpoints"] == report["http"]["ok"]
        and report["http"]["unauthorized_rejected"]
        and report["http"]["cross_tenant_rejected"]
        and all(report["kafka_auth"].values())
        and report["mcp"]["recall_ok"]
        and all(report["mcp"]["calls"].values())
        and report["inspector"].get("graph_nodes", 0) >= 2
    )
    return report
