"""The ports of agents' runtime configuration.

The fold writes each agent's `AgentConfig` when a `configure` command is applied
(`ConfigStore`); the deployment's default, outside the fold, reaches a new agent
as a journal entry (`DefaultConfig`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from grimoire.streams.config.agent_config import AgentConfig

__all__ = ["ConfigStore", "DefaultConfig"]


class ConfigStore(Protocol):
    async def load(self, agent_ids: Sequence[str]) -> dict[str, AgentConfig]:
        """Each agent's configuration (the defaults for one never configured)."""
        ...

    async def save(self, agent_id: str, config: AgentConfig) -> None: ...


class DefaultConfig(Protocol):
    """The deployment's default configuration: outside the fold (in the key store,
    kept by a wipe), it reaches an agent only as a journal entry, the new agent's
    first (and as a `configure` fanned out to the agents there already)."""

    async def load(self) -> AgentConfig: ...

    async def save(self, config: AgentConfig) -> None: ...
