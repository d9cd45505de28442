"""Creation of the async Redis client from settings: one Redis, or a Redis Cluster.

A URL with the scheme `redis+cluster://` (`rediss+cluster://` for TLS) names any
node of a Redis Cluster: the client is redis-py's `redis.asyncio.cluster.RedisCluster`,
which finds the other masters itself and sends each command to the master owning
its keys' slot. Every other URL is one Redis. Code that must tell the two apart
asks `is_cluster`; the few places that do (transactions over several agents,
scripts queued on a pipeline, the search index on every master) live in
`grimoire.tables`.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any, TypeAlias
from weakref import WeakKeyDictionary

import hiredis
from redis._parsers import _AsyncHiredisParser
from redis._parsers.hiredis import NOT_ENOUGH_DATA
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.commands.core import AsyncScript

__all__ = [
    "CLUSTER_SCHEMES",
    "AnyRedis",
    "HiredisConnection",
    "HiredisSSLConnection",
    "HiredisUnixConnection",
    "close_masters",
    "create_redis",
    "ensure_slots",
    "is_cluster",
    "is_cluster_url",
    "master_client",
    "queue_script",
    "refresh_slots",
    "slot_master",
]

logger = logging.getLogger(__name__)

# One Redis or a cluster: both take the same commands, and every key of one agent's
# state is in one slot (`grimoire.tables.keyspace`).
AnyRedis: TypeAlias = Redis | RedisCluster

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


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


class _ReplyAhead:
    """hiredis's reply reader with at most one reply parsed ahead of its reader.

    Wraps the `hiredis.Reader` of a connection's parser: `reply_ready` parses the
    next reply if its bytes are all here and keeps it for the next `gets`, so a
    connection can tell that a read will not wait without consuming the reply."""

    __slots__ = ("_ahead", "_decoded", "_reader")

    def __init__(self, reader: Any) -> None:
        self._reader = reader
        # What the parser's reader answers when no whole reply is buffered.
        self._ahead: Any = NOT_ENOUGH_DATA
        self._decoded = True

    def reply_ready(self, decoded: bool) -> bool:
        if self._ahead is NOT_ENOUGH_DATA:
            self._ahead = self._reader.gets() if decoded else self._reader.gets(False)
            self._decoded = decoded
        return self._ahead is not NOT_ENOUGH_DATA and self._decoded == decoded

    def gets(self, *decode: Any) -> Any:
        if self._ahead is not NOT_ENOUGH_DATA:
            reply, self._ahead = self._ahead, NOT_ENOUGH_DATA
            return reply
        return self._reader.gets(*decode)

    def feed(self, *args: Any) -> None:
        self._reader.feed(*args)

    def has_data(self) -> bool:
        return self._ahead is not NOT_ENOUGH_DATA or bool(self._reader.has_data())


class _ReplyAheadParser(_AsyncHiredisParser):
    def on_connect(self, connection: Any) -> None:
        super().on_connect(connection)
        self._reader = _ReplyAhead(self._reader)


class _BufferedReplies:
    """Replies already received are read without a timer.

    redis-py arms an asyncio timeout (`socket_timeout`, 5 s by default) around every
    reply it reads, one per command of a pipeline: a timer handle made, scheduled and
    cancelled each time, about a tenth of the apply loop's CPU (`bench fold`). A
    reply whose bytes are all in the reader's buffer cannot wait, so it is read with
    no timer; a reply still on its way is read under the timeout as before, and a
    server that stops answering still times out. Only with hiredis's parser, which
    this class installs (`_ReplyAheadParser`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("parser_class", _AsyncHiredisParser) is _AsyncHiredisParser:
            kwargs["parser_class"] = _ReplyAheadParser
        super().__init__(*args, **kwargs)

    async def read_response(
        self,
        disable_decoding: bool = False,
        timeout: float | None = None,
        *,
        disconnect_on_error: bool = True,
        push_request: bool | None = False,
    ) -> Any:
        reader = getattr(self._parser, "_reader", None)  # type: ignore[attr-defined]
        if (
            timeout is None
            and isinstance(reader, _ReplyAhead)
            and reader.reply_ready(not disable_decoding)
        ):
            timeout = math.inf  # redis-py 8.1: read without a timeout
        return await super().read_response(  # type: ignore[misc]
            disable_decoding,
            timeout,
            disconnect_on_error=disconnect_on_error,
            push_request=push_request,
        )


class HiredisConnection(_BufferedReplies, _HiredisPacking, Connection):
    pass


class HiredisSSLConnection(_BufferedReplies, _HiredisPacking, SSLConnection):
    pass


class HiredisUnixConnection(_BufferedReplies, _HiredisPacking, UnixDomainSocketConnection):
    pass


_PACKED_BY_HIREDIS: dict[type[Any], type[Any]] = {
    Connection: HiredisConnection,
    SSLConnection: HiredisSSLConnection,
    UnixDomainSocketConnection: HiredisUnixConnection,
}


class _Cluster(RedisCluster):
    """redis-py's `RedisCluster`, its slot map read by the first caller alone.

    redis-py 8.1 reads the map lazily on first use, and commands that arrive
    meanwhile can be sent on a connection being replaced (20 concurrent first
    calls failed with `'NoneType' object has no attribute 'writelines'`); they
    wait for the map here instead."""

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if self._initialize:
            await ensure_slots(self)
        return await super().execute_command(*args, **kwargs)


def is_cluster_url(url: str) -> bool:
    return url.partition("://")[0].lower() in CLUSTER_SCHEMES


def is_cluster(redis: Any) -> bool:
    """Whether `redis` (a client or a pipeline) talks to a Redis Cluster."""
    return isinstance(redis, RedisCluster | ClusterPipeline)


def create_redis(url: str, max_connections: int) -> Any:
    """A client for `url`: an ACL user and password in it (redis://user:pw@host:6379/0;
    percent-encode reserved characters), TLS by the rediss:// scheme, certificate
    files as query options (?ssl_ca_certs=ca.pem&ssl_certfile=..&ssl_keyfile=..),
    all read by redis-py itself (tests/unit/infra/test_kafka_security.py pins it).
    `redis+cluster://` / `rediss+cluster://`: a `RedisCluster` (the same options;
    `max_connections` does not apply there, see below)."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme.lower() in CLUSTER_SCHEMES:
        plain = f"{CLUSTER_SCHEMES[scheme.lower()]}://{rest}"
        # Commands are packed by redis-py's own packer here: a cluster node builds
        # its connections from a class RedisCluster picks itself. And no cap on
        # connections per master: redis-py's cluster nodes have no blocking pool, so
        # a cap is an error under a burst (MaxConnectionsError), not a wait; the
        # connection count follows the concurrency. Each master's plain client for
        # transactions (`slot_master`) has a blocking pool of its own.
        return _Cluster.from_url(plain)
    # The non-blocking default pool raises "Too many connections" under bursts;
    # a blocking pool makes callers wait for a free connection instead.
    pool = BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=10)
    pool.connection_class = _PACKED_BY_HIREDIS.get(pool.connection_class, pool.connection_class)
    return Redis(connection_pool=pool)


def queue_script(pipe: Any, script: AsyncScript, keys: list[Any], args: list[Any]) -> None:
    """Queue a registered script on a pipeline (MULTI/EXEC or not), as EVAL with its
    body: Redis runs it from its cache by the body's hash all the same.

    Not EVALSHA: a pipeline holding one asks Redis whether the script is loaded
    first (SCRIPT EXISTS, a round trip of its own before every transaction), and
    that check cannot be skipped: a script missing from the cache inside MULTI/EXEC
    fails alone while the transaction's other commands are applied. With the body
    nothing can be missing, and a cluster pipeline, which loads no scripts (a master
    may be a fresh replica that never saw one), takes the same call. The body costs
    a few hundred bytes a call on the wire; the round trip it saves is one of the
    fourteen a batch of the apply loop costs (tests/integration/test_round_trips.py)."""
    pipe.eval(script.script, len(keys), *keys, *args)


_FIRST_READS: WeakKeyDictionary[Any, asyncio.Lock] = WeakKeyDictionary()
_MASTER_CONNECTIONS = 32
# Plain clients of a cluster's masters, per cluster client: a MULTI/EXEC over one
# slot's keys runs on one of them (see `slot_master`).
_MASTERS: WeakKeyDictionary[Any, dict[str, Redis]] = WeakKeyDictionary()


async def ensure_slots(cluster: Any) -> None:
    """The cluster client's slot map, read once (redis-py reads it lazily), by one
    caller while the others wait."""
    if not cluster._initialize and cluster.nodes_manager.slots_cache:
        return
    lock = _FIRST_READS.get(cluster)
    if lock is None:
        lock = _FIRST_READS[cluster] = asyncio.Lock()
    async with lock:
        if cluster._initialize or not cluster.nodes_manager.slots_cache:
            await cluster.initialize()


def master_client(cluster: Any, node: Any) -> Redis:
    """A plain client of one master of `cluster`, with the cluster client's options
    (credentials, TLS), kept per cluster client."""
    clients = _MASTERS.setdefault(cluster, {})
    client = clients.get(node.name)
    if client is None:
        kwargs = dict(node.connection_kwargs)
        kwargs.pop("himport_registry", None)
        # Blocking, as one Redis's pool is (`create_redis`): a burst waits for a
        # connection instead of failing.
        pool = BlockingConnectionPool(
            connection_class=_PACKED_BY_HIREDIS.get(node.connection_class, node.connection_class),
            max_connections=_MASTER_CONNECTIONS,
            timeout=10,
            **kwargs,
        )
        client = clients[node.name] = Redis(connection_pool=pool)
    return client


def slot_master(cluster: Any, slot: int) -> Redis:
    """The plain client of the master owning `slot` (`ensure_slots` first).

    redis-py's cluster pipeline in transaction mode determines each queued
    command's slot on a thread of its own with an event loop of its own (8.1), which
    is slow and breaks a client not initialized yet; a MULTI/EXEC whose keys share
    one slot (an agent's, `grimoire.tables.keyspace`) is sent to that slot's master
    directly instead. A slot that moved since answers MOVED: the caller's retry
    finds the new master once the map is read again (`refresh_slots`)."""
    return master_client(cluster, cluster.nodes_manager.get_node_from_slot(slot))


async def refresh_slots(cluster: Any) -> None:
    """Read the slot map again (after a MOVED)."""
    await cluster.nodes_manager.initialize()


async def close_masters(cluster: Any) -> None:
    for client in _MASTERS.pop(cluster, {}).values():
        await client.aclose()
