"""What the maintenance tasks' tests build: the memories a decay pass or a compaction
reads, the plan a decay pass runs under, and a checkpoint hook that crashes compaction.

- ``decaying_record``: memory ``memory_id`` as the decay tests write it.
- ``decay_plan``: a maintenance plan with the decay task alone.
- ``ops_episode``: episode ``n`` of session ``s-1``, tagged ``ops/memory``, as the
  compaction tests write it.
- ``Crash`` / ``CrashAt``: a compaction checkpoint hook that raises at chosen phases.
- ``compacted_summary``: one compaction of what is a week old, and the summary it wrote.
"""

from __future__ import annotations

from grimoire.agents.maintenance.compaction_task import CompactionTask, Embed
from grimoire.streams.maintenance.compaction import DAY_MS, CompactionPolicy
from grimoire.streams.maintenance.schedule import MaintenancePlan, Pressure, Task
from grimoire.streams.model.records import Kind, MemoryRecord
from grimoire.tables.ports.maintenance import CompactionStore

from .builders import memory_candidate, memory_record
from .vectors import Vector, axis_unit


def decaying_record(
    agent: str,
    memory_id: str,
    *,
    ts: int,
    kind: Kind = Kind.EPISODE,
    confidence: float = 0.8,
    dims: int = 8,
) -> MemoryRecord:
    """Observation ``memory {memory_id}`` of event ``evt-<memory_id>`` at ``ts``, with the
    id ``memory_id`` itself, quality 0.5 and one vector (axis 0), no eidolon."""
    text = f"memory {memory_id}"
    candidate = memory_candidate(agent, f"evt-{memory_id}", text, ts=ts, kind=kind, id=memory_id)
    return memory_record(
        candidate, axis_unit(0, dims), eidolon=b"", confidence=confidence, quality=0.5
    )


def decay_plan(agent: str, as_of_ms: int) -> MaintenancePlan:
    """Block 1's plan for ``agent`` at ``as_of_ms``: the decay task alone, no pressure."""
    return MaintenancePlan(agent, 1, as_of_ms, Pressure.NORMAL, (Task.DECAY,), (), 0)


def ops_episode(
    agent: str,
    n: int,
    text: str,
    ts: int,
    keys: tuple[str, ...],
    vector: Vector | bytes,
    *,
    kind: Kind = Kind.EPISODE,
    quarantined: bool = False,
) -> MemoryRecord:
    """Observation ``text`` of event ``ev-<n>`` in session ``s-1``, tagged ``ops/memory``
    and on ``keys``, quality 0.4, ``vector`` on both lanes."""
    candidate = memory_candidate(
        agent, f"ev-{n}", text, ts=ts, kind=kind, session_id="s-1", tags=("ops/memory",), keys=keys
    )
    return memory_record(candidate, vector, quality=0.4, quarantined=quarantined)


class Crash(Exception):
    pass


class CrashAt:
    """A checkpoint hook that raises ``Crash`` at each listed phase once, in order, and
    keeps every phase it was called at in ``seen``."""

    def __init__(self, *phases: str) -> None:
        self.pending = list(phases)
        self.seen: list[str] = []

    async def __call__(self, phase: str) -> None:
        self.seen.append(phase)
        if self.pending and phase == self.pending[0]:
            self.pending.pop(0)
            raise Crash(phase)


async def compacted_summary(store: CompactionStore, embed: Embed, agent: str, now: int) -> str:
    """Compact ``agent`` at ``now`` (what is at least 7 days old) and return the one
    summary written."""
    policy = CompactionPolicy(min_age_ms=7 * DAY_MS)
    report = await CompactionTask(store, embed, policy).compact(agent, now)
    (summary,) = report.summary_ids
    return summary
