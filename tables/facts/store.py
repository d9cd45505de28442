"""Agents' bi-temporal facts: every version, and the indexes queries read.

Per agent, four hashes (`Keyspace.facts`, `fact_pairs`, `fact_entities`,
`fact_links`): the versions by fact id; the version ids of each (subject,
predicate), which an assert reads; the version ids each entity is subject or
object of, which entity-scoped queries and k-hop walks read; and the active
entity links of each entity key, which recall's walk reads. Only the apply loop
writes them (`apply`, in journal order, one agent at a time), so reading the
indexes and writing them back across round trips is race-free; the writes go in
one MULTI/EXEC, and they hold nothing but what the journal decided (no clock),
so a replay stores the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from redis.asyncio import Redis

from grimoire.streams.facts.queries import entity_links, fact_order
from grimoire.streams.facts.values import Fact, FactChanges, entity_key
from grimoire.tables.codec.fact import (
    decode_fact,
    decode_ids,
    decode_links,
    encode_fact,
    encode_ids,
    encode_links,
    pair_field,
)
from grimoire.tables.journal.witness_due import WitnessDue
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.transaction import agent_transaction

__all__ = ["RedisFactStore", "index_changes"]


def index_changes(
    before: Iterable[Fact], after: Iterable[Fact]
) -> tuple[set[tuple[str, str]], set[str]]:
    """The relations and entities whose index entries a change touches."""
    pairs: set[tuple[str, str]] = set()
    entities: set[str] = set()
    for fact in (*before, *after):
        pairs.add((fact.subject, fact.predicate))
        entities.update(fact.entities)
    return pairs, entities


class RedisFactStore:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self.keys = Keyspace(prefix)

    async def _facts(self, agent_id: str, ids: Sequence[str]) -> dict[str, Fact]:
        if not ids:
            return {}
        unique = sorted(set(ids))
        rows = await self._redis.hmget(self.keys.facts(agent_id), unique)
        return {i: decode_fact(raw) for i, raw in zip(unique, rows, strict=True) if raw is not None}

    async def fact(self, agent_id: str, fact_id: str) -> Fact | None:
        return (await self._facts(agent_id, [fact_id])).get(fact_id)

    async def versions(self, agent_id: str, subject: str, predicate: str) -> list[Fact]:
        raw = await self._redis.hget(self.keys.fact_pairs(agent_id), pair_field(subject, predicate))
        found = await self._facts(agent_id, decode_ids(raw))
        return sorted(found.values(), key=lambda f: (f.order, f.fact_id))

    async def all_versions(self, agent_id: str) -> list[Fact]:
        rows = await self._redis.hvals(self.keys.facts(agent_id))
        return sorted((decode_fact(raw) for raw in rows), key=fact_order)

    async def of_entities(self, agent_id: str, entities: Sequence[str]) -> list[Fact]:
        names = sorted(set(entities))
        if not names:
            return []
        rows = await self._redis.hmget(self.keys.fact_entities(agent_id), names)
        ids = {i for raw in rows for i in decode_ids(raw)}
        found = await self._facts(agent_id, sorted(ids))
        return sorted(found.values(), key=fact_order)

    async def links(self, agent_id: str, keys: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        wanted = sorted(set(keys))
        if not wanted:
            return {}
        rows = await self._redis.hmget(self.keys.fact_links(agent_id), wanted)
        return {key: decode_links(raw) for key, raw in zip(wanted, rows, strict=True) if raw}

    async def put_versions(self, agent_id: str, facts: Sequence[Fact]) -> None:
        await self.apply(agent_id, FactChanges(upserts=tuple(facts)))

    async def apply(
        self, agent_id: str, changes: FactChanges, due: WitnessDue | None = None
    ) -> None:
        if changes.empty:
            return
        keys = self.keys
        removed = await self._facts(agent_id, changes.removed)
        pairs, entities = index_changes(removed.values(), changes.upserts)
        pair_fields = sorted(pair_field(s, p) for s, p in pairs)
        names = sorted(entities)
        pair_rows = await self._redis.hmget(keys.fact_pairs(agent_id), pair_fields)
        entity_rows = await self._redis.hmget(keys.fact_entities(agent_id), names)
        gone = set(changes.removed)
        by_pair: dict[str, set[str]] = {
            f: set(decode_ids(raw)) - gone for f, raw in zip(pair_fields, pair_rows, strict=True)
        }
        by_entity: dict[str, set[str]] = {
            n: set(decode_ids(raw)) - gone for n, raw in zip(names, entity_rows, strict=True)
        }
        for fact in changes.upserts:
            by_pair[pair_field(fact.subject, fact.predicate)].add(fact.fact_id)
            for name in fact.entities:
                by_entity[name].add(fact.fact_id)
        # The links of a touched entity, from every version it is in after the change.
        written = {fact.fact_id: fact for fact in changes.upserts}
        around = sorted({i for ids in by_entity.values() for i in ids} - set(written))
        current = {**await self._facts(agent_id, around), **written}
        links = entity_links(current.values())
        async with agent_transaction(self._redis, agent_id) as pipe:
            if changes.removed:
                pipe.hdel(keys.facts(agent_id), *sorted(gone))
            if changes.upserts:
                pipe.hset(
                    keys.facts(agent_id),
                    mapping={f.fact_id: encode_fact(f) for f in changes.upserts},
                )
            _write_index(pipe, keys.fact_pairs(agent_id), by_pair, encode_ids)
            _write_index(pipe, keys.fact_entities(agent_id), by_entity, encode_ids)
            touched = {entity_key(name): links.get(entity_key(name), []) for name in names}
            _write_index(pipe, keys.fact_links(agent_id), touched, encode_links)
            if due is not None:
                pipe.set(keys.witness_due(agent_id), due.encode())
            await pipe.execute()


def _write_index(
    pipe: Any, key: str, values: Mapping[str, Any], encode: Callable[[Any], bytes]
) -> None:
    """HSET the non-empty entries, HDEL the empty ones."""
    kept = {field: encode(value) for field, value in sorted(values.items()) if value}
    empty = sorted(field for field, value in values.items() if not value)
    if empty:
        pipe.hdel(key, *empty)
    if kept:
        pipe.hset(key, mapping=kept)
