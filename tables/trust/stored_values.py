"""Keys of an agent's footprint read as they are stored, for the state digest
(`digest.py`) and the export (`tables/memory/imported.py`): both must see the same
bytes, so both read through here.

A value comes back in one canonical form whatever the Redis type: a string's
bytes, a hash's (field, value) pairs sorted by field, a set's sorted members, a
sorted set's (member, score) pairs sorted by member, a list in its order, a
stream as its entries' sorted field pairs in order (entry ids left out: the
maintenance log's are wall-clock times). All bytes as stored.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from grimoire.streams.exchange.format import Pairs
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.trust.agent_keys import MEMBER_FAMILIES, MEMBER_OF

__all__ = ["member_value", "read_stored", "stored_bytes", "stored_pairs"]

logger = logging.getLogger(__name__)


def stored_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode()


def stored_pairs(items: Any) -> Pairs:
    return tuple(sorted((stored_bytes(field), stored_bytes(value)) for field, value in items))


async def read_stored(redis: Redis, keys: Sequence[str]) -> list[tuple[str, Any]]:
    """(Redis type, canonical value) of each key: two pipelined round trips. A key
    gone since it was listed is ("none", None)."""
    async with redis.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.type(key)
        kinds = [text_of(kind) for kind in await pipe.execute()]
    async with redis.pipeline(transaction=False) as pipe:
        for key, kind in zip(keys, kinds, strict=True):
            if kind == "string":
                pipe.get(key)
            elif kind == "hash":
                pipe.hgetall(key)
            elif kind == "list":
                pipe.lrange(key, 0, -1)
            elif kind == "set":
                pipe.smembers(key)
            elif kind == "zset":
                pipe.zrange(key, 0, -1, withscores=True)
            elif kind == "stream":
                pipe.xrange(key, "-", "+")
            else:
                pipe.exists(key)  # "none" (gone), or a type we never write
        raws = await pipe.execute()
    out: list[tuple[str, Any]] = []
    for kind, raw in zip(kinds, raws, strict=True):
        value: Any
        if kind == "string":
            if raw is None:
                kind, value = "none", None
            else:
                value = stored_bytes(raw)
        elif kind == "hash":
            value = stored_pairs(raw.items())
        elif kind == "list":
            value = tuple(stored_bytes(item) for item in raw)
        elif kind == "set":
            value = tuple(sorted(stored_bytes(member) for member in raw))
        elif kind == "zset":
            value = tuple(sorted((stored_bytes(member), float(score)) for member, score in raw))
        elif kind == "stream":
            value = tuple(stored_pairs(fields.items()) for _, fields in raw)
        elif kind == "none":
            value = None
        else:
            raise ValueError(f"no stored form for a Redis {kind}")
        out.append((kind, value))
    return out


async def member_value(
    redis: Redis, keys: Keyspace, family: str, agent_id: str
) -> bytes | float | None:
    """One of the agent's single values (`MEMBER_FAMILIES`): its field state's bytes
    or a score; None when it has none."""
    key = MEMBER_FAMILIES[family](keys, agent_id)
    member = MEMBER_OF[family]
    if not member:
        raw = await redis.get(key)
        return None if raw is None else stored_bytes(raw)
    score = await redis.zscore(key, member)
    return None if score is None else float(score)
