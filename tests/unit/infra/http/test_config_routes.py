"""The deployment's defaults are an admin's: any other key is refused before
anything is read or sent (the reads and the fan-out are tested against Redis in
tests/integration)."""

from __future__ import annotations

from typing import Any

from grimoire.streams.trust.tenancy import TenantScope


async def test_the_defaults_need_a_key_and_an_admin_one(api: Any) -> None:
    tenant = await api.token(TenantScope(agent_prefix="golem-"))
    for method, body in (("GET", None), ("PUT", {"top_k": 3})):
        none = await api.http.request(method, "/v1/config", json=body)
        assert none.status_code == 401 and none.json()["error"] == "unauthenticated"
        scoped = await api.http.request(
            method, "/v1/config", json=body, headers={"Authorization": f"Bearer {tenant}"}
        )
        assert scoped.status_code == 403 and scoped.json()["error"] == "forbidden"
    assert api.gateway.commands == []
