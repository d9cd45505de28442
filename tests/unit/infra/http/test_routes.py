"""Every route of the app is in openapi.yaml and every documented route exists;
every agent route refuses a bad agent id (400), a missing or bad key (401) and a
key of another tenant (403), and counts each refusal."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from starlette.routing import Route

from grimoire.infra.http.app import openapi_text
from grimoire.streams.trust.tenancy import TenantScope

METHODS = {"get", "post", "put", "patch", "delete"}


def documented() -> set[tuple[str, str]]:
    spec = yaml.safe_load(openapi_text())
    assert spec["openapi"].startswith("3.1")
    return {
        (method.upper(), path)
        for path, item in spec["paths"].items()
        for method in item
        if method in METHODS
    }


def served(app: Any) -> set[tuple[str, str]]:
    found = set()
    for route in app.routes:
        assert isinstance(route, Route)
        # `{agent:path}` is the convertor that lets an agent id hold `/`.
        path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
        for method in route.methods or ():
            if method != "HEAD":
                found.add((method, path))
    return found


async def test_every_route_is_documented_and_every_documented_route_is_served(api: Any) -> None:
    assert served(api.app) == documented()


async def test_the_openapi_document_is_served(api: Any) -> None:
    answer = await api.http.get("/openapi.yaml")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/yaml")
    assert yaml.safe_load(answer.text)["info"]["title"] == "Grimoire HTTP API"


async def test_health_needs_no_key(api: Any) -> None:
    answer = await api.http.get("/v1/health")
    assert answer.status_code == 200
    assert answer.json() == {"ok": True}


def agent_routes() -> list[tuple[str, str]]:
    fill = {
        "{agent}": "golem-1",
        "{memory_id}": "m-1",
        "{episode_id}": "turn:t-1",
        "{clade}": "ops",
    }
    routes = []
    for method, path in sorted(documented()):
        if "{agent}" not in path:
            continue
        for name, value in fill.items():
            path = path.replace(name, value)
        routes.append((method, path))
    return routes


ROUTES = agent_routes()


def test_the_matrix_covers_every_agent_route() -> None:
    # 23, the clade routes of the agent (publish, unpublish, published) and its
    # membership (PUT and DELETE /v1/clades/{clade}/members/{agent}, admin only).
    assert len(ROUTES) == 28


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_no_key_is_401_and_counted(api: Any, method: str, path: str) -> None:
    answer = await api.http.request(method, path)
    assert answer.status_code == 401
    assert answer.json()["error"] == "unauthenticated"
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert api.refusals.counts == {"auth_unauthenticated": 1, "auth_refused_http": 1}
    assert api.gateway.recalls == api.gateway.commands == api.gateway.published == []


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_another_tenants_key_is_403_and_counted(api: Any, method: str, path: str) -> None:
    token = await api.token(TenantScope(agent_ids=frozenset({"golem-2"})))
    answer = await api.http.request(method, path, headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 403
    body = answer.json()
    assert body["error"] == "forbidden"
    assert "golem-1" in body["detail"]
    assert api.refusals.counts == {"auth_forbidden": 1, "auth_refused_http": 1}
    assert api.gateway.recalls == api.gateway.commands == api.gateway.published == []


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_a_bad_agent_id_is_400(api: Any, method: str, path: str) -> None:
    answer = await api.http.request(method, path.replace("golem-1", "golem%201", 1))
    assert answer.status_code == 400
    assert answer.json() == {
        "error": "invalid_value",
        "detail": "an agent id is 1-128 of ASCII letters, digits and . _ - @ + = /",
        "field": "agent",
    }


async def test_malformed_wrong_and_revoked_keys_are_401(api: Any) -> None:
    token = await api.token(TenantScope(agent_ids=frozenset({"golem-1"})))
    key_id = token.removeprefix("gmk_").partition(".")[0]
    for header in ("Bearer nope", "Basic dXNlcjpwYXNz", f"Bearer {token[:-3]}xyz"):
        answer = await api.http.post(
            "/v1/agents/golem-1/recall", json={"query": "q"}, headers={"Authorization": header}
        )
        assert answer.status_code == 401, header
    assert await api.keys.revoke(key_id)
    api.app.state.deps.authenticator.invalidate()
    answer = await api.http.post(
        "/v1/agents/golem-1/recall",
        json={"query": "q"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert answer.status_code == 401
    assert "revoked" in answer.json()["detail"]
    assert api.refusals.counts["auth_unauthenticated"] == 4


async def test_a_prefix_key_reaches_its_fleet_and_ids_with_a_slash(api: Any) -> None:
    token = await api.token(TenantScope(agent_prefix="fleet-a/"))
    auth = {"Authorization": f"Bearer {token}"}
    for path in ("/v1/agents/fleet-a/golem-1/search", "/v1/agents/fleet-a%2Fgolem-1/search"):
        answer = await api.http.post(path, json={"query": "disk"}, headers=auth)
        assert answer.status_code == 200, answer.text
    assert [r["agent_id"] for r in api.gateway.recalls] == ["fleet-a/golem-1"] * 2
    answer = await api.http.post(
        "/v1/agents/fleet-b/golem-1/search", json={"query": "x"}, headers=auth
    )
    assert answer.status_code == 403


async def test_refusals_show_in_this_process_metrics(api: Any) -> None:
    await api.http.post("/v1/agents/golem-1/recall", json={"query": "q"})
    text = api.app.state.metrics.registry
    from prometheus_client import generate_latest

    rendered = generate_latest(text).decode()
    assert 'grimoire_auth_refused_total{reason="unauthenticated",surface="http"} 1.0' in rendered


async def test_without_authentication_every_agent_route_is_open(make_api: Any) -> None:
    api = await make_api(auth=False)
    answer = await api.http.post("/v1/agents/golem-1/recall", json={"query": "q"})
    assert answer.status_code == 200
    assert api.refusals.counts == {}


async def test_unknown_routes_and_methods_answer_json(api: Any) -> None:
    missing = await api.http.get("/v2/nothing")
    assert missing.status_code == 404
    assert missing.json()["error"] == "not_found"
    wrong = await api.http.get("/v1/agents/golem-1/recall")
    assert wrong.status_code == 405
    assert wrong.json()["error"] == "method_not_allowed"
