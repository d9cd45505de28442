"""The HTTP API's dependencies as the integration tests serve it: tenant keys on, each
key looked up afresh on every request (no cache to wait out after a change)."""

from __future__ import annotations

from redis.asyncio import Redis

from grimoire.infra.http import HttpDeps
from grimoire.infra.ports import Gateway
from grimoire.infra.settings import Settings
from grimoire.tables.ports.trust import ApiKeyStore
from grimoire.tables.trust.api_keys import Authenticator


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
