"""Clades over HTTP on the in-memory clade stores: publish and unpublish go out as
commands (202) after the worker's own checks; what an agent published is the
agent's key's; membership is an admin key's (401 without a key, 403 for a tenant
key, both counted); a clade's entries are for an admin key or a key reaching one
of its members. The memory reads are replaced here (`memory_exists`,
`memory_detail`; against the real Redis in tests/integration)."""

from __future__ import annotations

from typing import Any

import pytest

from grimoire.infra.http import clades, memories
from grimoire.infra.http.clades import clade_origin, shared_entries
from grimoire.streams.trust.tenancy import TenantScope
from grimoire.tables.ports.clade import Published
from grimoire.tables.testing.clade_store import InMemoryCladeRegistry, InMemoryPublishedStore

MEMORY = "01a0c450-6c00-710a-a93a-843f1b1d5b63"
OTHER_MEMORY = "01a0c450-6c00-710a-a93a-843f1b1d5b64"

# What the replaced memory reads find, by (agent, memory id).
STORED: dict[tuple[str, str], dict[str, Any]] = {
    ("golem-1", MEMORY): {
        "id": MEMORY, "agent_id": "golem-1", "kind": "warning", "layer": "contemplation",
        "text": "the archive node drops RPC calls after 30 s", "gist": "archive node drops RPC",
        "confidence": 0.8, "ts": 1_790_000_000_000, "deleted": False, "retracted": False,
    },
    ("golem-2", OTHER_MEMORY): {
        "id": OTHER_MEMORY, "agent_id": "golem-2", "kind": "heuristic", "layer": "contemplation",
        "gist": "retry with backoff", "confidence": 0.6, "ts": 1_790_000_000_001,
        "deleted": False, "retracted": False,
    },
    ("golem-2", "gone"): {"id": "gone", "agent_id": "golem-2", "kind": "insight", "deleted": True},
}  # fmt: skip


async def read_memory(
    _redis: object, _prefix: str, agent_id: str, memory_id: str
) -> dict[str, Any] | None:
    found = STORED.get((agent_id, memory_id))
    return None if found is None else dict(found)


async def exists(_redis: object, _prefix: str, agent_id: str, memory_id: str) -> bool:
    return (agent_id, memory_id) in STORED


@pytest.fixture(autouse=True)
def reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clades, "memory_exists", exists)
    monkeypatch.setattr(clades, "memory_detail", read_memory)


@pytest.fixture
def registry() -> InMemoryCladeRegistry:
    return InMemoryCladeRegistry()


@pytest.fixture
def published() -> InMemoryPublishedStore:
    return InMemoryPublishedStore()


@pytest.fixture
async def api(
    make_api: Any, registry: InMemoryCladeRegistry, published: InMemoryPublishedStore
) -> Any:
    return await make_api(clade_registry=registry, published_store=published)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def tenant(api: Any, *agents: str) -> dict[str, str]:
    return bearer(await api.token(TenantScope(agent_ids=frozenset(agents))))


async def admin(api: Any) -> dict[str, str]:
    return bearer(await api.token(TenantScope(admin=True)))


async def bearer_prefix(api: Any, prefix: str) -> dict[str, str]:
    return bearer(await api.token(TenantScope(agent_prefix=prefix)))


# ---- publish, unpublish, published ---------------------------------------------------


async def test_publish_sends_a_command_with_the_caller_s_key(api: Any) -> None:
    key = await tenant(api, "golem-1")
    answer = await api.http.post(
        "/v1/agents/golem-1/publish", json={"memory_id": MEMORY, "clade": "ops"}, headers=key
    )
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert body["accepted"] is True
    assert (body["command"], body["memory_id"], body["clade"]) == ("publish", MEMORY, "ops")
    (command,) = api.gateway.commands
    assert (command.agent_id, command.command, command.memory_id, command.clade) == (
        "golem-1",
        "publish",
        MEMORY,
        "ops",
    )
    assert command.event_id == body["event_id"] and command.event_id.startswith("http-")
    assert command.api_key == key["Authorization"].removeprefix("Bearer ")


async def test_publish_without_a_clade_means_every_clade(api: Any) -> None:
    key = await tenant(api, "golem-1")
    answer = await api.http.post(
        "/v1/agents/golem-1/publish", json={"memory_id": MEMORY, "clade": None}, headers=key
    )
    assert answer.status_code == 202, answer.text
    assert answer.json()["clade"] is None
    assert api.gateway.commands[0].clade is None


