"""Contract suites run every test against the reference in-memory implementation and
the Redis one alike: the parametrised fixture's two sides, the Redis side on the
session's Redis (a cluster where the session runs on one) under a prefix no other
test uses."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar

import pytest

from grimoire.infra.settings import Settings
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.redis_client import create_redis
from tests.support.stored import drop_deployment

__all__ = [
    "BACKENDS",
    "close_client",
    "delete_prefixed",
    "memory_or_deployment",
    "memory_or_redis",
    "scratch_deployment",
    "scratch_redis",
]

# The `params` of a contract fixture: what `memory_or_redis` tells apart.
BACKENDS: Final = ("memory", "redis")

Subject = TypeVar("Subject")


async def close_client(redis: Any, prefix: str) -> None:
    """The client closed alone: what the test wrote stays under its own prefix."""
    await redis.aclose()


async def delete_prefixed(redis: Any, prefix: str) -> None:
    """Every key under the prefix deleted (the store keeps no index), then the client
    closed."""
    keys = [key async for key in redis.scan_iter(match=f"{prefix}:*", count=500)]
    if keys:
        await redis.delete(*keys)
    await redis.aclose()


@asynccontextmanager
async def scratch_redis(
    settings: Settings,
    tag: str,
    *,
    connections: int = 4,
    cleanup: Callable[[Any, str], Awaitable[None]] = close_client,
) -> AsyncIterator[tuple[Any, str]]:
    """A client of the session's Redis and a prefix of `tag` and random hex, no other
    test's; `cleanup(client, prefix)` after."""
    redis = create_redis(settings.redis.url, connections)
    prefix = f"{tag}{uuid.uuid4().hex[:10]}"
    try:
        yield redis, prefix
    finally:
        await cleanup(redis, prefix)


@asynccontextmanager
async def memory_or_redis(
    request: pytest.FixtureRequest,
    in_memory: Callable[[], Subject],
    on_redis: Callable[[Any, str], Subject | Awaitable[Subject]],
    *,
    tag: str,
    connections: int = 4,
    cleanup: Callable[[Any, str], Awaitable[None]] = close_client,
) -> AsyncIterator[Subject]:
    """What one run of a contract test is against: `in_memory()` for the "memory"
    parameter, else `on_redis(client, prefix)` on a `scratch_redis` (awaited when it
    is a coroutine, as a schema check is), cleaned up also when `on_redis` failed."""
    if request.param == "memory":
        yield in_memory()
        return
    settings: Settings = request.getfixturevalue("settings")
    async with scratch_redis(settings, tag, connections=connections, cleanup=cleanup) as scratch:
        made = on_redis(*scratch)
        yield await made if inspect.isawaitable(made) else made


@asynccontextmanager
async def scratch_deployment(
    settings: Settings, tag: str, dims: int
) -> AsyncIterator[tuple[Any, str]]:
    """A `scratch_redis` for suites over a whole deployment's keys: the memory store's
    index made first (on every master of a cluster), every index and key under the
    prefix dropped after."""
    async with scratch_redis(settings, tag, connections=8, cleanup=drop_deployment) as scratch:
        await RedisMemoryStore(*scratch, dims).ensure_schema()
        yield scratch


@asynccontextmanager
async def memory_or_deployment(
    request: pytest.FixtureRequest,
    in_memory: Callable[[], Subject],
    on_redis: Callable[[Any, str], Subject],
    *,
    tag: str,
    dims: int,
) -> AsyncIterator[Subject]:
    """`memory_or_redis` with the Redis side on a `scratch_deployment`."""
    if request.param == "memory":
        yield in_memory()
        return
    async with scratch_deployment(request.getfixturevalue("settings"), tag, dims) as scratch:
        yield on_redis(*scratch)
