"""The reference `ConfigStore`: a dict, keeping nothing for the defaults."""

from __future__ import annotations

from collections.abc import Sequence

from grimoire.streams.config.agent_config import AgentConfig

__all__ = ["InMemoryConfigStore", "InMemoryDefaultConfig"]


class InMemoryConfigStore:
    def __init__(self) -> None:
        self.configs: dict[str, AgentConfig] = {}

    async def load(self, agent_ids: Sequence[str]) -> dict[str, AgentConfig]:
        return {a: self.configs.get(a, AgentConfig()) for a in agent_ids}

    async def save(self, agent_id: str, config: AgentConfig) -> None:
        if config == AgentConfig():
            self.configs.pop(agent_id, None)
        else:
            self.configs[agent_id] = config


class InMemoryDefaultConfig:
    def __init__(self, config: AgentConfig | None = None) -> None:
        self.config = config or AgentConfig()

    async def load(self) -> AgentConfig:
        return self.config

    async def save(self, config: AgentConfig) -> None:
        self.config = config
