"""Every Redis key that holds state of one agent, found from the keyspace.

Four kinds of place hold an agent's state, every one of them a key carrying the
agent's hash tag (`grimoire.tables.keyspace`), so all in one cluster slot:

- per-agent keys with a fixed name (`FIXED_FAMILIES`: decisions, stats, walk
  nodes, maintenance state, the witness log, …), read with one EXISTS each;
- per-agent key families with open-ended names (`SCANNED_FAMILIES`: nexus ZSETs,
  hyperedges, compaction plans and outboxes, the derivation index), found by
  SCAN MATCH (the tag's closing brace ends the agent id, so agent `a`'s
  patterns never match agent `a:x`'s or `ab`'s keys);
- per-memory keys (`MEMORY_FAMILIES`: the memory hash, its usage counters,
  tombstone and decay snapshot) of every memory of the agent, found through the
  index with the tenant filter alone (deleted, archived and quarantined memories
  too), each hash's owner checked;
- single values (`MEMBER_FAMILIES`: the field state, the watermark, the last
  contrarian window), each in a key of its own and reported apart as (key,
  member) pairs: the export writes them as values, not keys (they were members
  of deployment-wide keys before the store's format 2).

Not an agent's state here: deployment-wide keys (the metrics, the vector-space
and store-format claims, the applied-source marks, which count source partitions,
the registry of known agents and the journal partitions' lists of agents with an
outbox, both derived) and the key store (`Keyspace.agent_keys`: journal keys live
outside the fold, possibly in another Redis; forgetting destroys them separately).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.search_replies import nocontent_keys
from grimoire.tables.codec.watermark import WATERMARK_MEMBER, WINDOW_MEMBER
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.ordered_search import TsWindow, index_search, ts_windows
from grimoire.tables.queries import tenant_filter
from grimoire.tables.routing import SearchRouting

__all__ = [
    "FIXED_FAMILIES",
    "MEMBER_FAMILIES",
    "MEMBER_OF",
    "MEMORY_FAMILIES",
    "SCANNED_FAMILIES",
    "AgentFootprint",
    "agent_footprint",
    "agent_keys",
    "agent_members",
    "agent_memory_ids",
    "scan_head",
]

logger = logging.getLogger(__name__)

PAGE: Final = 1000
SCAN_COUNT: Final = 1000

# family -> the agent's key
FIXED_FAMILIES: Final[Mapping[str, Callable[[Keyspace, str], str]]] = {
    "decided": Keyspace.decided,
    "stats": Keyspace.stats,
    "outcomes": Keyspace.applied_outcomes,
    "pending_outcomes": Keyspace.pending_outcomes,
    "nodes": Keyspace.nodes,
    "terms": Keyspace.terms,
    "actors": Keyspace.actors,
    "decay": Keyspace.decay_schedule,
    "decay_seeded": Keyspace.decay_seeded,
    "compaction_cursor": Keyspace.compaction_cursor,
    "compaction_pending": Keyspace.compaction_pending,
    "curator": Keyspace.curator,
    "curator_entries": Keyspace.curator_entries,
    "curator_due": Keyspace.curator_due,
    "curator_signatures": Keyspace.curator_signatures,
    "curator_playbook": Keyspace.curator_playbook,
    "playbook": Keyspace.playbook,
    "maintenance_ledger": Keyspace.maintenance_ledger,
    "maintenance_lease": Keyspace.maintenance_lease,
    "maintenance_log": Keyspace.maintenance_log,
    "witness": Keyspace.witness,
    "witness_due": Keyspace.witness_due,
    "config": Keyspace.agent_config,
    "usage_applied": Keyspace.applied_usage,
    "imported": Keyspace.applied_imports,
    "run_recalls": Keyspace.run_recalls,
    "ended_runs": Keyspace.ended_runs,
    "state_vector": Keyspace.state_vector,
    "learned_weights": Keyspace.learned_weights,
    "causal_edges": Keyspace.causal_edges,
    "causal_effects": Keyspace.causal_effects,
    "causal_causes": Keyspace.causal_causes,
    "outbox": Keyspace.outbox,
    "facts": Keyspace.facts,
    "fact_pairs": Keyspace.fact_pairs,
    "fact_entities": Keyspace.fact_entities,
    "fact_links": Keyspace.fact_links,
    "clade_published": Keyspace.clade_published,
}

# family -> (its SCAN pattern, the Keyspace methods building its keys)
SCANNED_FAMILIES: Final[
    Mapping[str, tuple[Callable[[Keyspace, str], str], tuple[Callable[..., str], ...]]]
] = {
    "nexus": (Keyspace.nexus_pattern, (Keyspace.nexus,)),
    "hyperedge": (Keyspace.hyperedge_pattern, (Keyspace.hyperedge,)),
    "compaction_plan": (Keyspace.compaction_plan_pattern, (Keyspace.compaction_plan,)),
    "compaction_outbox": (Keyspace.compaction_outbox_pattern, (Keyspace.compaction_outbox,)),
    "derivation": (
        Keyspace.derivation_pattern,
        (Keyspace.derived_from, Keyspace.derivation_sources),
    ),
}

# family -> a memory's key
MEMORY_FAMILIES: Final[Mapping[str, Callable[[Keyspace, str, str], str]]] = {
    "memory": Keyspace.memory,
    "usage": Keyspace.usage,
    "tombstone": Keyspace.tombstone,
    "decayed": Keyspace.decayed,
}

# family -> the agent's key holding the value
MEMBER_FAMILIES: Final[Mapping[str, Callable[[Keyspace, str], str]]] = {
    "field_state": Keyspace.field_state,
    "watermark": Keyspace.watermark,
    "contrarian_window": Keyspace.contrarian_window,
}
# family -> where in its key the value is: "" for a string's bytes, else the member
# of a sorted set of one whose score it is
MEMBER_OF: Final[Mapping[str, str]] = {
    "field_state": "",
    "watermark": WATERMARK_MEMBER,
    "contrarian_window": WINDOW_MEMBER,
}


@dataclass(frozen=True, slots=True)
class AgentFootprint:
    """Where one agent's state is: its memories, its keys by family (each sorted),
    and its members of deployment-wide keys."""

    prefix: str
    agent_id: str
    memory_ids: tuple[str, ...]
    families: Mapping[str, tuple[str, ...]]
    members: Mapping[str, tuple[str, str]]  # family -> (key, member; "" for a string)

    @property
    def keys(self) -> list[str]:
        """Every key holding only this agent's state, sorted."""
        return sorted(key for keys in self.families.values() for key in keys)

    @property
    def member_pairs(self) -> list[tuple[str, str]]:
        return sorted(self.members.values())

    def name_of(self, family: str, key: str) -> str:
        """What names `key` within its family, without the prefix: the memory id
        of a per-memory key, the nexus key, edge id or plan id of a scanned one,
        "" for a fixed key (two deployments' footprints compare by these)."""
        keys = Keyspace(self.prefix)
        if family in MEMORY_FAMILIES:
            return key.removeprefix(MEMORY_FAMILIES[family](keys, self.agent_id, ""))
        if family in SCANNED_FAMILIES:
            return key.removeprefix(scan_head(SCANNED_FAMILIES[family][0](keys, self.agent_id)))
        return ""


