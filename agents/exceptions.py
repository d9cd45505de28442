"""Errors raised by the handler layer (grimoire.agents)."""

from __future__ import annotations

from grimoire.streams.exceptions import GrimoireError

__all__ = ["AgentsError", "PayloadUnreadable"]


class AgentsError(GrimoireError):
    """Root of the handler layer's errors."""


class PayloadUnreadable(AgentsError):
    """A sealed journal payload cannot be opened: its agent was forgotten (the key is
    gone), it was sealed with another key, or its bytes or their binding (agent, key,
    position) were altered. Carries a machine-readable reason for the dead letter."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
