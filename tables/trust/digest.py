"""A digest of everything stored for one agent: equal digests, equal state.

Two stores that applied the same journal (a live deployment and its replay, two
replicas) must hold the same agent state, byte for byte, except where a value
depends on the wall clock or on which worker wrote it. `agent_digest` hashes the
agent's footprint (`grimoire.tables.trust.agent_keys`) with those values left out,
and names under the prefix, so two deployments with different prefixes compare.

Left out, because they depend on the wall clock or on the worker, never on the
journal (found by grepping tables/ and agents/ for `time.time`, `clock_ms`,
`perf_counter`, `monotonic`, and for what is written with a TTL or a worker id):

- `recorded_at` in memory hashes: the transaction time `RedisMemoryWrites.commit`
  takes from its core's `clock_ms` (`infra/runtime.py` passes `time.time`);
- `elapsed_ms` in the maintenance log's entries: `perf_counter` around each task
  (`agents/maintenance/handler.py`);
- `worker` in the maintenance log's entries: the completing worker's
  `hostname:pid` (`infra/runtime.worker_id`);
- the maintenance lease key (`Keyspace.maintenance_lease`): the holder's worker
  id, with a wall-clock expiry;
- compaction plans in phase `done`: they expire a week after (`PLAN_TTL_S`), so
  whether one is still there depends on the wall clock;
- Redis stream entry ids (the maintenance log's are wall-clock milliseconds):
  a stream is digested as its entries' field contents, in order.

Not left out, though time-like: every event time (`ts`, `last_accessed`,
`last_seen`, watermarks, `now_ms` of plans and curator reports, the decay-seeded
marker, which holds the pass's event time). The recall handler's timings and the
pressure probe's windows are never stored. Vectors are digested as their bytes.

The encoding is `grimoire.streams.trust.witness.canonical_bytes` of one item per
key, in (family, name) order: `[family, name, redis type, value]`, where a hash
is its (field, value) pairs sorted by field, a set its sorted members, a sorted
set its (member, score) pairs sorted by member, a list and a stream (entries as
sorted field pairs) in their order; then one item per single value (field state,
watermark, contrarian window): `[family, value]`. All bytes as stored.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from redis.asyncio import Redis

from grimoire.streams.trust.witness import canonical_bytes
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.compaction_store import Phase
from grimoire.tables.trust.agent_keys import AgentFootprint, agent_footprint
from grimoire.tables.trust.stored_values import member_value, read_stored

__all__ = [
    "DIGEST_DOMAIN",
    "EXCLUDED_FAMILIES",
    "EXCLUDED_FIELDS",
    "JOURNAL_FAMILIES",
    "STATE_EXCLUDED_FAMILIES",
    "AgentDigest",
    "agent_digest",
    "footprint_digest",
    "state_digest",
]

logger = logging.getLogger(__name__)

DIGEST_DOMAIN: Final = b"grimoire.agent-digest.v1\n"
CHUNK: Final = 500

# Fields left out of a family's hashes or stream entries (see the module docstring).
EXCLUDED_FIELDS: Final[Mapping[str, frozenset[bytes]]] = {
    "memory": frozenset({b"recorded_at"}),
    "maintenance_log": frozenset({b"elapsed_ms", b"worker"}),
}
# Families left out whole. The outbox holds events until the broker has them:
# delivery bookkeeping that a settled worker has emptied, whatever it decided.
EXCLUDED_FAMILIES: Final = frozenset({"maintenance_lease", "outbox"})
# The state view (`state_digest`) also leaves out the journal's bookkeeping, which
# depends on where in which journal the state was made, not on the state: the
# witness chain (journal positions, previous hashes), the journal sequence numbers
# of applied usage entries, the import chunks applied and the record left due
# with an outcome or a fact (`WitnessDue`). An export carries
# exactly the families this view covers (docs/export-format.md), so a deployment
# that imported an agent's export has the source's state digest.
JOURNAL_FAMILIES: Final = frozenset({"witness", "witness_due", "usage_applied", "imported"})
STATE_EXCLUDED_FAMILIES: Final = EXCLUDED_FAMILIES | JOURNAL_FAMILIES
STATE_DIGEST_DOMAIN: Final = b"grimoire.agent-state-digest.v1\n"


@dataclass(frozen=True, slots=True)
class AgentDigest:
    agent_id: str
    sha256: str
    counts: Mapping[str, int]  # family -> keys (or members) digested
    excluded: Mapping[str, int]  # family -> keys left out whole

    def asdict(self) -> dict[str, Any]:
        return {
            "agent": self.agent_id,
            "digest": self.sha256,
            "counts": dict(self.counts),
            "excluded": dict(self.excluded),
        }


async def agent_digest(redis: Redis, prefix: str, agent_id: str) -> AgentDigest:
    """The digest of everything stored for `agent_id` under `prefix`."""
    return await footprint_digest(redis, await agent_footprint(redis, prefix, agent_id))


async def state_digest(redis: Redis, prefix: str, agent_id: str) -> AgentDigest:
    """The digest of the agent's memory state alone: every family but the journal's
    bookkeeping (`JOURNAL_FAMILIES`) and what `agent_digest` leaves out. Equal
    between a deployment and one that imported its export of the agent."""
    return await footprint_digest(
        redis,
        await agent_footprint(redis, prefix, agent_id),
        excluded_families=STATE_EXCLUDED_FAMILIES,
        domain=STATE_DIGEST_DOMAIN,
    )


async def footprint_digest(
    redis: Redis,
    footprint: AgentFootprint,
    *,
    excluded_families: frozenset[str] = EXCLUDED_FAMILIES,
    domain: bytes = DIGEST_DOMAIN,
) -> AgentDigest:
    """The digest of the keys and members a footprint names, as they are now."""
    hasher = hashlib.sha256(domain)
    hasher.update(canonical_bytes(["agent", footprint.agent_id]))
    counts: dict[str, int] = {}
    excluded: dict[str, int] = {}
    for family in sorted(footprint.families):
        if family in excluded_families:
            if footprint.families[family]:
                excluded[family] = len(footprint.families[family])
            continue
        named = sorted((footprint.name_of(family, key), key) for key in footprint.families[family])
        for start in range(0, len(named), CHUNK):
            chunk = named[start : start + CHUNK]
            values = await read_stored(redis, [key for _, key in chunk])
            for (name, _), (kind, value) in zip(chunk, values, strict=True):
                if kind == "none":
                    continue  # gone since the footprint was taken
                if family == "compaction_plan" and _finished(kind, value):
                    excluded[family] = excluded.get(family, 0) + 1
                    continue
                value = _without(kind, value, EXCLUDED_FIELDS.get(family, frozenset()))
                hasher.update(canonical_bytes([family, name, kind, value]))
                counts[family] = counts.get(family, 0) + 1
    keys = Keyspace(footprint.prefix)
    for family in sorted(footprint.members):
        value = await member_value(redis, keys, family, footprint.agent_id)
        if value is None:
            continue
        hasher.update(canonical_bytes([family, value]))
        counts[family] = 1
    return AgentDigest(footprint.agent_id, hasher.hexdigest(), counts, excluded)


def _without(kind: str, value: Any, fields: frozenset[bytes]) -> Any:
    """A hash's pairs, or a stream's entries, without the excluded fields."""
    if not fields:
        return value
    if kind == "hash":
        return tuple(pair for pair in value if pair[0] not in fields)
    if kind == "stream":
        return tuple(tuple(pair for pair in entry if pair[0] not in fields) for entry in value)
    return value


def _finished(kind: str, value: Any) -> bool:
    """Whether a compaction plan's hash says it is done."""
    return kind == "hash" and (b"phase", Phase.DONE.value.encode()) in value
