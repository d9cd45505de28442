"""What the routes need, built once by whoever serves the app (`grimoire serve`, a
test): no module-level clients or settings."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from redis.asyncio import Redis

from grimoire.infra.settings import Settings
from grimoire.tables.trust.api_keys import Authenticator, AuthMetrics
from grimoire.topics.client import RecallAnswer
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import CommandV1

__all__ = ["Gateway", "HttpDeps", "JournalLag", "owned_resources"]

logger = logging.getLogger(__name__)

#: Messages the worker group has yet to apply, per journal partition; None when the
#: broker could not say (the metric is then left out of the scrape).
JournalLag = Callable[[], Awaitable[dict[int, int] | None]]


class Gateway(Protocol):
    """What the routes send through Kafka: `GrimoireClient` is one."""

    topics: TopicNames

    async def recall(
        self,
        agent_id: str,
        query: str,
        *,
        k: int | None = None,
        as_of: int | None = None,
        filters: Any = None,
        budgets: Any = None,
        state: Any = None,
        mode: Any = None,
        explain: bool | None = None,
        expand_episodes: bool | None = None,
        record_usage: bool | None = None,
        timeout: float = 10.0,
    ) -> RecallAnswer: ...

    async def send_command(self, command: CommandV1) -> None: ...

    async def request_maintenance(self, agent_id: str, *, compact: bool = False) -> None: ...

    async def publish_raw(
        self, topic: str, key: str, value: bytes, *, wait: bool = True, api_key: str | None = None
    ) -> None:
        """Publish with `api_key` (default: the gateway's own) as the record's
        `grimoire-api-key` header."""
        ...


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

    @property
    def keys_redis(self) -> Redis:
        return self.key_store_redis if self.key_store_redis is not None else self.redis


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
