"""The concrete maintenance tasks behind the handler's runners (decay, curator,
compaction), each built on its Redis store and adapted to `TaskRunner`."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from grimoire.streams.maintenance.schedule import MaintenancePlan
from grimoire.tables.maintenance.curator_store import RedisCuratorStore
from grimoire.tables.maintenance.decay_index import DecayStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CuratorRunner:
    """One curator cycle (numbered by the tick, so a replay numbers it alike); its
    votes and new entries change confidences, so their decay is rescheduled."""

    curator: RedisCuratorStore
    decay: DecayStore

    async def __call__(self, plan: MaintenancePlan) -> Mapping[str, Any]:
        report = await self.curator.run_cycle(plan.agent_id, plan.as_of_ms, plan.curator_cycle)
        entries = await self.curator.entries(plan.agent_id)
        await self.decay.reschedule(
            plan.agent_id, [entry.memory_id for entry in entries], plan.as_of_ms
        )
        body: dict[str, Any] = orjson.loads(report.event_json())
        body.pop("type", None)
        body.pop("agent_id", None)
        return body
