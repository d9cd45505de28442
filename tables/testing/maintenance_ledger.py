"""The reference `MaintenanceLedger`: plain dicts with MaintenanceLedgerStore's
semantics (forward-only entries, a lease that expires, completions as strings),
for handler tests without services. Run by the same contract suite as the Redis
one (tests/integration/test_ledger_contract.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from grimoire.streams.maintenance.schedule import Ledger, Task

__all__ = ["InMemoryMaintenanceLedger"]


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class InMemoryMaintenanceLedger:
    def __init__(self, *, clock_ms: Callable[[], int] = _monotonic_ms) -> None:
        # A lease is operational (who runs now), never an input to a decision, so
        # it may expire on a clock; the tests pass one they control.
        self._clock_ms = clock_ms
        self._leases: dict[str, tuple[str, int]] = {}
        self._ledgers: dict[str, Ledger] = {}
        self._history: dict[str, list[dict[str, str]]] = {}

    async def acquire(self, agent_id: str, holder: str, lease_ms: int) -> bool:
        now = self._clock_ms()
        held = self._leases.get(agent_id)
        if held is not None and held[1] > now:
            return False
        self._leases[agent_id] = (holder, now + lease_ms)
        return True

    async def release(self, agent_id: str, holder: str) -> None:
        held = self._leases.get(agent_id)
        if held is not None and held[0] == holder:
            del self._leases[agent_id]

    async def ledger(self, agent_id: str) -> Ledger:
        return self._ledgers.get(agent_id, Ledger())

    async def ledgers(self, agent_ids: Sequence[str]) -> dict[str, Ledger]:
        return {agent_id: await self.ledger(agent_id) for agent_id in agent_ids}

    async def complete(
        self, agent_id: str, task: Task, tick: int, holder: str, detail: Mapping[str, Any]
    ) -> bool:
        ledger = self._ledgers.get(agent_id, Ledger())
        last = ledger.last(task)
        if last is not None and last >= tick:
            return False
        self._ledgers[agent_id] = replace(ledger, **{task.value: tick})
        entry = {"task": task.value, "tick": str(tick), "worker": holder}
        entry.update({k: str(v) for k, v in detail.items()})
        self._history.setdefault(agent_id, []).append(entry)
        return True

    async def history(self, agent_id: str) -> list[dict[str, str]]:
        return [dict(entry) for entry in self._history.get(agent_id, [])]