async def test_publishing_a_memory_the_agent_does_not_have_is_404(api: Any) -> None:
    key = await tenant(api, "golem-1")
    answer = await api.http.post(
        "/v1/agents/golem-1/publish", json={"memory_id": OTHER_MEMORY}, headers=key
    )
    assert answer.status_code == 404
    assert answer.json()["error"] == "not_found"
    assert api.gateway.commands == []


async def test_unpublish_needs_no_memory_any_more(api: Any) -> None:
    key = await tenant(api, "golem-1")
    answer = await api.http.post(
        "/v1/agents/golem-1/unpublish", json={"memory_id": "long-gone"}, headers=key
    )
    assert answer.status_code == 202, answer.text
    (command,) = api.gateway.commands
    assert (command.command, command.memory_id, command.clade) == ("unpublish", "long-gone", None)


@pytest.mark.parametrize(
    ("body", "error", "field"),
    [
        ({}, "missing_field", "memory_id"),
        ({"memory_id": ""}, "missing_field", "memory_id"),
        ({"memory_id": 7}, "wrong_type", "memory_id"),
        ({"memory_id": "a b"}, "invalid_value", "memory_id"),
        ({"memory_id": MEMORY, "clade": "no spaces"}, "invalid_value", "clade"),
        ({"memory_id": MEMORY, "clade": "-ops"}, "invalid_value", "clade"),
        ({"memory_id": MEMORY, "clade": "a/b"}, "invalid_value", "clade"),
        ({"memory_id": MEMORY, "clade": ["ops"]}, "wrong_type", "clade"),
        ({"memory_id": MEMORY, "to": "ops"}, "invalid_value", "to"),
    ],
)
@pytest.mark.parametrize("route", ["publish", "unpublish"])
async def test_a_bad_body_is_400_and_sends_nothing(
    api: Any, route: str, body: dict[str, Any], error: str, field: str
) -> None:
    key = await tenant(api, "golem-1")
    answer = await api.http.post(f"/v1/agents/golem-1/{route}", json=body, headers=key)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == error
    assert answer.json()["field"] == field
    assert api.gateway.commands == []


async def test_publish_to_another_tenant_s_agent_is_403_and_counted(api: Any) -> None:
    key = await tenant(api, "golem-2")
    answer = await api.http.post(
        "/v1/agents/golem-1/publish", json={"memory_id": MEMORY}, headers=key
    )
    assert answer.status_code == 403
    assert api.refusals.counts == {"auth_forbidden": 1, "auth_refused_http": 1}
    assert api.gateway.commands == []


async def test_published_lists_what_the_agent_published(
    api: Any, published: InMemoryPublishedStore
) -> None:
    await published.mark("golem-1", Published(MEMORY, (("ops", ("golem-2", "golem-3")),)))
    await published.mark("golem-2", Published(OTHER_MEMORY, (("ops", ("golem-1",)),)))
    answer = await api.http.get(
        "/v1/agents/golem-1/published", headers=await tenant(api, "golem-1")
    )
    assert answer.status_code == 200
    assert answer.json() == {
        "agent_id": "golem-1",
        "published": [
            {
                "memory_id": MEMORY,
                "clades": ["ops"],
                "recipients": ["golem-2", "golem-3"],
                "routes": {"ops": ["golem-2", "golem-3"]},
            }
        ],
    }


# ---- membership: an admin key's ------------------------------------------------------


async def test_membership_is_an_admin_s(api: Any, registry: InMemoryCladeRegistry) -> None:
    key = await admin(api)
    joined = await api.http.put("/v1/clades/ops/members/fleet/golem-1", headers=key)
    assert joined.status_code == 200, joined.text
    assert joined.json() == {
        "clade": "ops", "agent_id": "fleet/golem-1", "member": True, "changed": True,
    }  # fmt: skip
    again = await api.http.put("/v1/clades/ops/members/fleet/golem-1", headers=key)
    assert again.json()["changed"] is False
    await api.http.put("/v1/clades/ops/members/golem-2", headers=key)
    await api.http.put("/v1/clades/db/members/golem-2", headers=key)
    assert (await api.http.get("/v1/clades", headers=key)).json() == {"clades": ["db", "ops"]}
    members = await api.http.get("/v1/clades/ops", headers=key)
    assert members.json() == {"clade": "ops", "members": ["fleet/golem-1", "golem-2"]}
    left = await api.http.delete("/v1/clades/ops/members/golem-2", headers=key)
    assert left.json() == {"clade": "ops", "agent_id": "golem-2", "member": False, "changed": True}
    gone = await api.http.delete("/v1/clades/ops/members/golem-2", headers=key)
    assert gone.json()["changed"] is False
    assert await registry.members("ops") == ["fleet/golem-1"]
    assert await registry.clades_of("golem-2") == ["db"]
    # Nothing of it is a command: membership is in no agent's journal.
    assert api.gateway.commands == []


