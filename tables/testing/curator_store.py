"""The reference `CuratorStore`: RedisCuratorStore's semantics over plain dicts.

Curated entries are memories: like the Redis store, which writes them into the
memory hashes the memory index searches, this one writes them into an
`InMemoryMemoryStore`'s records (passed in, or its own), so recall over that
store finds them and a cycle reads the episodes its write path stored. Values
are encoded the way redis-py writes them, and the reads return what the
RediSearch queries return (the same fields, the same filters, oldest first).
The curator's own keys (state, bookkeeping, playbook) are dicts here, and its
indexes (schedule, signatures, playbook ids) the `CuratorIndexes` kept beside
the memory store, which that store's writers mark as Redis's do.

Used by unit tests and as the reference the Redis store is checked against in
`tests/integration/test_curator_contract.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from grimoire.streams.learn.curator.distill import EpisodeView
from grimoire.streams.learn.curator.playbook import EvidenceRow
from grimoire.streams.learn.curator.values import (
    CURATED_KINDS,
    CuratedEntry,
    EntryStatus,
    QuarantineAction,
    QuarantinedView,
)
from grimoire.streams.learn.evidence import EVIDENCE_EVENT_TYPE
from grimoire.tables.codec.curator_state import bookkeeping_from_json, bookkeeping_json
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.memory_hash import (
    ENTRY_FIELDS,
    EPISODE_FIELDS,
    EVIDENCE_FIELDS,
    QUARANTINE_FIELDS,
    changed_curated_fields,
    curated_entry,
    curated_fields,
    episode_view,
    evidence_row,
    quarantined_view,
)
from grimoire.tables.maintenance.curator_store import (
    DEFAULT_MAX_EPISODES,
    LOAD_FIELDS,
    MAX_ENTRIES,
    MAX_QUARANTINED,
    CuratorCycle,
    CuratorInputs,
    CuratorState,
    loaded_entry,
    missing_vectors,
)
from grimoire.tables.testing.curator_marks import CuratorIndexes, curator_indexes
from grimoire.tables.testing.derivations import edge_index
from grimoire.tables.testing.memory_store import InMemoryMemoryStore
from grimoire.tables.trust.derivations import curated_edges

__all__ = ["InMemoryCuratorStore"]

logger = logging.getLogger(__name__)

Hash = dict[str, str | bytes]
_CURATED = frozenset(kind.value for kind in CURATED_KINDS)


def _flag(doc: Mapping[str, Any], name: str) -> bool:
    """A tag filter's view of a field: only "1" is set; absent or anything else is not."""
    return text_of(doc.get(name, "")) == "1"


def _ts(doc: Mapping[str, Any]) -> float:
    raw = doc.get("ts")
    return float(text_of(raw)) if raw not in (None, "", b"") else 0.0


