"""The HTTP API on fakes: an in-memory key store, a recording Kafka gateway and a
Redis stand-in that fails loudly if a route reaches it (the routes tested here
answer before any read; the reads are tested against the real Redis in
tests/integration/test_http_api.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from grimoire.infra.http import HttpDeps, create_app
from grimoire.infra.settings import Settings
from grimoire.streams.trust.tenancy import TenantScope
from grimoire.tables.testing.api_keys import InMemoryApiKeyStore, InMemoryAuthMetrics
from grimoire.tables.trust.api_keys import Authenticator
from grimoire.topics.client import RecallAnswer
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import CommandV1, RecallItemV1

PREFIX = "gm"


class NoRedis:
    """Any use is a test bug: these routes must answer before reading the store."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the route reached Redis ({name})")


@dataclass
class FakeGateway:
    topics: TopicNames = field(default_factory=lambda: TopicNames(PREFIX))
    recalls: list[dict[str, Any]] = field(default_factory=list)
    commands: list[CommandV1] = field(default_factory=list)
    maintenance: list[tuple[str, bool]] = field(default_factory=list)
    published: list[tuple[str, str, bytes]] = field(default_factory=list)
    fail_with: Exception | None = None

    async def recall(self, agent_id: str, query: str, **options: Any) -> RecallAnswer:
        self.recalls.append({"agent_id": agent_id, "query": query, **options})
        if self.fail_with is not None:
            raise self.fail_with
        item = RecallItemV1(
            id="m-1",
            agent_id=agent_id,
            kind="episode",
            layer="observation",
            gist="RPC timed out",
            ts=1_790_000_000_000,
            score=0.9,
            lanes=["bm25"],
            source_event_id="e-1",
        )
        return RecallAnswer(
            correlation_id="c-1",
            agent_id=agent_id,
            items=(item,),
            watermark=1_790_000_000_000,
            timings_ms={"embed": 3.0, "total": 12.5},
            budget={"items": 1},
            mode="full",
            as_of=1_790_000_000_000,
        )

    async def send_command(self, command: CommandV1) -> None:
        self.commands.append(command)

    async def request_maintenance(self, agent_id: str, *, compact: bool = False) -> None:
        self.maintenance.append((agent_id, compact))

    async def publish_raw(self, topic: str, key: str, value: bytes, *, wait: bool = True) -> None:
        self.published.append((topic, key, value))


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

    async def make(*, auth: bool = True, settings: Settings | None = None) -> Api:
        keys = InMemoryApiKeyStore()
        refusals = InMemoryAuthMetrics()
        gateway = FakeGateway()
        deps = HttpDeps(
            redis=NoRedis(),  # type: ignore[arg-type]
            prefix=PREFIX,
            client=gateway,
            authenticator=Authenticator(keys, enabled=auth),
            settings=settings or Settings(topic_prefix=PREFIX, _env_file=None),  # type: ignore[call-arg]
            auth_metrics=refusals,
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
