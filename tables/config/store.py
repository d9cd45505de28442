"""Agents' runtime configurations (`Keyspace.agent_config`): written by the fold
when a `configure` command is applied, read by ingest and recall.

Part of the fold: a wipe and replay rebuild them in place, and forgetting an agent
erases its configuration with the rest of it.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from grimoire.streams.config.agent_config import AgentConfig
from grimoire.tables.codec.agent_config import decode_agent_config, encode_agent_config
from grimoire.tables.keyspace import Keyspace

__all__ = ["RedisConfigStore", "RedisDefaultConfig"]


class RedisConfigStore:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self.keys = Keyspace(prefix)

    async def load(self, agent_ids: Sequence[str]) -> dict[str, AgentConfig]:
        if not agent_ids:
            return {}
        stored = await self._redis.mget([self.keys.agent_config(a) for a in agent_ids])
        return {
            agent_id: decode_agent_config(raw)
            for agent_id, raw in zip(agent_ids, stored, strict=True)
        }

    async def save(self, agent_id: str, config: AgentConfig) -> None:
        key = self.keys.agent_config(agent_id)
        if config == AgentConfig():
            await self._redis.delete(key)  # the defaults are stored as nothing
        else:
            await self._redis.set(key, encode_agent_config(config))


class RedisDefaultConfig:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._key = Keyspace(prefix).default_config

    async def load(self) -> AgentConfig:
        return decode_agent_config(await self._redis.get(self._key))

    async def save(self, config: AgentConfig) -> None:
        if config == AgentConfig():
            await self._redis.delete(self._key)
        else:
            await self._redis.set(self._key, encode_agent_config(config))
