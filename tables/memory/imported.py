"""An agent's state as export lines: read for `grimoire export`, written verbatim by
the import handler (docs/export-format.md).

Reading takes the agent's footprint (`tables/trust/agent_keys.py`) and reads every
family the state digest covers (`STATE_EXCLUDED_FAMILIES` are left out: the
journal's bookkeeping and the maintenance lease), each key as it is stored, so a
new family added to the footprint is exported without a change here. Finished
compaction plans are left out too (they expire, and the digest skips them).

Writing puts each line back under the importing prefix, by the same family tables,
in one MULTI/EXEC per chunk together with the chunk's mark (`applied_imports`): a
chunk read again changes nothing. A successor's chunk also gets what the write
path derives for a new memory: its search-term counts (counted only when the
memory is new), its walk node, and for a curated entry its first curator look;
and its inherited facts' index entries (ids by relation, by entity, entity links)
are joined to those of the successor's own facts, not written over them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from redis.asyncio import Redis

from grimoire.streams.exchange.format import StateLine, hash_line, hash_of, split_line
from grimoire.tables.codec.actors import stored_actor
from grimoire.tables.codec.fact import decode_ids, decode_links, encode_ids, encode_links
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.memory_hash.writing import lexical_form_of
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.maintenance.compaction_store import Phase
from grimoire.tables.maintenance.curator_marks import queue_new
from grimoire.tables.memory.graph import RedisGraph
from grimoire.tables.memory.rebuild import counted_text
from grimoire.tables.memory.scripts import RedisScripts
from grimoire.tables.transaction import agent_transaction
from grimoire.tables.trust.agent_keys import (
    FIXED_FAMILIES,
    MEMBER_FAMILIES,
    MEMBER_OF,
    MEMORY_FAMILIES,
    SCANNED_FAMILIES,
    agent_footprint,
    scan_head,
)
from grimoire.tables.trust.digest import STATE_EXCLUDED_FAMILIES
from grimoire.tables.trust.stored_values import member_value, read_stored

__all__ = [
    "VECTOR_FIELDS",
    "ImportRefused",
    "ImportWriter",
    "read_state_lines",
]

logger = logging.getLogger(__name__)

# The memory hash's vector fields (tables/schema/memory_index.yaml).
VECTOR_FIELDS: Final = (b"canonical", b"eidolon")
MAX_ENTRIES: Final = 500  # entries of a hash, sorted set or set per line
_PAGE: Final = 500
# A successor's fact index entries, joined to what the successor holds: family ->
# (decode, encode) of an entry (a set of fact ids, or of entity links).
_JOINED: Final[Mapping[str, tuple[Callable[[Any], list[Any]], Callable[[Any], bytes]]]] = {
    "fact_pairs": (decode_ids, encode_ids),
    "fact_entities": (decode_ids, encode_ids),
    "fact_links": (decode_links, encode_links),
}


class ImportRefused(ValueError):
    """A chunk that would write over another agent's memory."""


async def read_state_lines(
    redis: Redis,
    prefix: str,
    agent_id: str,
    *,
    vectors: bool = True,
    max_entries: int = MAX_ENTRIES,
    progress: Callable[[int, int], None] | None = None,
) -> list[StateLine]:
    """Every state line of the agent, in file order (`StateLine.sort_key`)."""
    footprint = await agent_footprint(redis, prefix, agent_id)
    named = sorted(
        (family, footprint.name_of(family, key), key)
        for family, keys in footprint.families.items()
        if family not in STATE_EXCLUDED_FAMILIES
        for key in keys
    )
    lines: list[StateLine] = []
    for start in range(0, len(named), _PAGE):
        page = named[start : start + _PAGE]
        for (family, name, _), (kind, value) in zip(
            page, await read_stored(redis, [key for _, _, key in page]), strict=True
        ):
            if kind == "none":
                continue
            if family == "compaction_plan" and (b"phase", Phase.DONE.value.encode()) in value:
                continue
            if family == "memory" and not vectors:
                value = tuple(pair for pair in value if pair[0] not in VECTOR_FIELDS)
            lines.extend(split_line(StateLine(family, name, kind, value), max_entries))
        if progress is not None:
            progress(min(start + _PAGE, len(named)), len(named))
    keys = Keyspace(prefix)
    for family in sorted(footprint.members):
        if family in STATE_EXCLUDED_FAMILIES:
            continue
        value = await member_value(redis, keys, family, agent_id)
        if value is not None:
            kind = "member" if family == "field_state" else "score"
            lines.append(StateLine(family, "", kind, value))
    return sorted(lines, key=StateLine.sort_key)


