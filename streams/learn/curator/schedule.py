"""When the curator next has to look at an entry, and where it finds the entries a
cycle's episodes vote on: what makes a cycle's work follow what changed rather
than how many entries the agent holds.

A cycle's decision about an entry it does not vote on (`plan._Cycle.transition`)
depends only on the entry's effective confidence against three levels (promote,
demote below 0.4, the low counter below 0.1), its status, its low counter and
its pin. Effective confidence is `max(floor, confidence · 2^(-Δt/…))`: between
two writes to the entry it only falls, so

- an entry that was not promoted at its last look is not promoted later unless
  something writes it (a vote, an outcome, an access, a retraction);
- a demotion, or the first cycle below 0.1, happens at the first cycle whose
  event time is past the moment the curve crosses that level, which has a
  closed form (`decay_pass.next_crossing_ms`);
- below 0.1 the entry changes every cycle (its counter runs to the archive)
  until it is archived; an exempt entry (warning, bloodstain) is never
  archived, so once its counter reached `prune_after_cycles` nothing about it
  changes any more.

`next_look_ms` gives that moment; the stores keep it per entry
(`Keyspace.curator_due`) and every writer of an entry's confidence, decay
origin or liveness marks the entry due at once (`LOOK_NOW`). A cycle then reads
the entries due by its time, the entries its episodes' situations name
(`signature_key`, `Keyspace.curator_signatures`) and the playbook, never the
rest: their decisions would not change.

Everything here is a function of its arguments (event times in ms), so a replay
schedules identically.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Final

from grimoire.streams.learn.curator.values import CuratedEntry, CuratorPolicy, EntryStatus
from grimoire.streams.maintenance.decay_pass import (
    DecayBands,
    DecayEntry,
    effective_now,
    next_crossing_ms,
)
from grimoire.streams.model.records import Kind

__all__ = [
    "LOOK_NOW",
    "NO_LOOK_MS",
    "SIGNATURE_KINDS",
    "effective",
    "next_look_ms",
    "signature_key",
    "signature_keys",
    "signature_member",
    "split_signature_member",
]

logger = logging.getLogger(__name__)

# The due time of an entry something just changed: before any cycle's event time.
LOOK_NOW: Final = 0
# "No look until something changes the entry": kept in the schedule (so a write can
# still mark it due) at a finite score an export can write as a JSON number.
NO_LOOK_MS: Final = 2**53
# The kinds a cluster's signature finds (`plan._Cycle.by_signature`).
SIGNATURE_KINDS: Final = (Kind.INSIGHT, Kind.HEURISTIC)
_SEP: Final = "|"


def signature_key(kind: Kind, signature: str) -> str:
    """The index's prefix for one situation's entries of one kind."""
    return f"{kind.value}{_SEP}{signature}{_SEP}"


def signature_member(entry: CuratedEntry) -> str | None:
    """The entry's member in the signature index (None: it has no signature)."""
    if not entry.signature or entry.kind not in SIGNATURE_KINDS:
        return None
    return signature_key(entry.kind, entry.signature) + entry.memory_id


def split_signature_member(member: str) -> tuple[str, str]:
    """(the member's signature, its memory id)."""
    _kind, signature, memory_id = member.split(_SEP, 2)
    return signature, memory_id


def signature_keys(signatures: Iterable[str]) -> list[str]:
    """Every index prefix a cycle resolves for these situations, sorted."""
    return sorted(
        {signature_key(kind, sig) for sig in signatures if sig for kind in SIGNATURE_KINDS}
    )


def _levels(entry: CuratedEntry, policy: CuratorPolicy) -> tuple[float, ...]:
    """The levels whose crossing changes what a cycle decides about the entry."""
    levels = {policy.prune_below}
    if entry.status in (EntryStatus.ACTIVE, EntryStatus.PLAYBOOK):
        levels.add(policy.demote_below)
    return tuple(sorted((lvl for lvl in levels if lvl > policy.decay.floor), reverse=True))


def effective(entry: CuratedEntry, now_ms: int, policy: CuratorPolicy) -> float:
    """An entry's decayed confidence at `now_ms`, as recall reads it."""
    return effective_now(entry, now_ms, policy.decay)


def next_look_ms(entry: CuratedEntry, now_ms: int, policy: CuratorPolicy) -> int:
    """When a cycle must next look at `entry` as it stands after a cycle at `now_ms`:
    `now_ms` (every cycle) while it is below `prune_below` and its counter can
    still matter, the first moment its curve crosses a level that changes a
    decision, or `NO_LOOK_MS` when none will (until something writes it)."""
    if entry.status is EntryStatus.ARCHIVED:
        return NO_LOOK_MS
    level = effective(entry, now_ms, policy)
    if level < policy.prune_below:
        # A pinned entry keeps counting: an unpin lets the next cycle archive it.
        if policy.exempt(entry) and entry.consecutive_low >= policy.prune_after_cycles:
            return NO_LOOK_MS
        return now_ms
    levels = _levels(entry, policy)
    if not levels:
        return NO_LOOK_MS
    crossing = next_crossing_ms(
        DecayEntry(
            memory_id=entry.memory_id,
            confidence=entry.confidence,
            last_accessed_ms=entry.last_accessed_ms,
            kind=entry.kind.value,
            decay_class=entry.decay_class or None,
            provenance=entry.provenance,
            quality=entry.quality,
            strength=entry.strength,
        ),
        now_ms,
        DecayBands(levels),
        policy.decay,
    )
    return NO_LOOK_MS if crossing is None else min(crossing, NO_LOOK_MS)
