"""What the Faust agents need from the composition root, and where dead letters
are counted."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from grimoire.agents.faust_agents import Handlers

__all__ = ["DeadLetterTally", "HandlerSource"]


class HandlerSource(Protocol):
    """What the Faust agents need from the composition root: the handlers (built
    lazily, on first use) and the agents the block timer fans commands out to."""

    worker_id: str

    async def handlers(self) -> Handlers: ...

    def pressure(self) -> str:
        """This worker's load (normal | throttled | paused), stamped on the
        maintenance commands its block timer issues."""
        ...

    async def catch_up(self, partition: int, first_offset: int) -> None:
        """Before a journal partition's first batch since it was assigned: fold
        again what the store lost of the entries before `first_offset`."""
        ...

    async def applied_through(self, offsets: Mapping[int, int]) -> None:
        """Record each journal partition's last offset of a batch folded."""
        ...

    async def recover(self, failure: BaseException, journal_partitions: list[int]) -> None:
        """After a failed apply: when the store was lost (Redis came back empty),
        recreate it and fold `journal_partitions` again from their start."""
        ...

    def known_agents(self) -> AsyncIterator[tuple[str, int]]:
        """Every agent with an event ingested, and its watermark (event time, ms)."""
        ...

    async def maintenance_wanted(self, agent_ids: Sequence[str]) -> list[str]:
        """Those of `agent_ids` a maintenance command would find something due for."""
        ...


class DeadLetterTally(Protocol):
    async def count(self, reason: str) -> None: ...