async def agent_keys(redis: Redis, prefix: str, agent_id: str) -> list[str]:
    """Every key holding state of `agent_id` (not those of its single values:
    `agent_members`), sorted."""
    return (await agent_footprint(redis, prefix, agent_id)).keys


async def agent_members(redis: Redis, prefix: str, agent_id: str) -> list[tuple[str, str]]:
    """(key, member) of each single value `agent_id` has (`MEMBER_FAMILIES`)."""
    return sorted((await _members(redis, Keyspace(prefix), agent_id)).values())


async def agent_footprint(
    redis: Redis, prefix: str, agent_id: str, *, page: int = PAGE
) -> AgentFootprint:
    if not agent_id:
        raise ValueError("a footprint needs an agent_id")
    keys = Keyspace(prefix)
    memory_ids = await agent_memory_ids(redis, prefix, agent_id, page=page)
    families: dict[str, tuple[str, ...]] = {}
    fixed = {family: build(keys, agent_id) for family, build in FIXED_FAMILIES.items()}
    present = await _existing(redis, list(fixed.values()))
    for family, key in fixed.items():
        families[family] = (key,) if key in present else ()
    for family, (pattern, _) in SCANNED_FAMILIES.items():
        found = {
            text_of(k)
            async for k in redis.scan_iter(match=pattern(keys, agent_id), count=SCAN_COUNT)
        }
        families[family] = tuple(sorted(found))
    for family, build in MEMORY_FAMILIES.items():
        candidates = [build(keys, agent_id, memory_id) for memory_id in memory_ids]
        present = await _existing(redis, candidates)
        families[family] = tuple(sorted(key for key in candidates if key in present))
    return AgentFootprint(
        prefix=prefix,
        agent_id=agent_id,
        memory_ids=tuple(memory_ids),
        families=families,
        members=await _members(redis, keys, agent_id),
    )


