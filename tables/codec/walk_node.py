"""The node table (`Keyspace.nodes`): each memory packed as the walk reads it, and a
worker-wide cache of decoded entries.

A walk reads about 450 nodes per query, and building each `NodeInfo` (split,
parse, construct) cost more client CPU than Redis spent serving it. Most of them
are the newest members of the same busy keys from one query to the next (about
85 % of the entries a bench run decodes were decoded before), so decoded
entries are kept, keyed by the entry's exact bytes: a rewritten entry is a
different key, so the cache can miss but never answer stale.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from typing import Any, Final

from grimoire.streams.recall.walk.daimoi import NodeInfo
from grimoire.tables.codec.hash_values import stored_list, stored_number, text_of

# The memory-hash fields a walk node is packed from, in packed order (the node
# table's entry: these values joined by NODE_SEPARATOR, written by graph's script).
WALK_NODE_FIELDS: Final = (
    "kind",
    "nexus_keys",
    "ts",
    "importance",
    "deleted",
    "quarantined",
    "archived",
    "replaced_by_summary_id",
    "actor_id",
)
NODE_SEPARATOR: Final = "\x1f"
DEFAULT_CAPACITY: Final = 50_000
_UNPACKABLE: Final = object()


class DecodedNodes:
    """Decoded node-table entries, shared by every request of one worker.

    Bounded: past `capacity` entries the oldest tenth is dropped, so a worker's
    memory stays flat however many agents and memories it serves (about 60 MB
    at the default, with six keys a node)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self._capacity = capacity
        self._entries: dict[tuple[str, bytes | str], object] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def node(self, memory_id: str, raw: bytes | str) -> NodeInfo | None:
        """`unpack_node` of one entry, decoded once per distinct entry."""
        entry = (memory_id, raw)
        found = self._entries.get(entry)
        if found is None:
            node = unpack_node(memory_id, raw)
            found = _UNPACKABLE if node is None else node
            if self._capacity:
                if len(self._entries) >= self._capacity:
                    for stale in list(islice(self._entries, max(1, self._capacity // 10))):
                        del self._entries[stale]
                self._entries[entry] = found
        return None if found is _UNPACKABLE else found  # type: ignore[return-value]


def unpack_node(memory_id: str, raw: Any) -> NodeInfo | None:
    """A node-table entry (`graph.WALK_NODE_FIELDS` joined by `NODE_SEPARATOR`);
    None when it does not unpack, so the caller reads the memory hash instead."""
    parts = text_of(raw).split(NODE_SEPARATOR)
    if len(parts) != len(WALK_NODE_FIELDS):
        return None
    return walk_node(memory_id, parts)


def walk_node(memory_id: str, fields: Sequence[str]) -> NodeInfo:
    """The walk's node from `graph.WALK_NODE_FIELDS` values ("" when unset), by
    position: the walk reads hundreds per query, so no record is built."""
    kind, keys, ts, importance, deleted, quarantined, archived, replaced_by, actor = fields
    return NodeInfo(
        memory_id=memory_id,
        kind=kind,
        keys=stored_list(keys),
        ts_ms=int(stored_number(ts, 0.0)),
        utility=stored_number(importance, 0.5),
        deleted=(deleted == "1" and not replaced_by) or quarantined == "1" or archived == "1",
        replaced_by=replaced_by,
        actor=actor,
    )


# The memory-hash fields a walk node is packed from, in packed order.
