"""The reference implementation of `CompactionStore`, in memory, over the memory
records of an `InMemoryMemoryStore`, with RedisCompactionStore's semantics.

It works on the memory store's own hashes (values encoded as redis-py writes
them), so what recall sees through `InMemoryMemoryStore.recall_source` follows
every phase exactly as it follows the Redis store: summaries born hidden, the
flip's guards (tenancy, a source gone since planning stays as it is, nothing
flipped or queued twice), vectors dropped batch by batch. Each method completes
without yielding to the event loop, so each is atomic as a MULTI/EXEC is. Used
by unit tests and as the reference the Redis store is checked against in
`tests/integration/test_compaction_contract.py`.

The walk's node table is not kept: the in-memory recall source packs nodes from
the records on every read, so it never lags a flip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from grimoire.streams.maintenance.compaction import (
    CompactionCandidate,
    CompactionPlan,
    CompactionPolicy,
)
from grimoire.streams.write.changes import WriteBatch
from grimoire.tables.codec.compaction_plan import decode_plan, encode_plan
from grimoire.tables.codec.memory_hash import (
    CANDIDATE_FIELDS,
    candidate_of,
    summary_fields,
    summary_record,
)
from grimoire.tables.maintenance.compaction_store import (
    PLAN_TTL_S,
    USAGE_FIELDS,
    VECTOR_FIELDS,
    Phase,
    StoredPlan,
)
from grimoire.tables.testing.derivations import edge_index
from grimoire.tables.testing.memory_core import encoded
from grimoire.tables.testing.memory_store import InMemoryMemoryStore
from grimoire.tables.trust.derivations import summary_edges

__all__ = ["InMemoryCompactionStore"]

Hash = dict[str, str | bytes]
_HIDDEN_FLAGS = ("deleted", "quarantined", "archived")


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


class _Records:
    """Write access to the memory store's record hashes.

    `InMemoryMemoryStore.stored_hash` hands out the stored dict itself, and a
    committed record is created with the memory store's own write (so its nexus
    links land where recall's walk reads them)."""

    def __init__(self, memory: InMemoryMemoryStore) -> None:
        self._memory = memory

    def all(self) -> list[Hash]:
        return self._memory.hashes()

    def get(self, memory_id: str) -> Hash | None:
        return self._memory.stored_hash(memory_id)


