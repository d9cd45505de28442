"""`grimoire serve`: the HTTP API on uvicorn, with the deps it owns built from
settings (`GRIMOIRE_*`, as the worker reads them)."""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager

from starlette.applications import Starlette

from grimoire.infra.http.app import create_app
from grimoire.infra.http.deps import HttpDeps, owned_resources
from grimoire.infra.http.lag import JournalLagProbe
from grimoire.infra.settings import Settings
from grimoire.tables.redis_client import create_redis
from grimoire.tables.trust.api_keys import Authenticator, RedisApiKeyStore
from grimoire.topics.client import GrimoireClient
from grimoire.topics.declarations import TopicNames

__all__ = ["build_app", "run_server"]

logger = logging.getLogger(__name__)


def build_app(settings: Settings) -> Starlette:
    """The app with deps of its own (started and closed by its lifespan)."""
    redis = create_redis(settings.redis.url, settings.redis.max_connections)
    keys_redis = (
        create_redis(settings.redis.keystore_url, 4) if settings.redis.keystore_url else redis
    )
    client = GrimoireClient(
        settings.bootstrap_servers,
        settings.broker.topic_prefix,
        partitions=settings.broker.partitions,
        api_key=settings.http.kafka_api_key,
        security=settings.kafka_security,
    )
    lag = JournalLagProbe(
        settings.bootstrap_servers,
        settings.worker.app_id,
        TopicNames(settings.broker.topic_prefix).journal,
        settings.broker.partitions,
        security=settings.kafka_security,
    )
    deps = HttpDeps(
        redis=redis,
        prefix=settings.broker.topic_prefix,
        client=client,
        authenticator=Authenticator(
            RedisApiKeyStore(keys_redis, settings.broker.topic_prefix),
            enabled=settings.worker.auth_enabled,
        ),
        settings=settings,
        journal_lag=lag,
        key_store_redis=keys_redis,
    )
    closers = [lag.close, redis.aclose]
    if keys_redis is not redis:
        closers.append(keys_redis.aclose)

    def lifespan(_app: Starlette) -> AbstractAsyncContextManager[None]:
        return owned_resources(deps, closers=tuple(closers))

    return create_app(deps, lifespan=lifespan)


def run_server(settings: Settings, *, host: str, port: int) -> None:
    """Serve until SIGINT/SIGTERM (uvicorn's own handling), then close what it opened."""
    import uvicorn

    if not settings.worker.auth_enabled:
        logger.warning(
            "tenant keys are off (GRIMOIRE_AUTH_ENABLED=false): every caller sees every agent"
        )
    elif not settings.http.kafka_api_key:
        # Workers answer a keyless request nowhere (docs/security.md): every recall
        # and search through this API would time out.
        logger.warning(
            "tenant keys are on but GRIMOIRE_HTTP_KAFKA_API_KEY is unset: "
            "no worker will answer this API's recalls"
        )
    logger.info("HTTP API on http://%s:%d (OpenAPI at /openapi.yaml)", host, port)
    uvicorn.run(
        build_app(settings),
        host=host,
        port=port,
        log_config=None,  # the process's logging (infra/logs.py) stays in charge
        access_log=False,
    )