ADMIN_ROUTES = [
    ("GET", "/v1/clades"),
    ("GET", "/v1/clades/ops"),
    ("PUT", "/v1/clades/ops/members/golem-1"),
    ("DELETE", "/v1/clades/ops/members/golem-1"),
]


@pytest.mark.parametrize(("method", "path"), ADMIN_ROUTES)
async def test_without_a_key_membership_is_401_and_counted(
    api: Any, method: str, path: str
) -> None:
    answer = await api.http.request(method, path)
    assert answer.status_code == 401
    assert answer.json()["error"] == "unauthenticated"
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert api.refusals.counts == {"auth_unauthenticated": 1, "auth_refused_http": 1}


@pytest.mark.parametrize(("method", "path"), ADMIN_ROUTES)
async def test_a_tenant_key_even_the_agent_s_own_is_403_and_counted(
    api: Any, registry: InMemoryCladeRegistry, method: str, path: str
) -> None:
    key = await bearer_prefix(api, "golem-")
    answer = await api.http.request(method, path, headers=key)
    assert answer.status_code == 403
    body = answer.json()
    assert body["error"] == "forbidden"
    assert "admin key" in body["detail"]
    assert api.refusals.counts == {"auth_forbidden": 1, "auth_refused_http": 1}
    assert await registry.names() == []


async def test_the_key_is_judged_before_the_clade_s_name(api: Any) -> None:
    bad = "/v1/clades/-bad/members/golem-1"
    assert (await api.http.put(bad, headers=await tenant(api, "golem-1"))).status_code == 403
    answer = await api.http.put(bad, headers=await admin(api))
    assert answer.status_code == 400
    assert answer.json()["field"] == "clade"
    assert (await api.http.get("/v1/clades/a=b!", headers=await admin(api))).status_code == 400


async def test_a_bad_agent_id_is_400_before_the_key(api: Any) -> None:
    answer = await api.http.put("/v1/clades/ops/members/golem%201")
    assert answer.status_code == 400
    assert answer.json()["field"] == "agent"
    assert api.refusals.counts == {}


async def test_with_keys_off_membership_needs_no_key(
    make_api: Any, registry: InMemoryCladeRegistry
) -> None:
    api = await make_api(auth=False, clade_registry=registry)
    assert (await api.http.put("/v1/clades/ops/members/golem-1")).status_code == 200
    assert (await api.http.get("/v1/clades")).json() == {"clades": ["ops"]}


# ---- a clade's entries ---------------------------------------------------------------


@pytest.fixture
async def shared(registry: InMemoryCladeRegistry, published: InMemoryPublishedStore) -> None:
    """ops: golem-1 and golem-2, each with one live entry; golem-2 also published a
    deleted one, and one to another clade only."""
    for agent in ("golem-1", "golem-2"):
        await registry.join("ops", agent)
    await registry.join("db", "golem-2")
    await published.mark("golem-1", Published(MEMORY, (("ops", ("golem-2",)),)))
    await published.mark("golem-2", Published(OTHER_MEMORY, (("db", ()), ("ops", ("golem-1",)))))
    await published.mark("golem-2", Published("gone", (("ops", ("golem-1",)),)))
    await published.mark("golem-2", Published("db-only", (("db", ()),)))


ENTRIES = [
    {
        "agent_id": "golem-1", "memory_id": MEMORY, "kind": "warning", "layer": "contemplation",
        "text": "the archive node drops RPC calls after 30 s", "confidence": 0.8,
        "ts": 1_790_000_000_000,
    },
    {
        "agent_id": "golem-2", "memory_id": OTHER_MEMORY, "kind": "heuristic",
        "layer": "contemplation", "text": "retry with backoff", "confidence": 0.6,
        "ts": 1_790_000_000_001,
    },
]  # fmt: skip


