"""The memory store's read path (`RedisRecallReads`): what recall reads beside its
`RecallSource` (the `RecallReads` port), and the deployment's reads by id, by lane
and counts (the rest of `MemoryStore`'s reads, as tests, the CLI and the
maintenance cadence ask them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from redis.commands.search.query import Query
from redisvl.query import VectorQuery

from grimoire.streams.recall.options import NO_FILTERS
from grimoire.streams.write.changes import StateVector
from grimoire.tables.codec.actors import actors_found
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.memory_hash import RETURN_FIELDS, StoredMemory, stored_memory
from grimoire.tables.codec.search_replies import keyed_docs, total_results
from grimoire.tables.codec.watermark import WATERMARK_MEMBER, WINDOW_MEMBER
from grimoire.tables.memory.core import RedisMemoryConcern
from grimoire.tables.memory.rebuild import MEMORIES_FIELD
from grimoire.tables.queries import live_filter, tenant_filter

__all__ = ["RedisRecallReads", "ScoredHit"]


@dataclass(frozen=True, slots=True)
class ScoredHit:
    memory: StoredMemory
    score: float  # larger is better in every lane


class RedisRecallReads(RedisMemoryConcern):
    """Reads only: state vectors and watermarks from the agent's state keys,
    records from their hashes, searches on the index holding the agent."""

    async def state_vectors(self, agent_ids: Sequence[str]) -> dict[str, StateVector]:
        return await self.core.state.state_vectors(agent_ids)

    async def get_many(self, agent_id: str, ids: Sequence[str]) -> list[StoredMemory | None]:
        async with self.core.redis.pipeline(transaction=False) as pipe:
            for memory_id in ids:
                pipe.hmget(self.core.key(agent_id, memory_id), list(RETURN_FIELDS))
            rows = await pipe.execute()
        found: list[StoredMemory | None] = []
        for row in rows:
            doc = dict(zip(RETURN_FIELDS, row, strict=True))
            ok = doc["memory_id"] is not None and text_of(doc["agent_id"]) == agent_id
            found.append(stored_memory(doc) if ok else None)
        return found

    async def knn(
        self, agent_id: str, vector: Sequence[float], k: int, *, lane: str = "canonical"
    ) -> list[ScoredHit]:
        query = VectorQuery(
            vector=np.asarray(vector, dtype=np.float32).tobytes(),
            vector_field_name=lane,
            return_fields=[],
            filter_expression=live_filter(agent_id),
            num_results=k,
            dtype="float32",
        )
        reply = await self._search(agent_id, *query.get_args(), "PARAMS", *_params(query))
        scored = [
            (self.core.keys.memory_id_of(key), 1.0 - float(text_of(fields["vector_distance"])))
            for key, fields in keyed_docs(reply)
        ]
        return await self._hits(agent_id, scored)

    async def full_text(self, agent_id: str, terms: Sequence[str], k: int) -> list[ScoredHit]:
        """Any term may match, scored as the recall lane scores it (BM25 from the
        agent's own counts, `RedisRecallSource.full_text`), with every term
        searched, common ones included."""
        if not terms:
            return []
        every_term = replace(self.core.knn_policy, common_term_docs=None)
        lane = await self.core.source(agent_id, every_term).full_text(tuple(terms), k, NO_FILTERS)
        return await self._hits(agent_id, [(hit.memory_id, hit.score) for hit in lane])

    async def _hits(self, agent_id: str, scored: Sequence[tuple[str, float]]) -> list[ScoredHit]:
        """A search's (memory id, score) as hits, each record read from its hash (a
        cluster master loads no field of another slot's document)."""
        records = await self.get_many(agent_id, [memory_id for memory_id, _ in scored])
        hits = [
            ScoredHit(record, score)
            for record, (_, score) in zip(records, scored, strict=True)
            if record is not None
        ]
        hits.sort(key=lambda hit: (-hit.score, hit.memory.id))
        return hits

    async def count(self, agent_id: str) -> int:
        query = Query(str(tenant_filter(agent_id))).no_content().paging(0, 0).dialect(2)
        return total_results(await self._search(agent_id, *query.get_args()))

    async def estimated_counts(self, agent_ids: Sequence[str]) -> dict[str, int]:
        """How many memories each agent has had written (the term counts'
        `#memories`: never less than `count` but for retractions): one pipelined
        round trip for many agents, where `count` is a search each."""
        if not agent_ids:
            return {}
        async with self.core.redis.pipeline(transaction=False) as pipe:
            for agent_id in agent_ids:
                pipe.hget(self.core.graph.keys.terms(agent_id), MEMORIES_FIELD)
            counts = await pipe.execute()
        return {a: int(text_of(c)) if c else 0 for a, c in zip(agent_ids, counts, strict=True)}

    async def _search(self, agent_id: str, *arguments: Any) -> Any:
        """FT.SEARCH on the index holding `agent_id`'s memories (raw reply)."""
        target = await self.core.routing.target(agent_id)
        return await self.core.redis.execute_command(
            "FT.SEARCH", target.index, *arguments, **target.options
        )

    async def watermark(self, agent_id: str) -> int | None:
        score = await self.core.redis.zscore(self.core.keys.watermark(agent_id), WATERMARK_MEMBER)
        return None if score is None else int(score)

    async def contrarian_served(self, agent_id: str) -> int | None:
        score = await self.core.redis.zscore(
            self.core.keys.contrarian_window(agent_id), WINDOW_MEMBER
        )
        return None if score is None else int(score)

    async def actors_named(self, agent_id: str, candidates: Sequence[str]) -> frozenset[str]:
        if not candidates:
            return frozenset()
        found = await self.core.redis.smismember(self.core.keys.actors(agent_id), candidates)
        return actors_found(candidates, found)


def _params(query: VectorQuery) -> list[Any]:
    """A redisvl query's PARAMS (count, then name/value pairs) for a raw FT.SEARCH."""
    params = query.params
    return [len(params) * 2, *(part for item in params.items() for part in item)]
