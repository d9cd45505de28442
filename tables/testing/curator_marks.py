"""The curator's indexes as the in-memory references keep them, beside a memory store.

`RedisCuratorStore` reads and writes `Keyspace.curator_due`, `curator_signatures`
and `curator_playbook`; the memory store's writers (write path, usage, outcomes,
credits) and a retraction's demotion mark entries due there
(`grimoire.tables.maintenance.curator_marks`). Here the same three live in one
`CuratorIndexes` per `InMemoryMemoryStore`'s core, found with `curator_indexes(memory)`
(as the Redis keyspace keeps them beside the memory hashes), so the in-memory
memory, derivation and curator stores mark and read the same one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any
from weakref import WeakKeyDictionary

from grimoire.streams.learn.curator.schedule import LOOK_NOW
from grimoire.tables.codec.hash_values import stored_text
from grimoire.tables.maintenance.curator_marks import is_new_curated

__all__ = ["CuratorIndexes", "curator_indexes"]

logger = logging.getLogger(__name__)


class CuratorIndexes:
    """Per agent: the schedule (id → due ms, a sorted set), the signature index
    (its members) and the playbook index (a set)."""

    def __init__(self) -> None:
        self.due: dict[str, dict[str, int]] = {}
        self.signatures: dict[str, set[str]] = {}
        self.playbook: dict[str, set[str]] = {}

    def changed(self, agent_id: str, memory_ids: Iterable[str]) -> None:
        """`queue_changed`: ZADD XX LT at `LOOK_NOW`."""
        schedule = self.due.get(agent_id, {})
        for memory_id in memory_ids:
            if memory_id in schedule:
                schedule[memory_id] = min(schedule[memory_id], LOOK_NOW)

    def new(self, fields: Mapping[str, Any]) -> None:
        """`queue_new`: ZADD LT at `LOOK_NOW` for a live curated entry."""
        if not is_new_curated(fields):
            return
        agent_id = stored_text(fields.get("agent_id"))
        memory_id = stored_text(fields.get("memory_id"))
        if agent_id and memory_id:
            schedule = self.due.setdefault(agent_id, {})
            schedule[memory_id] = min(schedule.get(memory_id, LOOK_NOW), LOOK_NOW)


_INDEXES: WeakKeyDictionary[Any, CuratorIndexes] = WeakKeyDictionary()


def curator_indexes(memory: Any) -> CuratorIndexes:
    """The indexes kept beside an in-memory memory store (created on first use).

    An in-memory memory store, each of its concerns and the decay store its core
    builds hold one `InMemoryMemoryCore`: keyed by that core, all of them mark and
    read the same indexes. Anything without a core is a keyspace of its own."""
    keyspace = getattr(memory, "core", memory)
    found = _INDEXES.get(keyspace)
    if found is None:
        found = _INDEXES[keyspace] = CuratorIndexes()
    return found