class ImportWriter:
    """Writes import chunks' lines under one prefix."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self.keys = Keyspace(prefix)
        self._graph = RedisGraph(redis, prefix)
        self._scripts = RedisScripts(redis)

    def key_of(self, agent_id: str, line: StateLine) -> str:
        """Where a line is written; `ValueError` for a family this version does not
        know (the footprint's tables are the only ones consulted)."""
        family = line.type
        if family in MEMORY_FAMILIES:
            if not line.name:
                raise ValueError(f"a {family} line needs the memory id as its name")
            return MEMORY_FAMILIES[family](self.keys, agent_id, line.name)
        if family in FIXED_FAMILIES:
            return FIXED_FAMILIES[family](self.keys, agent_id)
        if family in SCANNED_FAMILIES:
            pattern, _ = SCANNED_FAMILIES[family]
            return scan_head(pattern(self.keys, agent_id)) + line.name
        if family in MEMBER_FAMILIES:
            return MEMBER_FAMILIES[family](self.keys, agent_id)
        raise ValueError(f"unknown state family {family!r}")

    async def applied(self, agent_id: str, chunk_id: str) -> bool:
        return bool(await self._redis.sismember(self.keys.applied_imports(agent_id), chunk_id))

    async def write(
        self,
        agent_id: str,
        chunk_id: str,
        lines: Sequence[StateLine],
        *,
        derive: bool = False,
    ) -> list[str]:
        """Write `lines` and mark `chunk_id` applied, in one transaction; the memory
        ids written. `derive`: also count each new memory's terms, add its actor and pack its walk
        node (a successor's memories come without the predecessor's derived keys).
        Raises `ImportRefused` when a memory id is held by another agent."""
        targets = [(line, self.key_of(agent_id, line)) for line in lines]
        if derive:
            targets = [(await self._joined(line, key), key) for line, key in targets]
        memories = [(line, key) for line, key in targets if line.type == "memory"]
        if memories:
            owners = await self._owners([key for _, key in memories])
            for (line, _), owner in zip(memories, owners, strict=True):
                if owner is not None and text_of(owner) != agent_id:
                    raise ImportRefused(f"memory {line.name} belongs to another agent")
        written = sorted({line.name for line, _ in memories})
        async with agent_transaction(self._redis, agent_id) as pipe:
            for line, key in targets:
                if derive and line.type == "memory":
                    fields = hash_of(line)
                    form = lexical_form_of(fields.get(b"text"), fields.get(b"ts"))
                    counted = counted_text(form)
                    self._scripts.count_new_terms(pipe, key, self.keys.terms(agent_id), counted)
                    if actor := stored_actor(fields.get(b"actor_id")):
                        pipe.sadd(self.keys.actors(agent_id), actor)
                    # An inherited insight, heuristic or warning: the successor's
                    # curator looks at it in its next cycle.
                    queue_new(pipe, self.keys, {text_of(k): v for k, v in fields.items()})
                _queue(pipe, line, key, only_up=derive)
            if derive:
                self._graph.sync_nodes(pipe, agent_id, written)
            pipe.sadd(self.keys.applied_imports(agent_id), chunk_id)
            await pipe.execute()
        return written

    async def _joined(self, line: StateLine, key: str) -> StateLine:
        """A successor's fact index line joined to the entries it already holds
        (its own facts'); any other line as it is."""
        codec = _JOINED.get(line.type)
        fields = hash_of(line)
        if codec is None or not fields:
            return line
        decode, encode = codec
        names = sorted(fields)
        held = await self._redis.hmget(key, [text_of(name) for name in names])
        joined = {
            name: fields[name] if old is None else encode([*decode(old), *decode(fields[name])])
            for name, old in zip(names, held, strict=True)
        }
        return hash_line(line, joined)

    async def _owners(self, keys: Sequence[str]) -> list[Any]:
        async with self._redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hget(key, "agent_id")
            return list(await pipe.execute())


def _queue(pipe: Any, line: StateLine, key: str, *, only_up: bool) -> None:
    value: Any = line.value
    kind = line.kind
    if kind == "hash":
        if value:
            pipe.hset(key, mapping=dict(value))
    elif kind == "zset":
        if value:
            pipe.zadd(key, dict(value))
    elif kind == "set":
        if value:
            pipe.sadd(key, *value)
    elif kind == "list":
        if value:
            pipe.rpush(key, *value)
    elif kind == "stream":
        for entry in value:
            pipe.xadd(key, dict(entry))
    elif kind == "string":
        pipe.set(key, value)
    elif kind == "member":
        # A single value (the field state): its own key since the store's format 2.
        pipe.set(key, value)
    elif kind == "score":
        # A successor's watermark only moves forward; an ordinary import restores it.
        pipe.zadd(key, {MEMBER_OF[line.type]: value}, gt=only_up)
    else:
        raise ValueError(f"unknown kind {kind!r}")
