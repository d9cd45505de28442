"""The decay task: read what is due, plan it with the pure planner, write the plan.

The store only stores (`grimoire.tables.maintenance.decay_index.DecayStore`);
which snapshot and next due time each entry gets is decided here by
`grimoire.streams.maintenance.decay_pass.plan_decay_pass`, the way the ingest
handler plans a batch and commits it through the memory store.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from grimoire.streams.maintenance.decay_pass import DecayPassPlan, plan_decay_pass
from grimoire.streams.maintenance.schedule import MaintenancePlan
from grimoire.tables.ports.maintenance import DecayStore

__all__ = ["DEFAULT_PASS_LIMIT", "DecayRunner", "decay_pass"]

logger = logging.getLogger(__name__)

# The per-tick budget: entries past it stay due in the schedule (the stored ZSET,
# oldest due first) and the next pass takes them, so a pass's cost is bounded
# whatever the store's size, and which entries a pass takes depends only on
# stored state. An agent writing ~4 memories a block crosses ~12 bands a tick at
# most; a backlog (an import, a seed) drains at this rate, and since effective
# confidence is computed on read, a snapshot that lags changes no answer.
DEFAULT_PASS_LIMIT: Final = 64


async def decay_pass(
    store: DecayStore, agent_id: str, as_of_ms: int, limit: int = DEFAULT_PASS_LIMIT
) -> DecayPassPlan:
    """Snapshot up to `limit` due entries (oldest due first) and reschedule them.

    Entries left over past `limit` stay due and are taken by the next pass. The
    plan uses the store's bands and policy: the schedule was computed with them.
    """
    due = await store.due(agent_id, as_of_ms, limit)
    plan = plan_decay_pass(due.entries, as_of_ms, store.bands, store.policy)
    await store.apply_pass(agent_id, as_of_ms, plan, gone=due.gone)
    logger.debug(
        "decay pass %s at %d: %d updated, %d dropped",
        agent_id,
        as_of_ms,
        len(plan.updates),
        len(due.gone) + len(plan.invalid),
    )
    return plan


@dataclass(frozen=True, slots=True)
class DecayRunner:
    """One bounded pass over the entries whose decay band changes by `as_of`
    (seeding the agent's schedule first if it never was)."""

    store: DecayStore
    limit: int = DEFAULT_PASS_LIMIT

    async def __call__(self, plan: MaintenancePlan) -> Mapping[str, Any]:
        seeded = await self.store.ensure_seeded(plan.agent_id, plan.as_of_ms)
        report = (await decay_pass(self.store, plan.agent_id, plan.as_of_ms, self.limit)).report
        return {
            "seeded": seeded or 0,
            "entries_decayed": report.entries_decayed,
            "avg_before": round(report.avg_before, 6),
            "avg_after": round(report.avg_after, 6),
        }
