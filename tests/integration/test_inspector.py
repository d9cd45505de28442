"""The inspector page in a real headless browser (Debian's chromium, driven by
Playwright; `make browser` installs it, nothing is downloaded at test time), over
the HTTP API served by uvicorn on a loopback port, against the real broker,
worker and Redis, with tenant keys on.

A person's path through it: the page without a key says so, and another
tenant's key sees none of this tenant's agents; with the tenant's key it lists the
tenant's agent; a search shows the expected memory with its lanes and explain
breakdown; opening it shows the full text, its nexus-key neighbourhood as a graph
(a neighbour opens on a click, and stays open across a reload) and its episode
with roles; the playbook view says plainly that there is none yet, then shows the
one a curator cycle would have written; the stats view shows the cognitive
metrics with their healthy ranges and one more sparkline point per sample.
Screenshots: bench-results/inspector.png (search and memory) and
bench-results/inspector-stats.png. The page must log no script error and no
policy violation.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from playwright.async_api import Browser, ConsoleMessage, Error, Page, async_playwright, expect
from redis.asyncio import Redis

from grimoire.infra.http import create_app
from grimoire.infra.http.inspector import inspector_routes
from grimoire.streams.trust.tenancy import TenantScope
from grimoire.tables.maintenance.curator_store import RedisCuratorStore
from grimoire.tables.trust.api_keys import RedisApiKeyStore
from grimoire.topics.schemas import EpisodeV1
from tests.support.http_deps import keyed_deps
from tests.support.live import Live

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "bench-results" / "inspector.png"
STATS_SCREENSHOT = ROOT / "bench-results" / "inspector-stats.png"
T0 = 1_790_000_000_000
UI_TIMEOUT_MS = 30_000
Eventually = Callable[..., Awaitable[Any]]

TIMEOUT_TEXT = "RPC endpoint on node seven timed out twice while syncing blocks"
EPISODES = (
    (TIMEOUT_TEXT, "TimeoutError: rpc read timed out"),
    ("disk full on node seven, the backups are paused", "OSError: No space left on device"),
    ("deployed the fix for the RPC timeout to the staging cluster", None),
)
PLAYBOOK = "# PLAYBOOK.md\n\n## Heuristics\n- Retry the RPC endpoint once before failing over.\n"


@dataclass
class Served:
    url: str
    agent: str
    token: str
    other_token: str  # reaches another tenant's agent only
    redis: Redis
    prefix: str


def _chromium() -> str:
    found = shutil.which("chromium")
    assert found, "Debian's chromium is not installed: run `make browser`"
    return found


@pytest.fixture
async def served(live: Live) -> AsyncIterator[Served]:
    client = live.client
    store = RedisApiKeyStore(live.redis, live.prefix)
    deps = keyed_deps(live.redis, live.prefix, client, store, live.settings)
    app = create_app(deps)
    if not any(getattr(route, "path", None) == "/inspector" for route in app.routes):
        app.router.routes.extend(inspector_routes())
    suffix = uuid.uuid4().hex[:8]
    fleet = f"fleet-{suffix}/"
    agent = f"{fleet}golem-1"
    _, token = await store.create(TenantScope(agent_prefix=fleet), "inspector", now_ms=1)
    _, other_token = await store.create(
        TenantScope(agent_ids=frozenset({f"rival-{suffix}"})), "rival", now_ms=1
    )
    for n, (text, error) in enumerate(EPISODES):
        await client.publish_episode(
            EpisodeV1(
                agent_id=agent, ts=T0 + n * 1_000, event_id=f"e-{n}", text=text, error=error,
                importance=0.9, run_id="r-1", tags=["topic/ops"], entities=["node-seven"],
            )
        )  # fmt: skip

    async def recallable() -> bool:
        answer = await client.recall(agent, "rpc timeout", k=5, record_usage=False)
        return any(item.gist.startswith("RPC endpoint") for item in answer.items) and (
            len(answer.items) >= 2
        )

    await live.eventually(recallable, timeout=60)

    # A port of the kernel's choosing, bound before the server starts (no race).
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_config=None, access_log=False))
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        await live.eventually(lambda: asyncio.sleep(0, result=server.started), timeout=10)
        yield Served(
            url=f"http://127.0.0.1:{port}",
            agent=agent,
            token=token,
            other_token=other_token,
            redis=live.redis,
            prefix=live.prefix,
        )
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, timeout=10)
        listener.close()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        # Debian's chromium, never a browser Playwright would download.
        launched = await playwright.chromium.launch(executable_path=_chromium(), headless=True)
        try:
            yield launched
        finally:
            await launched.close()


async def _use_key(page: Page, token: str) -> None:
    await page.get_by_test_id("api-key").fill(token)
    await page.get_by_test_id("save-key").click()


async def test_the_inspector_in_a_real_browser(served: Served, browser: Browser) -> None:
    context = await browser.new_context(viewport={"width": 1440, "height": 1000})
    page = await context.new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
    problems: list[str] = []

    def console(message: ConsoleMessage) -> None:
        # A refused request (the 401 below, on purpose) logs "Failed to load
        # resource"; anything else, a policy violation included, is a fault.
        if message.type == "error" and "Failed to load resource" not in message.text:
            problems.append(message.text)

    def crashed(error: Error) -> None:
        problems.append(f"page error: {error}")

    page.on("console", console)
    page.on("pageerror", crashed)
    try:
        await page.goto(served.url + "/inspector")
        await expect(page.locator("body[data-ready=true]")).to_have_count(1)

        # No key: the API refuses, and the page says why.
        message = page.get_by_test_id("message")
        await expect(message).to_contain_text("valid key")
        await expect(page.get_by_test_id("agent-select")).to_be_disabled()

        # Another tenant's key sees none of this tenant's agents.
        await _use_key(page, served.other_token)
        await expect(message).to_contain_text("0 agent(s) visible")

        # The tenant's key: its agent, picked.
        await _use_key(page, served.token)
        await expect(message).to_contain_text("1 agent(s) visible")
        select = page.get_by_test_id("agent-select")
        await expect(select.locator("option")).to_contain_text(["(pick an agent)", served.agent])
        await select.select_option(served.agent)

        # Search with the explain breakdown.
        await page.get_by_test_id("search-query").fill("rpc timeout")
        await page.get_by_test_id("search-button").click()
        results = page.get_by_test_id("result-item")
        await expect(results.first).to_be_visible()
        assert await results.count() >= 2
        hit = results.filter(has_text="RPC endpoint on node seven")
        await expect(hit).to_have_count(1)
        await expect(page.get_by_test_id("search-summary")).to_contain_text("item(s)")
        score = await hit.get_by_test_id("result-score").text_content()
        assert score is not None and float(score) > 0
        lanes = await hit.get_by_test_id("result-lanes").locator(".badge").all_text_contents()
        assert lanes and set(lanes) <= {"canonical", "eidolon", "bm25", "walk"}, lanes
        await hit.locator("details.why summary").click()
        factors = hit.get_by_test_id("explain-factor")
        await expect(factors.first).to_be_visible()
        assert await factors.count() >= 2
        for row in await factors.all():
            value = await row.locator("td").first.text_content()
            float(value or "x")  # every factor is a number

        # Open the memory: its full text, its graph, its episode with roles.
        await hit.get_by_test_id("result-open").click()
        memory_id = await hit.get_attribute("data-memory-id")
        assert memory_id
        await expect(page.get_by_test_id("memory-id")).to_have_text(memory_id)
        await expect(page.get_by_test_id("memory-text")).to_have_text(TIMEOUT_TEXT)
        await expect(hit).to_have_class("result selected")
        nodes = page.get_by_test_id("graph-node")
        await expect(nodes.first).to_be_attached()
        graph_nodes = await nodes.count()
        assert graph_nodes >= 2
        center = page.locator(f'[data-testid=graph-node][data-node-id="{memory_id}"]')
        await expect(center).to_have_class("node memory center")
        keys = page.locator("[data-testid=graph-node][data-node-type=key]")
        assert await keys.count() >= 1
        key_labels = await keys.locator("title").all_text_contents()
        assert any("tag:topic/ops" in label for label in key_labels), key_labels
        assert await page.get_by_test_id("graph-edge").count() >= graph_nodes - 1
        await expect(page.get_by_test_id("graph-summary")).to_contain_text("key(s)")
        for circle in await page.locator("#graph circle, #graph rect").all():
            x = float(await circle.get_attribute("cx") or await circle.get_attribute("x") or -1)
            y = float(await circle.get_attribute("cy") or await circle.get_attribute("y") or -1)
            assert 0 <= x <= 640 and 0 <= y <= 640, (x, y)
        members = page.get_by_test_id("episode-member")
        await expect(members.first).to_be_attached()
        await expect(page.get_by_test_id("episode-id").first).to_have_text("run:r-1")
        roles = {await row.get_attribute("data-role") for row in await members.all()}
        assert roles and None not in roles
        await expect(
            page.locator(f'[data-testid=episode-member][data-memory-id="{memory_id}"]')
        ).to_have_count(1)

        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SCREENSHOT), full_page=True)

        # A neighbour in the graph opens on a click.
        neighbour = page.locator(
            "[data-testid=graph-node][data-node-type=memory]:not(.center)"
        ).first
        neighbour_id = await neighbour.get_attribute("data-node-id")
        assert neighbour_id and neighbour_id != memory_id
        await neighbour.click()
        await expect(page.get_by_test_id("memory-id")).to_have_text(neighbour_id)
        await expect(page.get_by_test_id("memory-text")).not_to_have_text(TIMEOUT_TEXT)

        # The key (sessionStorage) and the view (the address) survive a reload.
        assert f"memory={neighbour_id}" in page.url
        await page.reload()
        await expect(page.get_by_test_id("memory-id")).to_have_text(neighbour_id)
        await expect(page.get_by_test_id("agent-select")).to_have_value(served.agent)
        await expect(page.get_by_test_id("graph-node").first).to_be_attached()

        # The playbook: none yet (maintenance is off in these tests), said plainly;
        # then the one a curator cycle would have written.
        await page.get_by_test_id("tab-playbook").click()
        empty = page.get_by_test_id("playbook-empty")
        await expect(empty).to_be_visible()
        await expect(empty).to_contain_text(f"No PLAYBOOK.md yet for {served.agent}")
        await expect(page.get_by_test_id("playbook")).to_be_hidden()
        curator = RedisCuratorStore(served.redis, served.prefix)
        await served.redis.set(curator.playbook_key(served.agent), PLAYBOOK)
        await page.get_by_test_id("playbook-reload").click()
        playbook = page.get_by_test_id("playbook")
        await expect(playbook).to_be_visible()
        await expect(playbook).to_have_text(PLAYBOOK)
        await expect(empty).to_be_hidden()

        # Stats over time: the cognitive metrics with their healthy ranges, and one
        # more point on each sparkline per sample.
        await page.get_by_test_id("tab-stats").click()
        admission = page.locator("[data-testid=stats-metric][data-metric=admission_rate]")
        await expect(admission).to_contain_text("40-60%")
        await expect(admission).to_have_attribute(
            "data-status", _any_of("healthy", "watch", "alarm", "no_data")
        )
        for metric in ("average_quality", "grimoire_size", "retrieval_hit_rate"):
            await expect(page.locator(f"[data-metric={metric}]")).to_have_count(1)
        candidates = page.locator("[data-testid=stats-counter][data-counter=candidates]")
        await expect(candidates.locator("td").first).to_have_text(str(len(EPISODES)))
        line = candidates.get_by_test_id("sparkline")
        before = int(await line.get_attribute("data-points") or 0)
        assert before >= 1
        await page.get_by_test_id("stats-reload").click()
        await expect(candidates.get_by_test_id("sparkline")).to_have_attribute(
            "data-points", _any_of(*(str(n) for n in range(before + 1, before + 4)))
        )
        await expect(page.get_by_test_id("stats-samples")).to_contain_text("sample(s)")
        await page.screenshot(path=str(STATS_SCREENSHOT), full_page=True)
        assert problems == [], problems
    finally:
        await context.close()


def _any_of(*values: str) -> re.Pattern[str]:
    return re.compile("^(" + "|".join(re.escape(value) for value in values) + ")$")
