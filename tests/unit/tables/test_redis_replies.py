"""Replies already received are read without a timer; a reply still on its way is
read under `socket_timeout` as redis-py reads it (tables/redis_client.py).

A scripted RESP server on loopback stands in for Redis here because the cases need
what a real one will not do on demand: answer in pieces, late, or never. It answers
every command with `+PONG` at once (the client's greeting on connect, CLIENT SETINFO,
takes any answer) until the case's client has connected, then as the case scripts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
import redis.asyncio.connection as redis_connection
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.connection import Connection
from redis.exceptions import TimeoutError as RedisTimeoutError

from grimoire.tables.redis_client import HiredisConnection

#: How a case answers the commands read so far: gets the count, writes to the stream.
Answer = Callable[[int, asyncio.StreamWriter], Awaitable[None]]


def _commands(buffer: bytes) -> tuple[int, bytes]:
    """Whole RESP commands at the head of `buffer`, and what is left of it."""
    count = 0
    while buffer.startswith(b"*"):
        at = buffer.find(b"\r\n")
        if at < 0:
            break
        parts, at = int(buffer[1:at]), at + 2
        whole = True
        for _ in range(parts):
            end = buffer.find(b"\r\n", at)
            if end < 0:
                whole = False
                break
            at = end + 2 + int(buffer[at + 1 : end]) + 2
            if at > len(buffer):
                whole = False
                break
        if not whole:
            break
        buffer, count = buffer[at:], count + 1
    return count, buffer


async def _pongs_at_once(count: int, writer: asyncio.StreamWriter) -> None:
    writer.write(b"+PONG\r\n" * count)


class _Script:
    """Whether the server answers as the case scripts yet (set once connected)."""

    def __init__(self) -> None:
        self.on = False


@asynccontextmanager
async def _server(answer: Answer) -> AsyncIterator[tuple[int, _Script]]:
    script = _Script()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        buffer = b""
        while chunk := await reader.read(65_536):
            count, buffer = _commands(buffer + chunk)
            if count:
                await (answer if script.on else _pongs_at_once)(count, writer)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], script
    finally:
        server.close()


async def _connected(
    port: int, script: _Script, connection_class: type[Connection], timeout: float = 5.0
) -> Redis:
    """A client of one connection, connected, with the case's script on from here."""
    client = _client(port, connection_class, timeout)
    await client.ping()
    script.on = True
    return client


def _client(port: int, connection_class: type[Connection], timeout: float = 5.0) -> Redis:
    pool = ConnectionPool(
        connection_class=connection_class,
        host="127.0.0.1",
        port=port,
        socket_timeout=timeout,
    )
    return Redis(connection_pool=pool)


@contextmanager
def _timers() -> Iterator[list[float | None]]:
    """The read timeouts redis-py's connections arm while open."""
    armed: list[float | None] = []
    original = redis_connection.async_timeout

    def counting(delay: float | None) -> Any:
        armed.append(delay)
        return original(delay)

    redis_connection.async_timeout = counting  # type: ignore[assignment]
    try:
        yield armed
    finally:
        redis_connection.async_timeout = original  # type: ignore[assignment]


async def _pipelined_pings(client: Redis, count: int) -> list[Any]:
    async with client.pipeline(transaction=False) as pipe:
        for _ in range(count):
            pipe.ping()
        return list(await pipe.execute())


@pytest.mark.parametrize(
    ("connection_class", "most_timers"), [(HiredisConnection, 1), (Connection, 50)]
)
async def test_a_pipeline_arrived_whole_arms_one_timer(
    connection_class: type[Connection], most_timers: int
) -> None:
    """redis-py's own connection arms one per reply: the count this saves."""
    async with _server(_pongs_at_once) as (port, script):
        client = await _connected(port, script, connection_class)
        try:
            with _timers() as armed:
                replies = await _pipelined_pings(client, 50)
        finally:
            await client.aclose()
    assert replies == [True] * 50
    assert len(armed) == most_timers


async def test_replies_arriving_in_pieces_are_read_whole_and_in_order() -> None:
    async def halves(count: int, writer: asyncio.StreamWriter) -> None:
        replies = b"+PONG\r\n" * count
        middle = len(replies) // 2 + 3  # inside a reply, not between two
        writer.write(replies[:middle])
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(replies[middle:])

    async with _server(halves) as (port, script):
        client = await _connected(port, script, HiredisConnection)
        try:
            with _timers() as armed:
                replies = await _pipelined_pings(client, 40)
                again = await _pipelined_pings(client, 3)
        finally:
            await client.aclose()
    assert replies == [True] * 40
    assert again == [True] * 3
    # The first reply and the one cut in half waited, under the socket timeout.
    assert 2 <= len(armed) <= 4
    assert set(armed) == {5.0}


async def _silence(count: int, writer: asyncio.StreamWriter) -> None:
    return None


async def _half_the_replies(count: int, writer: asyncio.StreamWriter) -> None:
    writer.write(b"+PONG\r\n" * (count // 2))


@pytest.mark.parametrize(
    ("answers", "pings"),
    [(_silence, 5), (_half_the_replies, 6)],
    ids=["stops_answering", "stops_halfway_through_a_pipeline"],
)
async def test_a_server_that_stops_answering_still_times_out(answers: Answer, pings: int) -> None:
    async with _server(answers) as (port, script):
        client = await _connected(port, script, HiredisConnection, timeout=0.2)
        try:
            # The outer bound turns a read left without its timer into a failure.
            with pytest.raises(RedisTimeoutError):
                async with asyncio.timeout(5):
                    await _pipelined_pings(client, pings)
        finally:
            await client.aclose()
