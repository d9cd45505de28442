"""The Redis clade registry (deployment-wide sets, admin-managed) and each agent's
published entries (a hash under the agent's hash tag, part of its state)."""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from redis.asyncio import Redis

from grimoire.streams.clade.copies import valid_clade_name
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.ports.clade import Published

__all__ = [
    "CLADE_CONTRADICTED",
    "CLADE_VALIDATED",
    "RedisCladeCopies",
    "RedisCladeRegistry",
    "RedisPublishedStore",
    "published_from_json",
    "published_to_json",
    "valid_clade_name",
]


def published_to_json(published: Published) -> bytes:
    return orjson.dumps(
        {"routes": {clade: list(agents) for clade, agents in published.routes}},
        option=orjson.OPT_SORT_KEYS,
    )


def published_from_json(memory_id: str, raw: bytes | str) -> Published:
    routes = orjson.loads(raw).get("routes", {})
    return Published(
        memory_id,
        tuple((clade, tuple(sorted(agents))) for clade, agents in sorted(routes.items())),
    )


class RedisCladeRegistry:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._keys = Keyspace(prefix)

    async def join(self, clade: str, agent_id: str) -> bool:
        if not valid_clade_name(clade):
            raise ValueError(f"not a clade name: {clade!r}")
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.sadd(self._keys.clade_members(clade), agent_id)
            pipe.sadd(self._keys.agent_clades(agent_id), clade)
            pipe.sadd(self._keys.clade_names, clade)
            added, _, _ = await pipe.execute()
        return bool(added)

    async def leave(self, clade: str, agent_id: str) -> bool:
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.srem(self._keys.clade_members(clade), agent_id)
            pipe.srem(self._keys.agent_clades(agent_id), clade)
            pipe.scard(self._keys.clade_members(clade))
            removed, _, left = await pipe.execute()
        if not left:
            await self._redis.srem(self._keys.clade_names, clade)
        return bool(removed)

    async def members(self, clade: str) -> list[str]:
        return sorted(
            text_of(m) for m in await self._redis.smembers(self._keys.clade_members(clade))
        )

    async def clades_of(self, agent_id: str) -> list[str]:
        return sorted(
            text_of(m) for m in await self._redis.smembers(self._keys.agent_clades(agent_id))
        )

    async def names(self) -> list[str]:
        return sorted(text_of(m) for m in await self._redis.smembers(self._keys.clade_names))


class RedisPublishedStore:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._keys = Keyspace(prefix)

    async def published(
        self, agent_id: str, memory_ids: Sequence[str] = ()
    ) -> dict[str, Published]:
        key = self._keys.clade_published(agent_id)
        if memory_ids:
            wanted = sorted(set(memory_ids))
            raw = dict(zip(wanted, await self._redis.hmget(key, wanted), strict=True))
        else:
            raw = {text_of(k): v for k, v in (await self._redis.hgetall(key)).items()}
        return {m: published_from_json(m, v) for m, v in sorted(raw.items()) if v is not None}

    async def mark(self, agent_id: str, published: Published) -> None:
        await self._redis.hset(
            self._keys.clade_published(agent_id), published.memory_id, published_to_json(published)
        )

    async def unmark(self, agent_id: str, memory_ids: Sequence[str]) -> None:
        if memory_ids:
            await self._redis.hdel(self._keys.clade_published(agent_id), *memory_ids)


# The origin's counts of sibling runs that used a copy of the entry: clade evidence,
# kept apart from its own run record (which recall and evidence read).
CLADE_VALIDATED = "clade_validated"
CLADE_CONTRADICTED = "clade_contradicted"


class RedisCladeCopies:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._keys = Keyspace(prefix)

    async def _owned(self, agent_id: str, memory_id: str) -> str | None:
        key = self._keys.memory(agent_id, memory_id)
        owner = await self._redis.hget(key, "agent_id")
        return key if owner is not None and text_of(owner) == agent_id else None

    async def set_counts(
        self, agent_id: str, memory_id: str, *, confidence: float, validated: int, contradicted: int
    ) -> bool:
        key = await self._owned(agent_id, memory_id)
        if key is None:
            return False
        await self._redis.hset(
            key,
            mapping={
                "confidence": repr(confidence),
                "validated_count": validated,
                "contradicted_count": contradicted,
            },
        )
        return True

    async def discard(self, agent_id: str, memory_id: str) -> bool:
        """Remove a withdrawn (retracted) copy's remains, so a new share writes it
        afresh (term counts, flags and all); False when there is no such copy."""
        key = await self._owned(agent_id, memory_id)
        if key is None or text_of(await self._redis.hget(key, "deleted") or b"0") != "1":
            return False
        await self._redis.delete(key, self._keys.usage(agent_id, memory_id))
        return True

    async def credit(self, agent_id: str, memory_id: str, *, success: bool) -> bool:
        key = await self._owned(agent_id, memory_id)
        if key is None:
            return False
        await self._redis.hincrby(key, CLADE_VALIDATED if success else CLADE_CONTRADICTED, 1)
        return True
