"""The client packs commands with hiredis into exactly the bytes redis-py would send."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import DataError

from grimoire.tables.redis_client import (
    HiredisConnection,
    HiredisSSLConnection,
    HiredisUnixConnection,
    create_redis,
    queue_script,
)

CASES: list[tuple[Any, ...]] = [
    ("PING",),
    ("SET", "key", "value"),
    ("SET", b"key", b"\x00\xff\x1f"),
    ("HSET", "mem:1", "text", "é ✓ 記憶"),
    ("ZADD", "nexus", 0.1, "a", 1e-7, "b", 1e20, "c", float("inf"), "d"),
    ("INCRBY", "n", -3),
    ("SET", "big", 2**70),
    ("SET", "vec", memoryview(b"\x01\x02\x03")),
    ("SET", "vec", bytearray(b"\x01\x02")),
    ("CONFIG GET", "maxmemory"),
    (b"CONFIG GET", "maxmemory"),
    ("EVALSHA", "a" * 40, 200, *[f"grimoire:mem:{i:032x}" for i in range(200)], 25),
]


@pytest.mark.parametrize("args", CASES, ids=range(len(CASES)))
def test_same_bytes_as_redis_py(args: tuple[Any, ...]) -> None:
    ours = b"".join(bytes(part) for part in HiredisConnection().pack_command(*args))
    theirs = b"".join(bytes(part) for part in Connection().pack_command(*args))
    assert ours == theirs


def test_pipelines_pack_the_same() -> None:
    commands = [("SET", "a", 1), ("HSET", "h", "f", 0.5), ("GET", "a")]
    ours = b"".join(bytes(p) for p in HiredisConnection().pack_commands(commands))
    theirs = b"".join(bytes(p) for p in Connection().pack_commands(commands))
    assert ours == theirs


@pytest.mark.parametrize("bad", [True, None])
def test_bad_arguments_raise_redis_py_errors(bad: object) -> None:
    with pytest.raises(DataError):
        HiredisConnection().pack_command("SET", "key", bad)


def test_other_encodings_use_redis_py_packer() -> None:
    connection = HiredisConnection(encoding="latin-1")
    assert b"".join(connection.pack_command("SET", "k", "é")) == b"".join(
        Connection(encoding="latin-1").pack_command("SET", "k", "é")
    )


@pytest.mark.parametrize(
    ("url", "plain", "packed"),
    [
        ("redis://127.0.0.1:6379/0", Connection, HiredisConnection),
        ("rediss://127.0.0.1:6379/0", SSLConnection, HiredisSSLConnection),
        ("unix:///tmp/redis.sock", UnixDomainSocketConnection, HiredisUnixConnection),
    ],
)
async def test_create_redis_uses_hiredis_packing(url: str, plain: type, packed: type) -> None:
    client = create_redis(url, 2)
    try:
        assert client.connection_pool.connection_class is packed
        assert issubclass(packed, plain)
    finally:
        await client.aclose()


def test_packed_in_one_piece_by_hiredis() -> None:
    # redis-py's Python packer splits a large value into separate chunks.
    args = ("SET", "vec", b"x" * 10_000)
    assert len(Connection().pack_command(*args)) > 1
    assert len(HiredisConnection().pack_command(*args)) == 1


async def test_a_queued_script_goes_as_eval_with_its_body() -> None:
    """No script registered on the pipeline: redis-py would ask Redis whether it is
    loaded (SCRIPT EXISTS) in a round trip of its own before the transaction."""
    client = create_redis("redis://127.0.0.1:6379/0", 2)
    try:
        script = client.register_script("return KEYS[1] .. ARGV[1]")
        pipe = client.pipeline(transaction=True)
        queue_script(pipe, script, ["k"], ["a"])
        assert not pipe.scripts
        ((args, _),) = [(command[0], command[1]) for command in pipe.command_stack]
        assert args == ("EVAL", "return KEYS[1] .. ARGV[1]", 1, "k", "a")
    finally:
        await client.aclose()
