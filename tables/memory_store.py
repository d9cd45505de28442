"""Memory storage: one Protocol, and the Redis (RediSearch via redisvl) implementation."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from redis.asyncio import Redis
from redis.commands.search.query import Query
from redisvl.index import AsyncSearchIndex
from redisvl.query import VectorQuery

from grimoire.streams.records import MemoryRecord
from grimoire.tables.exceptions import SchemaMismatch
from grimoire.tables.index_schema import memory_schema
from grimoire.tables.queries import FullTextQuery, tenant_filter

logger = logging.getLogger(__name__)

RETURN_FIELDS = (
    "memory_id",
    "agent_id",
    "kind",
    "layer",
    "text",
    "ts",
    "source_event_id",
    "normalized_hash",
)


@dataclass(frozen=True, slots=True)
class StoredMemory:
    id: str
    agent_id: str
    kind: str
    layer: str
    text: str
    ts_ms: int
    source_event_id: str
    normalized_hash: str = ""


@dataclass(frozen=True, slots=True)
class ScoredHit:
    memory: StoredMemory
    score: float  # larger is better in every lane


class MemoryStore(Protocol):
    async def ensure_schema(self) -> None: ...
    async def existing_ids(self, ids: Sequence[str]) -> set[str]: ...
    async def put_many(self, records: Sequence[MemoryRecord]) -> list[bool]: ...
    async def get_many(self, agent_id: str, ids: Sequence[str]) -> list[StoredMemory | None]: ...
    async def knn(self, agent_id: str, vector: Sequence[float], k: int) -> list[ScoredHit]: ...
    async def full_text(self, agent_id: str, terms: Sequence[str], k: int) -> list[ScoredHit]: ...
    async def count(self, agent_id: str) -> int: ...
    async def advance_watermark(self, watermarks: dict[str, int]) -> None: ...
    async def watermark(self, agent_id: str) -> int | None: ...


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _stored(doc: dict[str, Any]) -> StoredMemory:
    return StoredMemory(
        id=_text(doc["memory_id"]),
        agent_id=_text(doc["agent_id"]),
        kind=_text(doc["kind"]),
        layer=_text(doc["layer"]),
        text=_text(doc.get("text", "")),
        ts_ms=int(float(_text(doc["ts"]))),
        source_event_id=_text(doc.get("source_event_id", "")),
        normalized_hash=_text(doc.get("normalized_hash", "")),
    )


def _hash_fields(record: MemoryRecord, recorded_at_ms: int) -> dict[str, Any]:
    cand = record.candidate
    prov = cand.provenance
    fields: dict[str, Any] = {
        "memory_id": cand.id,
        "agent_id": cand.agent_id,
        "kind": cand.kind.value,
        "layer": cand.layer.value,
        "text": cand.text,
        "ts": cand.ts_ms,
        "importance": cand.importance,
        "normalized_hash": cand.normalized_hash,
        "tags": "|".join(cand.tags),
        "regime": cand.regime,
        "source_event_id": prov.source_event_id,
        "event_type": prov.event_type,
        "session_id": prov.session_id,
        "run_id": prov.run_id,
        "actor_id": prov.actor_id,
        "tool": prov.tool,
        "provenance": prov.provenance,
        # Transaction time: informational only, never an input to a decision.
        "recorded_at": recorded_at_ms,
        "canonical": np.asarray(record.canonical, dtype=np.float32).tobytes(),
    }
    for name, value in (("tick", cand.tick), ("block", cand.block)):
        if value is not None:
            fields[name] = value
    return fields


class RedisMemoryStore:
    """Memory records as Redis hashes indexed by RediSearch.

    The only writer of an agent's records is the worker owning that agent's
    partition, so check-then-write in one pipeline round trip is race-free.
    """

    def __init__(self, redis: Redis, prefix: str, dims: int, *, clock_ms: Any = None) -> None:
        self._redis = redis
        self._schema = memory_schema(prefix, dims)
        self._index = AsyncSearchIndex(self._schema, redis_client=redis)
        self._key_prefix = self._schema.index.prefix
        self._watermarks_key = f"{prefix}:watermarks"
        self._clock_ms = clock_ms

    @property
    def index_name(self) -> str:
        return self._schema.index.name

    def key(self, memory_id: str) -> str:
        return f"{self._key_prefix}:{memory_id}"

    async def ensure_schema(self) -> None:
        if not await self._index.exists():
            await self._index.create(overwrite=False)
            logger.info("created index %s", self.index_name)
            return
        info = await self._redis.ft(self.index_name).info()
        attributes = info.get("attributes") if isinstance(info, dict) else None
        if attributes is not None and len(attributes) != len(self._schema.fields):
            raise SchemaMismatch(f"index {self.index_name} differs from memory_index.yaml")

    async def existing_ids(self, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        async with self._redis.pipeline(transaction=False) as pipe:
            for memory_id in ids:
                pipe.exists(self.key(memory_id))
            flags = await pipe.execute()
        return {memory_id for memory_id, flag in zip(ids, flags, strict=True) if flag}

    async def put_many(self, records: Sequence[MemoryRecord]) -> list[bool]:
        if not records:
            return []
        existing = await self.existing_ids([record.id for record in records])
        now_ms = self._clock_ms() if self._clock_ms else 0
        fresh = [record.id not in existing for record in records]
        seen: set[str] = set()
        async with self._redis.pipeline(transaction=False) as pipe:
            for index, record in enumerate(records):
                if not fresh[index] or record.id in seen:
                    fresh[index] = False
                    continue
                seen.add(record.id)
                pipe.hset(self.key(record.id), mapping=_hash_fields(record, now_ms))
            await pipe.execute()
        return fresh

    async def get_many(self, agent_id: str, ids: Sequence[str]) -> list[StoredMemory | None]:
        async with self._redis.pipeline(transaction=False) as pipe:
            for memory_id in ids:
                pipe.hmget(self.key(memory_id), list(RETURN_FIELDS))
            rows = await pipe.execute()
        found: list[StoredMemory | None] = []
        for row in rows:
            doc = dict(zip(RETURN_FIELDS, row, strict=True))
            ok = doc["memory_id"] is not None and _text(doc["agent_id"]) == agent_id
            found.append(_stored(doc) if ok else None)
        return found

    async def knn(self, agent_id: str, vector: Sequence[float], k: int) -> list[ScoredHit]:
        query = VectorQuery(
            vector=np.asarray(vector, dtype=np.float32).tobytes(),
            vector_field_name="canonical",
            return_fields=list(RETURN_FIELDS),
            filter_expression=tenant_filter(agent_id),
            num_results=k,
            dtype="float32",
        )
        docs = await self._index.query(query)
        hits = [ScoredHit(_stored(doc), 1.0 - float(doc["vector_distance"])) for doc in docs]
        hits.sort(key=lambda hit: (-hit.score, hit.memory.id))
        return hits

    async def full_text(self, agent_id: str, terms: Sequence[str], k: int) -> list[ScoredHit]:
        if not terms:
            return []
        text_query = FullTextQuery(agent_id, tuple(terms), k)
        query = (
            Query(text_query.query_string())
            .scorer("BM25")
            .with_scores()
            .return_fields(*RETURN_FIELDS)
            .paging(0, k)
            .dialect(2)
        )
        result = await self._redis.ft(self.index_name).search(query)
        hits = [ScoredHit(_stored(_doc_fields(doc)), _doc_score(doc)) for doc in _docs(result)]
        hits.sort(key=lambda hit: (-hit.score, hit.memory.id))
        return hits

    async def count(self, agent_id: str) -> int:
        query = Query(str(tenant_filter(agent_id))).no_content().paging(0, 0).dialect(2)
        result = await self._redis.ft(self.index_name).search(query)
        if isinstance(result, dict):
            return int(result.get("total_results", 0))
        return int(result.total)

    async def advance_watermark(self, watermarks: dict[str, int]) -> None:
        if watermarks:
            # ZADD GT keeps the maximum, so a redelivered old batch never moves it back.
            await self._redis.zadd(self._watermarks_key, watermarks, gt=True)

    async def watermark(self, agent_id: str) -> int | None:
        score = await self._redis.zscore(self._watermarks_key, agent_id)
        return None if score is None else int(score)


def _docs(result: Any) -> list[Any]:
    if isinstance(result, dict):  # RESP3
        return list(result.get("results", []))
    return list(result.docs)


def _doc_fields(doc: Any) -> dict[str, Any]:
    if isinstance(doc, dict):
        return {_text(k): v for k, v in doc.get("extra_attributes", {}).items()}
    return {name: getattr(doc, name) for name in RETURN_FIELDS if hasattr(doc, name)}


def _doc_score(doc: Any) -> float:
    return float(doc["score"] if isinstance(doc, dict) else doc.score)