class InMemoryCompactionStore:
    """`CompactionStore` in memory (the reference implementation).

    `unindexed` holds summary ids the stand-in search index does not return yet,
    so a test can make indexing lag (RediSearch indexes a written hash shortly
    after, not in the same transaction)."""

    def __init__(self, memory: InMemoryMemoryStore, *, dims: int = 384) -> None:
        self.memory = memory
        self.unindexed: set[str] = set()
        self._dims = dims
        self._records = _Records(memory)
        self._cursors: dict[str, int] = {}
        self._pending: dict[str, str] = {}
        self._plans: dict[tuple[str, str], Hash] = {}
        self._ttl_s: dict[tuple[str, str], int] = {}
        self._outboxes: dict[tuple[str, str], list[str]] = {}
        self._tombstones: dict[str, Hash] = {}

    # ---- candidate scan ---------------------------------------------------------

    async def cursor(self, agent_id: str) -> int | None:
        return self._cursors.get(agent_id)

    async def set_cursor(self, agent_id: str, ts_ms: int) -> None:
        self._cursors[agent_id] = ts_ms

    def _live(self, agent_id: str, since_ms: int, until_ms: int) -> list[tuple[float, Hash]]:
        """The agent's live memories with since <= ts <= until (the index's filters)."""
        found = []
        for doc in self._records.all():
            if _text(doc.get("agent_id")) != agent_id or "ts" not in doc:
                continue
            if any(_text(doc.get(flag)) == "1" for flag in _HIDDEN_FLAGS):
                continue
            ts = float(_text(doc["ts"]))
            if since_ms <= ts <= until_ms:
                found.append((ts, doc))
        found.sort(key=lambda item: (item[0], _text(item[1].get("memory_id"))))
        return found

    async def first_live_ts(self, agent_id: str, since_ms: int, horizon_ms: int) -> int | None:
        found = self._live(agent_id, since_ms, horizon_ms)
        return int(found[0][0]) if found else None

    async def candidates(
        self, agent_id: str, now_ms: int, policy: CompactionPolicy, limit: int, since_ms: int
    ) -> list[CompactionCandidate]:
        horizon = now_ms - policy.min_age_ms
        end = since_ms + policy.window_ms  # exclusive
        rows: list[CompactionCandidate] = []
        for ts, doc in self._live(agent_id, since_ms, horizon):
            if len(rows) >= limit:
                break
            kind = _text(doc.get("kind"))
            wanted = (
                kind == "summary" if policy.summary_level else kind not in {"summary", "aggregate"}
            )
            if ts >= end or not wanted:
                continue
            usage = self.memory.usage(_text(doc.get("memory_id")))
            fields: Hash = {name: doc[name] for name in CANDIDATE_FIELDS if name in doc}
            rows.append(candidate_of(fields, [usage.get(name) for name in USAGE_FIELDS]))
        return rows

    async def degrees(self, agent_id: str, keys: Sequence[str]) -> dict[str, int]:
        return await self.memory.degrees(agent_id, keys) if keys else {}

    # ---- the persisted plan -----------------------------------------------------

    async def save_plan(self, agent_id: str, plan: CompactionPlan) -> None:
        self._plans[(agent_id, plan.plan_id)] = {
            "plan": encode_plan(plan),
            "phase": Phase.PLANNED.value,
            "agent_id": agent_id,
        }
        self._pending[agent_id] = plan.plan_id

    async def pending(self, agent_id: str) -> str | None:
        return self._pending.get(agent_id)

    async def load_plan(self, agent_id: str, plan_id: str) -> StoredPlan | None:
        stored = self._plans.get((agent_id, plan_id), {})
        raw, phase = stored.get("plan"), stored.get("phase")
        if raw is None or phase is None:
            return None
        return StoredPlan(decode_plan(raw), Phase(_text(phase)))

    async def drop_pending(self, agent_id: str) -> None:
        self._pending.pop(agent_id, None)

    def _set_phase(self, agent_id: str, plan_id: str, phase: Phase) -> None:
        # HSET creates the hash when it is gone, as Redis would.
        self._plans.setdefault((agent_id, plan_id), {})["phase"] = phase.value

    # ---- the phases -------------------------------------------------------------

    async def existing(self, agent_id: str, memory_ids: Sequence[str]) -> set[str]:
        return {
            i
            for i in memory_ids
            if (r := self.memory.record(i)) is not None and _text(r.get("agent_id")) == agent_id
        }

    async def write_summaries(
        self, agent_id: str, plan: CompactionPlan, vectors: Mapping[str, bytes]
    ) -> None:
        written = [c for c in plan.clusters if c.summary_id in vectors]
        # Every hash is built before the first write, so a bad vector writes nothing.
        records = [summary_record(agent_id, c, vectors[c.summary_id], self._dims) for c in written]
        fields = [
            summary_fields(agent_id, plan, c, vectors[c.summary_id], self._dims) for c in written
        ]
        # The memory store's write creates each record with its nexus links; the
        # summary's fields (a superset of what that wrote) then overwrite it, which
        # leaves the hash one HSET of them would.
        await self.memory.commit(WriteBatch(records=tuple(records)))
        for cluster, hashed in zip(written, fields, strict=True):
            doc = self._records.get(cluster.summary_id)
            assert doc is not None
            doc.update(encoded(hashed))
        edge_index(self.memory).add(agent_id, summary_edges(written))
        self._set_phase(agent_id, plan.plan_id, Phase.SUMMARIES_WRITTEN)

    async def indexed(self, agent_id: str, summary_ids: Sequence[str]) -> int:
        return len((await self.existing(agent_id, summary_ids)) - set(self.unindexed))

    async def mark_indexed(self, agent_id: str, plan_id: str) -> None:
        self._set_phase(agent_id, plan_id, Phase.INDEXED)

    async def flip(self, agent_id: str, plan: CompactionPlan) -> list[int]:
        """The flip script's effect (see compaction_store._FLIP), cluster by cluster."""
        outbox = self._outboxes.setdefault((agent_id, plan.plan_id), [])
        counts: list[int] = []
        for cluster in plan.clusters:
            summary = self._records.get(cluster.summary_id)
            if summary is None or _text(summary.get("agent_id")) != agent_id:
                counts.append(-1)
                continue
            flipped = 0
            for source_id in cluster.source_ids:
                source = self._records.get(source_id)
                if source is None or _text(source.get("agent_id")) != agent_id:
                    continue
                by = _text(source.get("replaced_by_summary_id"))
                gone = any(_text(source.get(flag)) == "1" for flag in _HIDDEN_FLAGS)
                if by == cluster.summary_id or gone:
                    continue
                source["deleted"] = "1"
                source["replaced_by_summary_id"] = cluster.summary_id
                self._tombstones.setdefault(source_id, {}).update(
                    {
                        "summary_id": cluster.summary_id,
                        "plan_id": plan.plan_id,
                        "agent_id": agent_id,
                        "ts": str(plan.now_ms),
                    }
                )
                outbox.append(_text(source.get("memory_id")))
                flipped += 1
            if _text(summary.get("deleted")) != "0":
                summary["deleted"] = "0"
                summary.pop("compaction_pending", None)
            counts.append(flipped)
        if not outbox:  # an empty list is no key in Redis
            del self._outboxes[(agent_id, plan.plan_id)]
        self._set_phase(agent_id, plan.plan_id, Phase.FLIPPED)
        return counts

    async def outbox(self, agent_id: str, plan_id: str, limit: int) -> list[str]:
        return list(self._outboxes.get((agent_id, plan_id), [])[: max(limit, 0)])

    async def drop_vectors(self, agent_id: str, plan_id: str, memory_ids: Sequence[str]) -> None:
        for memory_id in memory_ids:
            doc = self._records.get(memory_id)
            if doc is not None:
                for name in VECTOR_FIELDS:
                    doc.pop(name, None)
        rest = self._outboxes.get((agent_id, plan_id), [])[len(memory_ids) :]
        if rest:
            self._outboxes[(agent_id, plan_id)] = rest
        else:
            self._outboxes.pop((agent_id, plan_id), None)

    async def finish(self, agent_id: str, plan_id: str) -> None:
        self._set_phase(agent_id, plan_id, Phase.DONE)
        self._ttl_s[(agent_id, plan_id)] = PLAN_TTL_S
        self._pending.pop(agent_id, None)
        self._outboxes.pop((agent_id, plan_id), None)

    # ---- inspection (what the Redis store keeps under its compaction keys) ------

    def plan_fields(self, agent_id: str, plan_id: str) -> Hash | None:
        stored = self._plans.get((agent_id, plan_id))
        return dict(stored) if stored is not None else None

    def plan_ttl_s(self, agent_id: str, plan_id: str) -> int | None:
        """The expiry set on a finished plan (None while it has none)."""
        return self._ttl_s.get((agent_id, plan_id))

    def outbox_ids(self, agent_id: str, plan_id: str) -> list[str]:
        return list(self._outboxes.get((agent_id, plan_id), []))

    def tombstone(self, memory_id: str) -> Hash:
        return dict(self._tombstones.get(memory_id, {}))
