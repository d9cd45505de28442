"""The concrete maintenance tasks behind the handler's runners (decay, curator,
compaction), each built on its Redis store and adapted to `TaskRunner`."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from grimoire.agents.maintenance import TaskRunner
from grimoire.infra.settings import Settings
from grimoire.streams.maintenance import MaintenancePlan, Task
from grimoire.tables.decay_index import DecayIndex
from grimoire.tables.memory_store import RedisMemoryStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DecayRunner:
    """One bounded pass over the entries whose decay band changes by `as_of`."""

    index: DecayIndex
    limit: int

    async def __call__(self, plan: MaintenancePlan) -> Mapping[str, Any]:
        report = await self.index.run_pass(plan.agent_id, plan.as_of_ms, self.limit)
        return {
            "entries_decayed": report.entries_decayed,
            "avg_before": round(report.avg_before, 6),
            "avg_after": round(report.avg_after, 6),
        }


def build_runners(
    redis: Redis, store: RedisMemoryStore, embedder: Any, settings: Settings
) -> Mapping[Task, TaskRunner]:
    return {
        Task.DECAY: DecayRunner(store.decay, settings.maintenance_decay_pass_limit),
    }
