"""Marks that send a curated entry to the curator's next cycle, queued by the
writers that change one outside a cycle.

The curator looks only at the entries due in its schedule (`Keyspace.curator_due`,
see `grimoire.streams.learn.curator.schedule`), so whatever writes an entry's
confidence, strength, decay origin or status between cycles marks it due at
`LOOK_NOW`, in the writer's own transaction:

- the write path, for a new live insight, heuristic or warning (`queue_new`,
  from `DecayIndex.schedule_new`), and an import for a successor's inherited ones;
- usage accounting (recall moved `last_accessed`), outcomes and credits, and a
  retraction's demotion (`queue_changed`).

`queue_changed` is a ZADD XX LT: ids that are not in the schedule (episodes, other
kinds, entries archived or never seen) are left out, so a writer need not know
which of its ids are curated entries, and an entry already due stays as due.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Final

from grimoire.streams.learn.curator.schedule import LOOK_NOW
from grimoire.streams.learn.curator.values import CURATED_KINDS
from grimoire.streams.learn.evidence import EVIDENCE_EVENT_TYPE
from grimoire.tables.codec.hash_values import stored_text
from grimoire.tables.keyspace import Keyspace

__all__ = ["is_new_curated", "queue_changed", "queue_new"]

logger = logging.getLogger(__name__)

_CURATED: Final = frozenset(kind.value for kind in CURATED_KINDS)
_NOT_LIVE: Final = ("deleted", "archived", "quarantined")


def queue_changed(pipe: Any, keys: Keyspace, agent_id: str, memory_ids: Iterable[str]) -> None:
    """Queue on `pipe`: the agent's scheduled entries among `memory_ids` are due at
    the next cycle."""
    ids = dict.fromkeys(memory_ids)
    if ids:
        pipe.zadd(keys.curator_due(agent_id), dict.fromkeys(ids, LOOK_NOW), xx=True, lt=True)


def is_new_curated(fields: Mapping[str, Any]) -> bool:
    """Whether a freshly written memory hash is a live curated entry. An evidence
    entry (or a sibling's copy of one) is an insight the fold keeps as a count:
    the curator never looks at it (nor votes, promotes or archives it)."""
    return (
        stored_text(fields.get("kind")) in _CURATED
        and stored_text(fields.get("event_type")) != EVIDENCE_EVENT_TYPE
        and not any(stored_text(fields.get(flag)) == "1" for flag in _NOT_LIVE)
    )


def queue_new(pipe: Any, keys: Keyspace, fields: Mapping[str, Any]) -> None:
    """Queue on `pipe`: a freshly written live curated entry (its `hash_fields`) is
    due at the next cycle (ZADD LT: added, or moved up if already scheduled)."""
    if not is_new_curated(fields):
        return
    agent_id, memory_id = stored_text(fields.get("agent_id")), stored_text(fields.get("memory_id"))
    if agent_id and memory_id:
        pipe.zadd(keys.curator_due(agent_id), {memory_id: LOOK_NOW}, lt=True)
