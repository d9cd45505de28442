"""What the command handler drives: retraction, import and forgetting, each a port
so the command rule runs against the Redis stores in the worker and stand-ins in
unit tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from grimoire.agents.handlers.retraction import RetractionReport
    from grimoire.streams.exchange.chunks import ImportChunk
    from grimoire.tables.trust.erasure import Erasure

__all__ = ["AgentEraser", "Eraser", "Importer", "Retractor"]


class Retractor(Protocol):
    async def retract(self, agent_id: str, source_event_id: str, *, at_ms: int) -> RetractionReport:
        """Retract the source event's memory and everything derived from it."""
        ...

    async def pin(self, agent_id: str, memory_id: str) -> bool: ...

    async def unpin(self, agent_id: str, memory_id: str) -> bool: ...


class Importer(Protocol):
    async def apply_chunk(
        self, agent_id: str, chunk: ImportChunk
    ) -> tuple[str, Sequence[str], Any]:
        """Write one import chunk once (agents/handlers/importing.py); its witness
        summary."""
        ...


class Eraser(Protocol):
    async def forget(self, agent_id: str) -> int:
        """Erase every stored key of the agent and destroy its journal keys; how
        many keys were removed."""
        ...


class AgentEraser(Protocol):
    async def erase(self, agent_id: str) -> Erasure:
        """Delete everything the store holds of the agent (its state, its marks),
        but its journal keys."""
        ...

    async def compact(self) -> None:
        """Make what was erased (the journal keys included) leave the store's
        files on disk as well."""
        ...
