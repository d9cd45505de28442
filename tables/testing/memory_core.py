"""The in-memory memory store's shared state (`InMemoryMemoryCore`) and the base of
each concern's class (`InMemoryMemoryConcern`), as `grimoire.tables.memory.core` is
for Redis: every concern of a twin is built over one core, so all of them read and
write the same hashes, links and marks.

Records are kept as the flat hash Redis would hold (values encoded the way
redis-py encodes them: str, or bytes for vectors), so field-level behaviour
(HSET overwrites, the aggregate fold and reinforce scripts, tag filters on
"deleted"/"quarantined") is the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from grimoire.streams.learn.outcomes import Outcome
from grimoire.streams.model.field_state import FieldState
from grimoire.streams.model.records import HyperedgeRef
from grimoire.streams.ports.recall import RecallSource
from grimoire.streams.write.changes import StateVector
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.testing.decay_store import InMemoryDecayStore
from grimoire.tables.testing.recall_source import InMemoryRecallSource

__all__ = ["Hash", "InMemoryMemoryConcern", "InMemoryMemoryCore", "encoded", "encoded_value"]

Hash = dict[str, str | bytes]


def encoded_value(value: Any) -> str | bytes:
    """A value as Redis stores it (redis-py writes numbers with repr, bytes as-is)."""
    if isinstance(value, bytes | str):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"cannot store {type(value).__name__} in a hash")
    return repr(value)


def encoded(fields: Mapping[str, Any]) -> Hash:
    return {name: encoded_value(value) for name, value in fields.items()}


class InMemoryMemoryCore:
    """What the Redis keyspace holds for the memory store, as plain dicts, with the
    keyspace writes the concerns and the maintenance stores share.

    Memory and usage hashes are keyed by memory id alone, where the Redis keys also
    name the agent: a memory's owner is its hash's `agent_id` field, which the reads
    that need one check. Every other structure is per agent.
    """

    def __init__(self, *, clock_ms: Callable[[], int] | None = None, dims: int = 384) -> None:
        self.clock_ms = clock_ms
        self.dims = dims
        self.records: dict[str, Hash] = {}
        self.usage_hashes: dict[str, Hash] = {}
        self.links: dict[tuple[str, str], dict[str, int]] = {}  # (agent, nexus key) -> id -> ts
        self.hyperedges: dict[tuple[str, str], dict[str, str]] = {}  # (agent, edge) -> id -> role
        self.decided: dict[str, dict[str, str]] = {}
        self.fields: dict[str, FieldState] = {}
        self.state_vectors: dict[str, StateVector] = {}
        self.watermarks: dict[str, int] = {}
        self.contrarian: dict[str, int] = {}
        self.usage_applied: dict[str, set[int]] = {}
        self.usage_requests: dict[str, dict[str, int]] = {}  # agent -> request -> seq
        self.agent_stats: dict[str, dict[str, float]] = {}
        self.metrics: dict[str, float] = {}
        self.applied_outcomes: dict[str, set[str]] = {}
        self.held: dict[str, dict[str, list[Outcome]]] = {}
        self.actors: dict[str, set[str]] = {}
        # The decay schedule the write path and outcomes keep, as RedisMemoryCore.decay.
        self.decay = InMemoryDecayStore(self)

    # ---- the hashes as HGETALL reads them (`MemoryHashes`) ------------------------

    def hashes(self) -> list[Hash]:
        return list(self.records.values())

    def record(self, memory_id: str) -> Hash | None:
        """A copy of the record's hash, as HGETALL would return it (str keys)."""
        doc = self.records.get(memory_id)
        return dict(doc) if doc is not None else None

    def usage(self, memory_id: str) -> Hash:
        return dict(self.usage_hashes.get(memory_id, {}))

    def live(self, agent_id: str) -> list[Hash]:
        """The agent's hashes the index's live filter keeps."""
        return [
            doc
            for doc in self.records.values()
            if text_of(doc.get("agent_id", "")) == agent_id
            and text_of(doc.get("deleted", "")) != "1"
            and text_of(doc.get("quarantined", "")) != "1"
            and text_of(doc.get("archived", "")) != "1"
        ]

    # ---- keyspace writes ----------------------------------------------------------
    # (HSET on a memory or usage hash, ZADD into the nexus index: the write path
    # makes them, and RedisCuratorStore and RedisCompactionStore write those keys
    # directly, so their in-memory references write them here.)

    def stored_hash(self, memory_id: str) -> Hash | None:
        """The stored memory hash itself (not a copy): writes to it are HSETs."""
        return self.records.get(memory_id)

    def put_fields(self, memory_id: str, fields: Mapping[str, Any]) -> None:
        self.records.setdefault(memory_id, {}).update(encoded(fields))

    def put_usage(self, memory_id: str, fields: Mapping[str, Any]) -> None:
        self.usage_hashes.setdefault(memory_id, {}).update(encoded(fields))

    def link(
        self,
        agent_id: str,
        memory_id: str,
        ts_ms: int,
        keys: Sequence[str],
        *,
        latest: bool = False,
    ) -> None:
        for key in keys:  # ZADD: the latest write sets the score; ZADD GT only raises it
            members = self.links.setdefault((agent_id, key), {})
            if latest and memory_id in members:
                members[memory_id] = max(members[memory_id], ts_ms)
            else:
                members[memory_id] = ts_ms

    def join(self, agent_id: str, edge: HyperedgeRef, member: str) -> None:
        """A member joins a hyperedge, keeping a role it has there (HSETNX)."""
        self.hyperedges.setdefault((agent_id, edge.edge_id), {}).setdefault(member, str(edge.role))

    def touch(self, memory_id: str, as_of_ms: int) -> None:
        """The usage-accounting script's effect on the memory's usage hash."""
        usage = self.usage_hashes.setdefault(memory_id, {})
        total = int(text_of(usage.get("included_count_total", "0"))) + 1
        usage["included_count_total"] = str(total)
        decayed = float(text_of(usage.get("included_count_decay", "0"))) + 1
        usage["included_count_decay"] = repr(decayed)
        if float(text_of(usage.get("last_accessed", "0"))) < as_of_ms:
            usage["last_accessed"] = str(as_of_ms)

    def count(self, agent_id: str, counters: Sequence[tuple[str, float]]) -> None:
        """HINCRBYFLOAT on the agent's stats hash, one counter at a time."""
        stats = self.agent_stats.setdefault(agent_id, {})
        for name, amount in counters:
            stats[name] = stats.get(name, 0.0) + amount

    # ---- the graph as recall's walk reads it ------------------------------------

    async def degrees(self, agent_id: str, keys: Sequence[str]) -> dict[str, int]:
        return {key: len(self.links.get((agent_id, key), {})) for key in keys}

    async def newest(self, agent_id: str, key: str, limit: int) -> list[str]:
        members = self.links.get((agent_id, key), {})
        ranked = sorted(members.items(), key=lambda item: (item[1], item[0]), reverse=True)
        return [memory_id for memory_id, _ in ranked[: max(limit, 0)]]

    async def nexus(self, agent_id: str, key: str) -> dict[str, int]:
        return dict(self.links.get((agent_id, key), {}))

    async def hyperedge(self, agent_id: str, edge_id: str) -> dict[str, str]:
        return dict(self.hyperedges.get((agent_id, edge_id), {}))


class InMemoryMemoryConcern:
    """The base of each concern's class: its core, and what several ports share,
    each agent's field state (`FieldReads`) and an agent's recall source."""

    def __init__(self, core: InMemoryMemoryCore) -> None:
        self.core = core

    async def load_fields(self, agent_ids: Sequence[str]) -> dict[str, FieldState]:
        return {a: self.core.fields.get(a, FieldState(agent_id=a)) for a in agent_ids}

    def recall_source(self, agent_id: str) -> RecallSource:
        """A read view bound to one agent, over the core's hashes and graph."""
        return InMemoryRecallSource(self.core, agent_id, self.core.dims)