async def agent_memory_ids(
    redis: Redis, prefix: str, agent_id: str, *, page: int = PAGE
) -> list[str]:
    """Every memory of the agent (deleted, archived, quarantined ones too), by id,
    sorted: found through the index, then each hash's `agent_id` checked (a hit
    owned by anyone else is not the agent's, whatever the index said).

    Read in windows of event time (`ordered_search`), then the hashes without a
    `ts`: LIMIT offsets stop at the deployment's MAXSEARCHRESULTS (10,000), past
    which a search returns nothing, so an agent with more memories could not be
    digested, exported or forgotten. A window holds the memories of its times
    whatever the index's order, so a hash rewritten meanwhile is still found."""
    keys = Keyspace(prefix)
    target = await SearchRouting(redis, keys.prefix).target(agent_id)
    search = index_search(redis, target)
    where = str(tenant_filter(agent_id))
    found: set[str] = set()
    try:
        async for window in ts_windows(search, where, page=page):
            found.update(keys.memory_id_of(key) for key in window)
        untimed = await search(TsWindow(where, page).untimed_arguments())
    except ResponseError as exc:
        if "no such index" in str(exc).lower():
            return []  # a deployment that never stored a memory
        raise
    found.update(keys.memory_id_of(key) for key in nocontent_keys(untimed))
    ids = sorted(found)
    owners = await _pipelined(redis, [("HGET", keys.memory(agent_id, i), "agent_id") for i in ids])
    return [
        i
        for i, owner in zip(ids, owners, strict=True)
        if owner is not None and text_of(owner) == agent_id
    ]


async def _existing(redis: Redis, candidates: Sequence[str]) -> set[str]:
    flags = await _pipelined(redis, [("EXISTS", key) for key in candidates])
    return {key for key, flag in zip(candidates, flags, strict=True) if int(flag)}


async def _pipelined(redis: Redis, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    replies: list[Any] = []
    for start in range(0, len(commands), PAGE):
        async with redis.pipeline(transaction=False) as pipe:
            for command in commands[start : start + PAGE]:
                pipe.execute_command(*command)
            replies += await pipe.execute()
    return replies


async def _members(redis: Redis, keys: Keyspace, agent_id: str) -> dict[str, tuple[str, str]]:
    held = await _existing(redis, [build(keys, agent_id) for build in MEMBER_FAMILIES.values()])
    return {
        family: (build(keys, agent_id), MEMBER_OF[family])
        for family, build in MEMBER_FAMILIES.items()
        if build(keys, agent_id) in held
    }


def scan_head(pattern: str) -> str:
    """The literal start of a `<literal>*` SCAN pattern (glob escapes removed)."""
    literal, escaped = [], False
    for ch in pattern.removesuffix("*"):
        if ch == "\\" and not escaped:
            escaped = True
            continue
        literal.append(ch)
        escaped = False
    return "".join(literal)
