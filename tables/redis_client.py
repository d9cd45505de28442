"""Creation of the async Redis client from settings."""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool, Redis


def create_redis(url: str, max_connections: int) -> Redis:
    # The non-blocking default pool raises "Too many connections" under bursts;
    # a blocking pool makes callers wait for a free connection instead.
    pool = BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=10)
    return Redis(connection_pool=pool)
