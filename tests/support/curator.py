"""What the curator's tests build: swap episodes in one situation (what a cycle
distils), curated entries over them, and a cycle that writes new entries.

- ``swap_episode``: swap attempt ``n`` as the write path stores it, its vector
  ``text_unit`` of its text.
- ``curated_entry``: an insight or a playbook heuristic that works in a situation.
- ``new_entries_cycle``: one curator cycle writing given entries as new, playbook and all.
- ``no_reschedule``: a decay rescheduler that does nothing.
- ``first_insight_body``: what the curator task reports of a first cycle that proposes
  the one insight three successful swaps support.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from grimoire.agents.maintenance.curator_task import cycle_playbook
from grimoire.streams.learn.curator.distill import Polarity, Situation
from grimoire.streams.learn.curator.values import (
    DEFAULT_CURATOR_POLICY,
    CuratedEntry,
    CuratorPlan,
    CuratorReport,
    EntryChange,
    EntryStatus,
)
from grimoire.streams.model.records import EventType, Kind, Layer, MemoryRecord, Provenance
from grimoire.tables.maintenance.curator_store import CuratorCycle

from .builders import memory_candidate, memory_record
from .vectors import text_unit

__all__ = [
    "SWAP_KEYS",
    "T0",
    "curated_entry",
    "first_insight_body",
    "new_entries_cycle",
    "no_reschedule",
    "swap_episode",
]

T0 = 1_790_000_000_000
SWAP_KEYS = ("entity:eth", "entity:usdc", "tag:strategy/eth-dca")


def swap_episode(
    agent: str,
    n: int,
    outcome: str,
    *,
    dims: int,
    ts: int | None = None,
    event: str | None = None,
    kind: Kind = Kind.EPISODE,
    text: str | None = None,
    quarantined: bool = False,
) -> MemoryRecord:
    """Swap attempt ``n`` (or ``text``) with its ``outcome``, at ``ts`` (default
    ``T0 + n``), on ``SWAP_KEYS``; its one vector ``text_unit(text, dims)``, no eidolon.
    Its memory id is that of event ``ev-<kind>-<n>`` unless ``event`` names another; its
    provenance is event ``ev-<n>`` of the swap tool."""
    ts = T0 + n if ts is None else ts
    body = text or f"swap ETH for USDC through the router, attempt {n}"
    candidate = memory_candidate(
        agent,
        event or f"ev-{kind.value}-{n}",
        body,
        ts=ts,
        kind=kind,
        layer=Layer.ACTION,
        provenance=Provenance(f"ev-{n}", EventType.EPISODE.value, tool="swap"),
        tick=n,
        regime="calm",
        keys=SWAP_KEYS,
        outcome=outcome,
    )
    return memory_record(candidate, text_unit(body, dims), eidolon=b"", quarantined=quarantined)


def curated_entry(
    memory_id: str,
    kind: Kind,
    status: EntryStatus,
    sources: tuple[str, ...],
    *,
    situation: Situation,
    now: int,
) -> CuratedEntry:
    """An insight ("Tool swap tends to work.", confidence 0.8) or, for any other kind, a
    heuristic ("Prefer tool swap.", 0.9) that works in ``situation``, written 10 ms
    before ``now`` and last used at ``now``, distilled from ``sources``."""
    return CuratedEntry(
        memory_id=memory_id,
        kind=kind,
        text="Tool swap tends to work." if kind is Kind.INSIGHT else "Prefer tool swap.",
        confidence=0.8 if kind is Kind.INSIGHT else 0.9,
        last_accessed_ms=now,
        ts_ms=now - 10,
        status=status,
        signature=situation.signature,
        situation=situation,
        polarity=Polarity.WORKS,
        source_ids=sources,
    )


def new_entries_cycle(
    agent: str, now: int, entries: Sequence[CuratedEntry], vectors: Mapping[str, bytes]
) -> CuratorCycle:
    """Cycle 1 of ``agent`` at ``now``: ``entries`` written as new (their records and
    texts changed), with ``vectors`` by memory id and the playbook the plan renders."""
    changes = tuple(
        EntryChange(e, new=True, record_changed=True, text_changed=True) for e in entries
    )
    plan = CuratorPlan(changes, (), (), CuratorReport(agent, 1, now), now)
    playbook = cycle_playbook(agent, now, plan, (), DEFAULT_CURATOR_POLICY)
    return CuratorCycle(agent, plan, (), vectors, playbook)


async def no_reschedule(agent_id: str, memory_ids: Sequence[str], now_ms: int) -> None:
    return None


def first_insight_body(now: int) -> dict[str, int]:
    """The curator task's report of an agent's first cycle at `now` over three
    successful swap attempts: the one insight they support proposed, nothing else."""
    return {
        "cycle": 1,
        "ts": now,
        "pruned": 0,
        "promoted": 0,
        "proposed": 1,
        "demoted": 0,
        "episodes_seen": 3,
        "entries_seen": 1,
    }
