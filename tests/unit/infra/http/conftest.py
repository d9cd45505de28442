"""The HTTP API on fakes: an in-memory key store, a recording Kafka gateway and a
Redis stand-in that fails loudly if a route reaches it (the routes tested here
answer before any read, or read through stores handed in: the in-memory clade
stores; the reads are tested against the real Redis in
tests/integration/test_http_api.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from grimoire.infra.http import HttpDeps, create_app
from grimoire.infra.settings import Settings
from grimoire.streams.trust.tenancy import TenantScope
from grimoire.tables.ports.clade import CladeRegistry, PublishedStore
from grimoire.tables.testing.api_keys import InMemoryApiKeyStore, InMemoryAuthMetrics
from grimoire.tables.trust.api_keys import Authenticator
from grimoire.topics.client import RecallAnswer
from grimoire.topics.schemas import RecallItemV1
from tests.support.gateway import RecordingGateway

PREFIX = "gm"


class NoRedis:
    """Any use is a test bug: these routes must answer before reading the store."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the route reached Redis ({name})")


class FakeGateway(RecordingGateway):
    def items(self, agent_id: str, options: dict[str, Any]) -> tuple[RecallItemV1, ...]:
        return (
            RecallItemV1(
                id="m-1",
                agent_id=agent_id,
                kind="episode",
                layer="observation",
                gist="RPC timed out",
                ts=1_790_000_000_000,
                score=0.9,
                lanes=["bm25"],
                source_event_id="e-1",
            ),
        )

    def answer(self, agent_id: str, items: tuple[RecallItemV1, ...]) -> RecallAnswer:
        return RecallAnswer(
            correlation_id="c-1",
            agent_id=agent_id,
            items=items,
            watermark=1_790_000_000_000,
            timings_ms={"embed": 3.0, "total": 12.5},
            budget={"items": 1},
            mode="full",
            as_of=1_790_000_000_000,
        )


@dataclass
class Api:
    http: httpx.AsyncClient
    gateway: FakeGateway
    keys: InMemoryApiKeyStore
    refusals: InMemoryAuthMetrics
    app: Any

    async def token(self, scope: TenantScope) -> str:
        _, token = await self.keys.create(scope, "test", now_ms=1)
        return token


MakeApi = Callable[..., Any]


@pytest.fixture
async def make_api() -> AsyncIterator[MakeApi]:
    opened: list[httpx.AsyncClient] = []

    async def make(
        *,
        auth: bool = True,
        settings: Settings | None = None,
        clade_registry: CladeRegistry | None = None,
        published_store: PublishedStore | None = None,
    ) -> Api:
        keys = InMemoryApiKeyStore()
        refusals = InMemoryAuthMetrics()
        gateway = FakeGateway()
        deps = HttpDeps(
            redis=NoRedis(),  # type: ignore[arg-type]
            prefix=PREFIX,
            client=gateway,
            authenticator=Authenticator(keys, enabled=auth),
            settings=settings or Settings(topic_prefix=PREFIX, _env_file=None),
            auth_metrics=refusals,
            clade_registry=clade_registry,
            published_store=published_store,
        )
        app = create_app(deps)
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
        opened.append(http)
        return Api(http, gateway, keys, refusals, app)

    yield make
    for http in opened:
        await http.aclose()


@pytest.fixture
async def api(make_api: MakeApi) -> Api:
    result: Api = await make_api()
    return result


@pytest.fixture
async def auth(api: Api) -> dict[str, str]:
    """The Authorization header of a key for golem-1 alone."""
    token = await api.token(TenantScope(agent_ids=frozenset({"golem-1"})))
    return {"Authorization": f"Bearer {token}"}
