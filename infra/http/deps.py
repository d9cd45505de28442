"""What the routes need, built once by whoever serves the app (`grimoire serve`, a
test): no module-level clients or settings."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from grimoire.infra.ports import Gateway
from grimoire.infra.settings import Settings
from grimoire.tables.clade.store import RedisCladeRegistry, RedisPublishedStore
from grimoire.tables.ports.clade import CladeRegistry, PublishedStore
from grimoire.tables.ports.trust import AuthMetrics
from grimoire.tables.trust.api_keys import Authenticator

__all__ = ["HttpDeps", "JournalLag", "owned_resources"]

logger = logging.getLogger(__name__)

#: Messages the worker group has yet to apply, per journal partition; None when the
#: broker could not say (the metric is then left out of the scrape).
JournalLag = Callable[[], Awaitable[dict[int, int] | None]]


@dataclass(frozen=True, slots=True)
class HttpDeps:
    """`redis` is the memory Redis (every read); `client` sends recall, search,
    events and commands (the journal applies the writes); `authenticator` judges
    each request's key; `auth_metrics` counts refusals (default: the metrics hash
    in `redis`); `journal_lag` feeds the `grimoire_journal_lag` gauge when given."""

    redis: Redis
    prefix: str
    client: Gateway
    authenticator: Authenticator
    settings: Settings
    auth_metrics: AuthMetrics | None = None
    journal_lag: JournalLag | None = None
    # The key store's Redis (tenant keys, the deployment's default configuration),
    # when it is not the memory Redis.
    key_store_redis: Redis | None = None
    # Clades (docs/clades.md): the deployment's membership registry (in the key
    # store's Redis, where the sequencer reads it) and what each agent published
    # (in the memory Redis, the agents' state); None: the Redis ones.
    clade_registry: CladeRegistry | None = None
    published_store: PublishedStore | None = None

    @property
    def keys_redis(self) -> Redis:
        return self.key_store_redis if self.key_store_redis is not None else self.redis

    @property
    def clades(self) -> CladeRegistry:
        if self.clade_registry is not None:
            return self.clade_registry
        return RedisCladeRegistry(self.keys_redis, self.prefix)

    @property
    def published(self) -> PublishedStore:
        if self.published_store is not None:
            return self.published_store
        return RedisPublishedStore(self.redis, self.prefix)


@contextlib.asynccontextmanager
async def owned_resources(
    deps: HttpDeps, *, closers: tuple[Callable[[], Awaitable[Any]], ...] = ()
) -> AsyncIterator[None]:
    """Start the client for the app's lifetime, then stop it and run `closers`
    (the Redis clients, the lag probe): for a server that built `deps` itself."""
    start = getattr(deps.client, "start", None)
    stop = getattr(deps.client, "stop", None)
    if start is not None:
        await start()
    try:
        yield
    finally:
        if stop is not None:
            await stop()
        for close in closers:
            try:
                await close()
            except Exception:  # closing on the way out: say so, close the rest
                logger.exception("closing an HTTP API resource failed")
