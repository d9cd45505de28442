"""What the maintenance handler and its tasks read and schedule through: the
agents' field states and counts, the decay outlook, the load probe, the task
runners."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from grimoire.streams.maintenance.schedule import (
        DecayOutlook,
        MaintenancePlan,
        PressureSignals,
    )
    from grimoire.streams.model.field_state import FieldState

__all__ = [
    "CountEstimates",
    "DecayOutlooks",
    "DecayScheduler",
    "FieldStates",
    "LiveCount",
    "PressureProbe",
    "Reschedule",
    "TaskRunner",
]


class TaskRunner(Protocol):
    """Runs one maintenance task for an agent as of `plan.as_of_ms`; returns its
    report (JSON-able numbers and strings)."""

    async def __call__(self, plan: MaintenancePlan) -> Mapping[str, Any]: ...


class PressureProbe(Protocol):
    def signals(self) -> PressureSignals: ...


class FieldStates(Protocol):
    """Where the agent's tick and watermark come from (the memory store)."""

    async def load_fields(self, agent_ids: Sequence[str]) -> dict[str, FieldState]: ...


class LiveCount(Protocol):
    async def __call__(self, agent_id: str) -> int: ...


class DecayOutlooks(Protocol):
    """Where the agent's decay schedule is seen at a glance (the decay store)."""

    async def outlook(self, agent_ids: Sequence[str]) -> dict[str, DecayOutlook]: ...


class CountEstimates(Protocol):
    """Memory counts for many agents at once, never below the live count (the
    memory store's `estimated_counts`)."""

    async def estimated_counts(self, agent_ids: Sequence[str]) -> dict[str, int]: ...


class DecayScheduler(Protocol):
    """Where new memories get their decay scheduled (`DecayIndex.reschedule`)."""

    async def reschedule(self, agent_id: str, memory_ids: Sequence[str], now_ms: int) -> None: ...


class Reschedule(Protocol):
    """Recomputes the decay due times of memories whose stored fields changed
    (`DecayStore.reschedule`)."""

    async def __call__(self, agent_id: str, memory_ids: Sequence[str], now_ms: int) -> None: ...
