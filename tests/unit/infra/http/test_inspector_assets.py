"""The inspector page and its static files as the API serves them: the right media
types and headers, revalidation by ETag, nothing outside the allowlist, nothing
fetched from another origin, no HTML built from data in the script, every element
the script reaches present in the page, and the files shipped as package data.
The page's behaviour in a real browser is tests/integration/test_inspector.py."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from grimoire.infra.http.inspector import ASSETS, CONTENT_SECURITY_POLICY, PAGE, inspector_routes
from tests.support.paths import ROOT

STATIC = ROOT / "infra" / "http" / "static"
# The elements tests/integration/test_inspector.py reads.
TEST_IDS = (
    "api-key", "save-key", "agent-select", "search-query", "search-button", "results",
    "memory", "memory-id", "memory-text", "graph", "graph-summary", "episode", "tab-playbook",
    "playbook", "playbook-empty", "tab-stats", "stats-metrics", "stats-counters", "message",
)  # fmt: skip


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    app = Starlette(routes=inspector_routes())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        yield client


async def test_the_page_is_served_with_a_strict_policy(http: httpx.AsyncClient) -> None:
    answer = await http.get("/inspector")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/html; charset=utf-8"
    assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "default-src 'none'" in CONTENT_SECURITY_POLICY
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["cache-control"] == "no-cache"
    for name in ASSETS:
        assert f'"/inspector/static/{name}"' in answer.text
    for test_id in TEST_IDS:
        assert f'data-testid="{test_id}"' in answer.text, test_id


@pytest.mark.parametrize(("name", "media_type"), sorted(ASSETS.items()))
async def test_each_asset_is_served_and_revalidated(
    http: httpx.AsyncClient, name: str, media_type: str
) -> None:
    answer = await http.get(f"/inspector/static/{name}")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == media_type
    assert answer.content == (STATIC / name).read_bytes()
    etag = answer.headers["etag"]
    again = await http.get(f"/inspector/static/{name}", headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""


@pytest.mark.parametrize(
    "path",
    [
        "/inspector/static/inspector.py",
        "/inspector/static/..%2Finspector.py",
        "/inspector/static/../app.py",
        "/inspector/static/",
    ],
)
async def test_nothing_outside_the_allowlist_is_served(http: httpx.AsyncClient, path: str) -> None:
    answer = await http.get(path)
    assert answer.status_code == 404
    assert b"import" not in answer.content


async def test_the_page_routes_are_read_only(http: httpx.AsyncClient) -> None:
    assert (await http.post("/inspector")).status_code == 405
    assert (await http.put("/inspector/static/inspector.js")).status_code == 405


def _text(name: str) -> str:
    return (STATIC / name).read_text(encoding="utf-8")


def test_nothing_comes_from_another_origin() -> None:
    for name in (PAGE, *ASSETS):
        urls = set(re.findall(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}[^\s\"')]*", _text(name)))
        # The SVG namespace is a name, never fetched.
        assert urls <= {"http://www.w3.org/2000/svg"}, (name, urls)
        assert "@import" not in _text(name)


def test_the_script_never_builds_html_from_data() -> None:
    script = _text("inspector.js")
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script, sink
    assert 'setAttribute("style"' not in script  # the policy refuses inline styles


def test_the_page_has_no_inline_script_or_style() -> None:
    page = _text(PAGE)
    assert re.search(r"<script(?![^>]*\bsrc=)", page) is None
    assert "<style" not in page
    assert re.search(r"\sstyle=", page) is None
    assert re.search(r"\son[a-z]+=", page) is None  # no inline handlers either


def test_every_element_the_script_reaches_is_in_the_page() -> None:
    ids = set(re.findall(r'\sid="([^"]+)"', _text(PAGE)))
    wanted = set(re.findall(r'\$\("([^"]+)"\)', _text("inspector.js")))
    wanted |= {"view-" + view for view in ("search", "playbook", "stats")}
    assert wanted
    assert wanted <= ids, sorted(wanted - ids)


def test_the_files_ship_as_package_data() -> None:
    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["package-data"]["grimoire.infra.http"]
    for path in STATIC.iterdir():
        shipped = f"static/{path.name}"
        assert any(fnmatch.fnmatch(shipped, pattern) for pattern in patterns), shipped
    assert {path.name for path in STATIC.iterdir()} == {PAGE, *ASSETS}


async def test_the_routes_join_the_api_app(make_api: Any) -> None:
    api = await make_api()
    api.app.router.routes.extend(inspector_routes())
    page = await api.http.get("/inspector")
    assert page.status_code == 200
    assert "Grimoire inspector" in page.text
    assert (await api.http.get("/v1/health")).json() == {"ok": True}
    missing = await api.http.get("/inspector/static/nope.js")
    assert missing.status_code == 404
    assert missing.json()["error"] == "not_found"
