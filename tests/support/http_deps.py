"""The HTTP API as the integration tests serve it: tenant keys on, each key looked up
afresh on every request (no cache to wait out after a change), the app called in
process, and the header a request with a key sends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from redis.asyncio import Redis

from grimoire.infra.http import HttpDeps, create_app
from grimoire.infra.ports import Gateway
from grimoire.infra.settings import Settings
from grimoire.tables.ports.trust import ApiKeyStore
from grimoire.tables.trust.api_keys import Authenticator

__all__ = ["bearer", "in_process", "keyed_deps"]


def keyed_deps(
    redis: Redis, prefix: str, client: Gateway, keys: ApiKeyStore, settings: Settings
) -> HttpDeps:
    """``HttpDeps`` over ``redis`` and ``prefix``, sending through ``client``, its
    authenticator checking every request against ``keys``."""
    return HttpDeps(
        redis=redis,
        prefix=prefix,
        client=client,
        authenticator=Authenticator(keys, enabled=True, ttl_s=0.0),
        settings=settings,
    )


def bearer(token: str) -> dict[str, str]:
    """The headers of a request made with the API key `token`."""
    return {"Authorization": f"Bearer {token}"}


@asynccontextmanager
async def in_process(deps: HttpDeps, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the API app over `deps`, called in process (no server, no
    port); `options` go to the client (a `timeout`)."""
    transport = httpx.ASGITransport(app=create_app(deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://api", **options) as http:
        yield http
