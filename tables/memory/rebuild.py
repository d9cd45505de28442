"""Rebuild an agent's derived recall structures from its memory hashes.

The walk's node table, the BM25 lane's term counts (see graph.py) and the set of
the agent's actors are kept by the write path. A store written before they existed
still recalls correctly (the walk reads the memory hashes instead, every term
searches, a query is embedded with the names it holds), only more slowly or less
well; `rebuild_derived` fills them in for one agent, and can be re-run any time:
all three are recomputed from the hashes, never added to.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from redis.asyncio import Redis

from grimoire.streams.model.lexicon import LexicalForm
from grimoire.tables.codec.actors import stored_actor
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.memory_hash.writing import lexical_form_of
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.memory.graph import RedisGraph
from grimoire.tables.transaction import agent_transaction

logger = logging.getLogger(__name__)

MEMORIES_FIELD = "#memories"  # the term-count hash's count of memories (never a term)
LENGTH_FIELD = "#length"  # and their summed indexed length (lexical form words)
MAX_COUNTED_TERMS = 1_000  # every distinct term of a memory, not a query's first few
_BATCH = 500


@dataclass(frozen=True, slots=True)
class RebuildReport:
    agent_id: str
    memories: int
    terms: int


@dataclass(frozen=True, slots=True)
class CountedText:
    """What a memory adds to its agent's term counts."""

    length: int
    terms: tuple[str, ...]


def counted_text(form: LexicalForm) -> CountedText:
    """Its indexed length, and every distinct word of its lexical form (not a
    query's first few), at write time, on a rebuild and when it is retracted."""
    return CountedText(form.length, form.terms()[:MAX_COUNTED_TERMS])


async def rebuild_derived(
    redis: Redis,
    prefix: str,
    agent_id: str,
    progress: Callable[[int, int], None] | None = None,
) -> RebuildReport:
    """Re-pack every memory of `agent_id` into its node table, recount its terms
    and gather its actors anew. Writes that land while it runs may be missed by the counts (they are
    an estimate); the node table is re-packed from the hashes as they stand.
    `progress(done, total)` is told after each batch of the memories scanned."""
    graph = RedisGraph(redis, prefix)
    ids: list[str] = []
    counts: Counter[str] = Counter()
    actors: set[str] = set()
    keys = [
        key
        async for key in redis.scan_iter(
            match=Keyspace(prefix).agent_memory_pattern(agent_id), count=1_000
        )
    ]
    for start in range(0, len(keys), _BATCH):
        batch = keys[start : start + _BATCH]
        async with redis.pipeline(transaction=False) as pipe:
            for key in batch:
                pipe.hmget(key, ["agent_id", "memory_id", "text", "ts", "lexical", "actor_id"])
            rows = await pipe.execute()
        forms: dict[str, str] = {}
        for key, (owner, memory_id, text, ts, stored, actor) in zip(batch, rows, strict=True):
            if owner is None or memory_id is None or text_of(owner) != agent_id:
                continue
            ids.append(text_of(memory_id))
            if name := stored_actor(actor):
                actors.add(name)
            form = lexical_form_of(text, ts)
            if stored is None or text_of(stored) != form.text:
                # A memory written before the lexical form (or by an older form):
                # the index finds it by its words only once they are written.
                forms[text_of(key)] = form.text
            counted = counted_text(form)
            counts.update(counted.terms)
            counts[LENGTH_FIELD] += counted.length
        if progress is not None:
            progress(min(start + _BATCH, len(keys)), len(keys))
    counts[MEMORIES_FIELD] = len(ids)
    counts.setdefault(LENGTH_FIELD, 0)  # present even for an agent with no memories
    terms_key = graph.keys.terms(agent_id)
    async with agent_transaction(redis, agent_id) as pipe:
        pipe.delete(terms_key, graph.keys.nodes(agent_id), graph.keys.actors(agent_id))
        if actors:
            pipe.sadd(graph.keys.actors(agent_id), *sorted(actors))
        items = sorted(counts.items())
        for start in range(0, len(items), _BATCH):
            pipe.hset(terms_key, mapping=dict(items[start : start + _BATCH]))
        for start in range(0, len(ids), _BATCH):
            graph.sync_nodes(pipe, agent_id, ids[start : start + _BATCH])
        for key, words in sorted(forms.items()):
            pipe.hset(key, "lexical", words)
        await pipe.execute()
    logger.info("rebuilt %s: %d memories, %d terms", agent_id, len(ids), len(counts) - 2)
    return RebuildReport(agent_id, len(ids), len(counts) - 2)
