"""Creation of the async Redis client from settings."""

from __future__ import annotations

from typing import Any

import hiredis
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection


class _HiredisPacking:
    """Commands packed by hiredis (C) instead of redis-py's asyncio packer (Python).

    A recall sends a few commands with hundreds of arguments (memory keys, node
    ids, nexus keys): the Python packer took about 370 µs for a 225-argument
    EVALSHA, hiredis 45 µs, for the same bytes. Anything hiredis does not take
    (booleans, None, a non-UTF-8 encoder) goes to redis-py's packer, which
    raises its usual errors."""

    def pack_command(self, *args: Any) -> list[bytes]:
        encoder = self.encoder  # type: ignore[attr-defined]
        if (
            encoder.encoding.lower().replace("-", "") == "utf8"
            and encoder.encoding_errors == "strict"
        ):
            head = args[0]
            # As redis-py does: "CONFIG GET" is sent as two arguments.
            if isinstance(head, str):
                args = (*head.encode().split(), *args[1:])
            elif isinstance(head, bytes) and b" " in head:
                args = (*head.split(), *args[1:])
            try:
                return [hiredis.pack_command(args)]
            except TypeError:
                pass
        return super().pack_command(*args)  # type: ignore[misc, no-any-return]


class HiredisConnection(_HiredisPacking, Connection):
    pass


class HiredisSSLConnection(_HiredisPacking, SSLConnection):
    pass


class HiredisUnixConnection(_HiredisPacking, UnixDomainSocketConnection):
    pass


_PACKED_BY_HIREDIS: dict[type[Any], type[Any]] = {
    Connection: HiredisConnection,
    SSLConnection: HiredisSSLConnection,
    UnixDomainSocketConnection: HiredisUnixConnection,
}


def create_redis(url: str, max_connections: int) -> Redis:
    """A client for `url`: an ACL user and password in it (redis://user:pw@host:6379/0;
    percent-encode reserved characters), TLS by the rediss:// scheme, certificate
    files as query options (?ssl_ca_certs=ca.pem&ssl_certfile=..&ssl_keyfile=..),
    all read by redis-py itself (tests/unit/test_kafka_security.py pins it)."""
    # The non-blocking default pool raises "Too many connections" under bursts;
    # a blocking pool makes callers wait for a free connection instead.
    pool = BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=10)
    pool.connection_class = _PACKED_BY_HIREDIS.get(pool.connection_class, pool.connection_class)
    return Redis(connection_pool=pool)