@pytest.mark.usefixtures("shared")
async def test_an_admin_reads_a_clade_s_entries(api: Any) -> None:
    answer = await api.http.get("/v1/clades/ops/entries", headers=await admin(api))
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"clade": "ops", "entries": ENTRIES, "truncated": False}


@pytest.mark.usefixtures("shared")
async def test_a_key_reaching_one_member_reads_every_member_s_entries(api: Any) -> None:
    answer = await api.http.get("/v1/clades/ops/entries", headers=await tenant(api, "golem-2"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["entries"] == ENTRIES
    limited = await api.http.get(
        "/v1/clades/ops/entries?limit=1", headers=await tenant(api, "golem-1")
    )
    assert limited.json()["entries"] == ENTRIES[:1]
    assert limited.json()["truncated"] is True


@pytest.mark.usefixtures("shared")
async def test_a_key_reaching_no_member_is_403_and_counted(api: Any) -> None:
    answer = await api.http.get("/v1/clades/ops/entries", headers=await tenant(api, "golem-9"))
    assert answer.status_code == 403
    assert answer.json() == {
        "error": "forbidden",
        "detail": "API key reaches no member of clade 'ops'",
    }
    assert api.refusals.counts == {"auth_forbidden": 1, "auth_refused_http": 1}
    # A clade nobody belongs to is no different.
    empty = await api.http.get("/v1/clades/nobody/entries", headers=await tenant(api, "golem-1"))
    assert empty.status_code == 403


@pytest.mark.usefixtures("shared")
async def test_without_a_good_key_entries_are_401_and_counted(api: Any) -> None:
    for headers in ({}, {"Authorization": "Bearer gmk_nope"}):
        answer = await api.http.get("/v1/clades/ops/entries", headers=headers)
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"].startswith("Bearer")
    assert api.refusals.counts == {"auth_unauthenticated": 2, "auth_refused_http": 2}


async def test_entries_check_their_parameters(api: Any) -> None:
    key = await admin(api)
    assert (await api.http.get("/v1/clades/-x/entries", headers=key)).status_code == 400
    answer = await api.http.get("/v1/clades/ops/entries?limit=0", headers=key)
    assert answer.status_code == 400
    assert answer.json()["field"] == "limit"


async def test_shared_entries_leave_out_the_limit_s_excess_only_when_there_is_one() -> None:
    published = InMemoryPublishedStore()
    for n in range(3):
        await published.mark("a", Published(f"m-{n}", (("c", ()),)))

    async def read(agent_id: str, memory_id: str) -> dict[str, Any] | None:
        return {"kind": "insight", "gist": memory_id, "deleted": memory_id == "m-2"}

    found, truncated = await shared_entries(published, read, ["a"], "c", limit=2)
    assert [entry["memory_id"] for entry in found] == ["m-0", "m-1"]
    assert truncated is False  # the third is deleted: nothing live was left out
    found, truncated = await shared_entries(published, read, ["a"], "c", limit=1)
    assert [entry["text"] for entry in found] == ["m-0"]
    assert truncated is True


# ---- a clade copy says where it came from ---------------------------------------------


def test_a_clade_copy_s_origin_is_its_source_event_id() -> None:
    copy = {"provenance": "clade", "source_event_id": f"clade:fleet/golem-2/{MEMORY}"}
    assert clade_origin(copy) == {"agent_id": "fleet/golem-2", "memory_id": MEMORY}
    assert clade_origin({"provenance": "self", "source_event_id": "clade:a/b"}) is None
    assert clade_origin({"provenance": "clade", "source_event_id": "e-1"}) is None
    assert clade_origin({"provenance": "clade"}) is None


async def test_the_memory_route_adds_a_copy_s_origin(
    api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def detail(
        _redis: object, _prefix: str, agent_id: str, memory_id: str
    ) -> dict[str, Any] | None:
        return {
            "id": memory_id,
            "agent_id": agent_id,
            "provenance": "clade",
            "source_event_id": f"clade:golem-2/{OTHER_MEMORY}",
        }

    monkeypatch.setattr(memories, "memory_detail", detail)
    answer = await api.http.get(
        "/v1/agents/golem-1/memories/copy-1", headers=await tenant(api, "golem-1")
    )
    assert answer.status_code == 200
    assert answer.json()["origin"] == {"agent_id": "golem-2", "memory_id": OTHER_MEMORY}
