"""An agent's stats as `GET /v1/agents/{agent}/stats` and `grimoire stats` show
them: write-path counters, field state, the maintenance ledger, and the cognitive
metrics with their healthy ranges (`grimoire.infra.http.cognitive`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from redis.asyncio import Redis

from grimoire.infra.http.cognitive import assess
from grimoire.infra.settings import Settings
from grimoire.tables.maintenance.ledger import MaintenanceLedgerStore
from grimoire.tables.memory.agent_state import AgentStateStore, AgentStats
from grimoire.tables.memory.inspect import cognitive_reading

__all__ = ["agent_stats"]


async def agent_stats(
    redis: Redis, prefix: str, agent_id: str, settings: Settings
) -> dict[str, Any]:
    state = AgentStateStore(redis, prefix)
    stats = AgentStats.from_counters(await state.stats(agent_id))
    field = await state.field(agent_id)
    ledger = await MaintenanceLedgerStore(redis, prefix).ledger(agent_id)
    reading = await cognitive_reading(
        redis,
        prefix,
        agent_id,
        window_ms=int(settings.http.cognitive_window_h * 3_600_000),
    )
    return {
        "agent_id": agent_id,
        **asdict(stats),
        "stored": stats.stored,
        "admission_rate": round(stats.admission_rate, 4),
        "average_quality": round(stats.average_quality, 4),
        "watermark_ms": field.watermark_ms,
        "tick": field.tick,
        "regime": field.regime,
        "focus": list(field.digest()),
        "maintenance_ticks": asdict(ledger),
        "live_memories": reading.live,
        "cognitive": assess(reading),
    }