def _returned(doc: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """What FT.SEARCH … RETURN gives back: only the named fields the hash has."""
    return {name: doc[name] for name in fields if name in doc}


class _SharedRecords:
    """The three writes a cycle makes to the memory store's keyspace: HSET on a
    memory hash (creating it if absent), HSET on its usage hash, ZADD into the
    nexus index.

    Each is one of InMemoryMemoryStore's keyspace writes.
    """

    def __init__(self, memory: InMemoryMemoryStore) -> None:
        self._memory = memory

    def hashes(self) -> list[Hash]:
        return self._memory.hashes()

    def usage(self, memory_id: str) -> Hash:
        return self._memory.usage(memory_id)

    def hset(self, memory_id: str, fields: Mapping[str, Any]) -> None:
        self._memory.put_fields(memory_id, fields)

    def hset_usage(self, memory_id: str, name: str, value: Any) -> None:
        self._memory.put_usage(memory_id, {name: value})

    def hmget(self, memory_id: str, fields: Sequence[str]) -> list[Any]:
        doc = self._memory.stored_hash(memory_id) or {}
        return [doc.get(name) for name in fields]

    def link(self, agent_id: str, memory_id: str, ts_ms: int, keys: Sequence[str]) -> None:
        self._memory.link(agent_id, memory_id, ts_ms, keys)


class InMemoryCuratorStore:
    """`CuratorStore` over an `InMemoryMemoryStore`'s records."""

    def __init__(
        self,
        memory: InMemoryMemoryStore | None = None,
        *,
        max_episodes: int = DEFAULT_MAX_EPISODES,
    ) -> None:
        self.memory = memory if memory is not None else InMemoryMemoryStore()
        self._records = _SharedRecords(self.memory)
        self._max_episodes = max_episodes
        self._states: dict[str, CuratorState] = {}
        self._books: dict[str, dict[str, bytes]] = {}
        self._playbooks: dict[str, str] = {}

    # ---- reads ------------------------------------------------------------------

    def _search(
        self, agent_id: str, keep: Callable[[Hash], bool], fields: Sequence[str], limit: int
    ) -> list[Hash]:
        """The agent's hashes that pass `keep`, oldest first as SORTBY ts ASC reads
        them (ties by id: RediSearch leaves their order open), projected on `fields`."""
        if not agent_id:
            raise ValueError("every memory query needs an agent_id")
        found = [
            doc
            for doc in self._records.hashes()
            if text_of(doc.get("agent_id", "")) == agent_id
            and not _flag(doc, "deleted")
            and keep(doc)
        ]
        found.sort(key=lambda doc: (_ts(doc), text_of(doc.get("memory_id", ""))))
        return [_returned(doc, fields) for doc in found[:limit]]

    async def episodes_since(self, agent_id: str, watermark_ms: int) -> list[EpisodeView]:
        def keep(doc: Hash) -> bool:
            return (
                text_of(doc.get("kind", "")) == "episode"
                and not _flag(doc, "quarantined")
                and not _flag(doc, "archived")
                and _ts(doc) > watermark_ms
            )

        rows = self._search(agent_id, keep, EPISODE_FIELDS, self._max_episodes)
        return [episode_view(row) for row in rows]

    async def entries(self, agent_id: str) -> list[CuratedEntry]:
        def keep(doc: Hash) -> bool:
            return (
                text_of(doc.get("kind", "")) in _CURATED
                and text_of(doc.get("event_type", "")) != EVIDENCE_EVENT_TYPE
                and not _flag(doc, "quarantined")
                and not _flag(doc, "archived")
            )

        books = self._books.get(agent_id, {})
        found = []
        for row in self._search(agent_id, keep, ENTRY_FIELDS, MAX_ENTRIES):
            memory_id = text_of(row["memory_id"])
            usage = self._records.usage(memory_id).get("last_accessed")
            found.append(curated_entry(row, usage, bookkeeping_from_json(books.get(memory_id))))
        return found

    async def quarantined(self, agent_id: str) -> list[QuarantinedView]:
        def keep(doc: Hash) -> bool:
            return _flag(doc, "quarantined") and not _flag(doc, "archived")

        rows = self._search(agent_id, keep, QUARANTINE_FIELDS, MAX_QUARANTINED)
        return [quarantined_view(row) for row in rows]

    async def cycle_inputs(self, agent_id: str, watermark_ms: int) -> CuratorInputs:
        return CuratorInputs(
            episodes=tuple(await self.episodes_since(agent_id, watermark_ms)),
            entries=tuple(await self.entries(agent_id)),
            quarantined=tuple(await self.quarantined(agent_id)),
        )

    @property
    def indexes(self) -> CuratorIndexes:
        return curator_indexes(self.memory)

    async def due_ids(self, agent_id: str, now_ms: int) -> list[str]:
        schedule = self.indexes.due.get(agent_id, {})
        return [i for due, i in sorted((d, i) for i, d in schedule.items()) if due <= now_ms]

    async def playbook_ids(self, agent_id: str) -> list[str]:
        return sorted(self.indexes.playbook.get(agent_id, set()))

    async def signature_members(
        self, agent_id: str, prefixes: Sequence[str]
    ) -> dict[str, list[str]]:
        members = self.indexes.signatures.get(agent_id, set())
        return {prefix: sorted(m for m in members if m.startswith(prefix)) for prefix in prefixes}

    async def load(self, agent_id: str, memory_ids: Sequence[str]) -> dict[str, CuratedEntry]:
        books = self._books.get(agent_id, {})
        found: dict[str, CuratedEntry] = {}
        for memory_id in dict.fromkeys(memory_ids):
            row = self._records.hmget(memory_id, LOAD_FIELDS)
            usage = self._records.usage(memory_id).get("last_accessed")
            entry = loaded_entry(agent_id, row, usage, books.get(memory_id))
            if entry is not None and entry.memory_id == memory_id:
                found[memory_id] = entry
        return found

    async def state(self, agent_id: str) -> CuratorState:
        return self._states.get(agent_id, CuratorState())

    async def get_playbook(self, agent_id: str) -> str | None:
        return self._playbooks.get(agent_id)

    async def evidence(self, agent_id: str, clade_weight: float) -> list[EvidenceRow]:
        def keep(doc: Hash) -> bool:
            return text_of(doc.get("event_type", "")) == EVIDENCE_EVENT_TYPE and not _flag(
                doc, "archived"
            )

        rows = self._search(agent_id, keep, EVIDENCE_FIELDS, MAX_ENTRIES)
        return [evidence_row(row, clade_weight) for row in rows]

    # ---- the cycle --------------------------------------------------------------

    async def apply(self, cycle: CuratorCycle) -> bool:
        """RedisCuratorStore.apply's writes, in its order; nothing awaits in
        between, so the cycle lands whole like its MULTI/EXEC."""
        if missing := missing_vectors(cycle):
            raise ValueError(f"curator cycle {cycle.cycle} lacks vectors for {missing}")
        agent_id, plan = cycle.agent_id, cycle.plan
        if self._states.get(agent_id, CuratorState()).cycle >= cycle.cycle:
            return False
        current = {entry.memory_id: entry for entry in cycle.before}
        books = self._books.setdefault(agent_id, {})
        for change in plan.changes:
            entry = change.entry
            vector = cycle.vectors[entry.memory_id] if change.text_changed else None
            if change.new:
                assert vector is not None
                fields = curated_fields(agent_id, entry, vector)
                self._records.hset(entry.memory_id, fields)
                keys = [k for k in text_of(fields["nexus_keys"]).split("|") if k]
                self._records.link(agent_id, entry.memory_id, entry.ts_ms, keys)
            elif change.record_changed:
                self._records.hset(entry.memory_id, changed_curated_fields(entry, vector))
            old = current.get(entry.memory_id)
            if old is None or entry.last_accessed_ms > old.last_accessed_ms:
                self._records.hset_usage(entry.memory_id, "last_accessed", entry.last_accessed_ms)
            if entry.status is EntryStatus.ARCHIVED:
                books.pop(entry.memory_id, None)
            else:
                books[entry.memory_id] = bookkeeping_json(entry)
        for decision in plan.quarantine:
            if decision.action is QuarantineAction.RELEASE:
                self._records.hset(decision.memory_id, {"quarantined": "0"})
            else:
                self._records.hset(decision.memory_id, {"archived": "1"})
        # Walk nodes need no sync here: the in-memory recall source derives them
        # from the records on every read.
        edge_index(self.memory).add(agent_id, curated_edges(plan, cycle.before))
        self._apply_indexes(cycle)
        self._playbooks[agent_id] = cycle.playbook
        self._states[agent_id] = CuratorState(
            plan.report.cycle, plan.watermark_ms, plan.report, scheduled=True
        )
        return True

    def _apply_indexes(self, cycle: CuratorCycle) -> None:
        """RedisCuratorStore._queue_indexes, in its order."""
        agent_id, schedule = cycle.agent_id, cycle.plan.schedule
        due = self.indexes.due.setdefault(agent_id, {})
        signatures = self.indexes.signatures.setdefault(agent_id, set())
        playbook = self.indexes.playbook.setdefault(agent_id, set())
        for memory_id in (*cycle.gone, *schedule.dropped):
            due.pop(memory_id, None)
        playbook.difference_update(cycle.gone)
        due.update(schedule.due)
        signatures.difference_update((*cycle.stale_signatures, *schedule.unsigned))
        signatures.update(schedule.signed)
        playbook.difference_update(schedule.unplaybook)
        playbook.update(schedule.playbook)

    # ---- inspection (what the Redis store keeps under its curator keys) ---------

    def bookkeeping(self, agent_id: str) -> dict[str, bytes]:
        """A copy of the entries hash (memory id → bookkeeping JSON)."""
        return dict(self._books.get(agent_id, {}))
