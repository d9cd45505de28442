"""The deployment's whole memory store (`RedisMemoryStore`, the `MemoryStore` port):
every concern's class over one core, with the index schema and metrics; and
ingest's two concerns over one core (`RedisIngestStore`, the `IngestStore` port)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Unpack

from redis.asyncio import Redis
from redisvl.exceptions import RedisSearchError
from redisvl.index import AsyncSearchIndex
from redisvl.schema import IndexSchema
from redisvl.schema.fields import TagField

from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.exceptions import SchemaMismatch
from grimoire.tables.memory.core import CoreOptions, RedisMemoryCore
from grimoire.tables.memory.outcome_effects import RedisOutcomeEffects
from grimoire.tables.memory.reads import RedisRecallReads
from grimoire.tables.memory.recall_source import KnnPolicy
from grimoire.tables.memory.usage import RedisUsageLedger
from grimoire.tables.memory.writes import RedisMemoryWrites
from grimoire.tables.schema.memory_index import memory_schema

__all__ = ["RedisIngestStore", "RedisMemoryStore", "schema_differences"]

logger = logging.getLogger(__name__)


def schema_differences(schema: IndexSchema, attributes: Sequence[Any]) -> list[str]:
    """How a live index (FT.INFO `attributes`) differs from `schema`: fields missing or
    extra, another type, or a TAG's separator or case sensitivity (what decides
    whether `TENV1` matches `tenV1`)."""
    live: dict[str, list[str]] = {}
    for attribute in attributes:
        tokens = [text_of(token) for token in attribute]
        if "attribute" in tokens:
            live[tokens[tokens.index("attribute") + 1]] = tokens
    found: list[str] = []
    for name in sorted(set(live) - set(schema.fields)):
        found.append(f"{name} is not in the schema")
    for name, wanted in schema.fields.items():
        if name not in live:
            found.append(f"{name} is missing")
            continue
        tokens = live[name]
        kind = tokens[tokens.index("type") + 1].lower() if "type" in tokens else ""
        expected = str(getattr(wanted.type, "value", wanted.type))  # vector's is a plain str
        if kind != expected:
            found.append(f"{name} is {kind or 'untyped'}, not {expected}")
            continue
        if isinstance(wanted, TagField):
            separator = tokens[tokens.index("SEPARATOR") + 1] if "SEPARATOR" in tokens else ","
            if separator != wanted.attrs.separator:
                found.append(f"{name} splits on {separator!r}, not {wanted.attrs.separator!r}")
            if ("CASESENSITIVE" in tokens) != wanted.attrs.case_sensitive:
                sensitive = "case-sensitive" if wanted.attrs.case_sensitive else "case-folding"
                found.append(f"{name} is not {sensitive}")
    return found


class RedisIngestStore(RedisMemoryWrites, RedisOutcomeEffects):
    """Ingest's storage: the write path, and learning's effects for the outcomes and
    run credits that wait for the memories a batch writes."""


class RedisMemoryStore(RedisMemoryWrites, RedisOutcomeEffects, RedisRecallReads, RedisUsageLedger):
    """The memory store a deployment's tests, CLI, benchmarks and inspector hold:
    every concern over one core, which it builds (its handlers' concerns are built
    over the same core, `store.core`)."""

    def __init__(
        self, redis: Redis, prefix: str, dims: int, **options: Unpack[CoreOptions]
    ) -> None:
        super().__init__(RedisMemoryCore(redis, prefix, dims, **options))
        # What maintenance, the inspector and tests reach beyond the ports: the
        # core's own objects, which it never rebinds.
        self.keys = self.core.keys
        self.graph = self.core.graph
        self.state = self.core.state
        self.decay = self.core.decay
        self.routing = self.core.routing

    @property
    def knn_policy(self) -> KnnPolicy:
        return self.core.knn_policy

    @property
    def index_name(self) -> str:
        return self.core.index_name

    def key(self, agent_id: str, memory_id: str) -> str:
        return self.core.key(agent_id, memory_id)

    async def ensure_schema(self) -> None:
        """The index, created where missing and checked against the schema: the one
        index, or on a cluster each master's (`grimoire.tables.routing`)."""
        for master in await self.routing.master_indexes():
            schema = self.core.schema
            index = self.core.index
            if master.index != self.index_name or master.client is not self.core.redis:
                schema = memory_schema(self.keys.prefix, self.core.dims, master.index)
                index = AsyncSearchIndex(schema, redis_client=master.client)
            await self._ensure_index(index, schema, master.client)

    async def _ensure_index(self, index: AsyncSearchIndex, schema: IndexSchema, redis: Any) -> None:
        name = schema.index.name
        if not await index.exists():
            try:
                await index.create(overwrite=False)
            except RedisSearchError as exc:
                # Two workers starting together both saw no index: the other one
                # created it first. Checked against the schema below like any other.
                if "already exists" not in str(exc).lower():
                    raise
                logger.info("index %s was created by another worker", name)
            else:
                logger.info("created index %s", name)
                await self._wait_for_initial_scan(redis, name)
                return
        info = await redis.ft(name).info()
        attributes = info.get("attributes") if isinstance(info, dict) else None
        if attributes is None:
            return
        differences = schema_differences(schema, attributes)
        if differences:
            # Never rebuilt silently: dropping the index (not the hashes) and letting
            # the worker create it again is the operator's call (docs/cluster.md
            # "Upgrading a store"); until then the old index may answer for the wrong tenant.
            raise SchemaMismatch(
                f"index {name} differs from memory_index.yaml: " + "; ".join(differences)
            )

    async def _wait_for_initial_scan(self, redis: Any, name: str, timeout_s: float = 60.0) -> None:
        """A new index scans the existing keyspace in the background, and searches
        meanwhile see part of it; wait so the first recall is complete."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while asyncio.get_running_loop().time() < deadline:
            info = await redis.ft(name).info()
            indexing = (
                info.get("indexing", info.get(b"indexing", 0)) if isinstance(info, dict) else 0
            )
            if float(text_of(indexing)) == 0:
                return
            await asyncio.sleep(0.05)
        logger.warning("index %s still scanning after %.0fs", name, timeout_s)

    async def metrics(self) -> dict[str, float]:
        raw = await self.core.redis.hgetall(self.keys.metrics)
        return {text_of(k): float(text_of(v)) for k, v in raw.items()}
