"""`RecallSource` on Redis: lanes through RediSearch, the graph through the nexus
ZSETs and hyperedge hashes, records through pipelined HMGET. Bound to one agent.

Every method is one round trip however large its batch, and records are cached
for the life of the source (one request), so the walk and the ranking never
fetch a memory twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from redis.asyncio import Redis

from grimoire.streams.model.lexicon import LexicalForm
from grimoire.streams.recall import bm25
from grimoire.streams.recall.bm25 import DEFAULT_BM25, Bm25Parameters, CorpusStats
from grimoire.streams.recall.options import ProvenanceFilters
from grimoire.streams.recall.ports import Anchor, LaneHit, RecallRecord, Vector
from grimoire.streams.recall.walk.daimoi import NodeInfo
from grimoire.tables.codec.fact import decode_links
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.memory_hash import NODE_FIELDS, RECORD_FIELDS, decode_node, decode_row
from grimoire.tables.codec.search_replies import keyed_docs, nocontent_keys
from grimoire.tables.codec.walk_node import DecodedNodes
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.memory.rebuild import LENGTH_FIELD, MEMORIES_FIELD
from grimoire.tables.memory.scripts import RedisScripts
from grimoire.tables.queries import FullTextQuery, KnnQuery
from grimoire.tables.routing import SearchRouting, SearchTarget

# A record is read with its lexical form (the words the index holds for it), so
# the pool is scored on the query's terms without asking the index again.
_RECORD_READ: Final = (*RECORD_FIELDS, "lexical")
# A lexical form as BM25 reads it: how often each word occurs, and how many words.
_Form = tuple[Counter[str], int]


def _form(stored: Any) -> _Form | None:
    """None for a memory without a form (written before store format 3): the index
    holds no words for it either."""
    form = LexicalForm.parse(text_of(stored)) if stored is not None else None
    return (Counter(form.words), form.length) if form is not None and form.words else None


@dataclass(frozen=True, slots=True)
class KnnPolicy:
    """How the vector lanes search HNSW (see `KnnQuery`)."""

    ef_runtime: int | None = 200
    hybrid_policy: str | None = "BATCHES"
    term_depth: int = 50  # per-term BM25 hits summed into the lexical lane
    # A common term does not search the BM25 lane; it only adds its score to the
    # memories the rarer terms found (as in a "common terms" query). Common: held
    # by more than `common_term_share` of the agent's memories (at least
    # `common_term_floor`), or by more than `common_term_docs` in any case.
    # Ranking a term's postings costs time in proportion to their number, about
    # 0.6 µs each here: one term held by 17,000 of 100,000 memories took 11 ms,
    # while its low IDF rarely decides the top 20. On LoCoMo, skipping terms held
    # by over 2 / 5 / 10 % of a conversation's turns scored R@5 0.611 / 0.613 /
    # 0.611 against 0.608 searching every term. None searches every term.
    common_term_docs: int | None = 2_000
    common_term_share: float = 0.05
    common_term_floor: int = 20
    bm25: Bm25Parameters = DEFAULT_BM25


DEFAULT_KNN_POLICY = KnnPolicy()


class RedisRecallSource:
    def __init__(
        self,
        redis: Redis,
        *,
        routing: SearchRouting,
        keys: Keyspace,
        scripts: RedisScripts,
        agent_id: str,
        dims: int,
        knn_policy: KnnPolicy = DEFAULT_KNN_POLICY,
        decoded_nodes: DecodedNodes | None = None,
    ) -> None:
        self._redis = redis
        # The store's, shared by its requests; without one, nothing outlives the request.
        self._decoded = decoded_nodes if decoded_nodes is not None else DecodedNodes(0)
        self._knn = knn_policy
        self._nodes: dict[str, NodeInfo | None] = {}
        self._routing = routing
        self._target: SearchTarget | None = None
        self._keys = keys
        self._scripts = scripts
        self._agent = agent_id
        self._dims = dims
        self._records: dict[str, RecallRecord | None] = {}
        # Each read record's lexical form as its term counts and length (None: a
        # memory written before the forms, which the index holds no words for).
        self._forms: dict[str, _Form | None] = {}
        # False once the agent is seen to have no fact links: no more reads.
        self._may_link = True
        # The agent's term counts read so far (see `_corpus`).
        self._corpus: CorpusStats | None = None

    def _key(self, memory_id: str) -> str:
        return self._keys.memory(self._agent, memory_id)

    async def _index(self) -> SearchTarget:
        """The index holding the agent's memories (on a cluster, its master's)."""
        if self._target is None:
            self._target = await self._routing.target(self._agent)
        return self._target

    # ---- lanes ----------------------------------------------------------------------

    async def knn(
        self, lane: str, vector: Vector, k: int, filters: ProvenanceFilters
    ) -> list[LaneHit]:
        # Only the distance, which the query computes: the memory id is in the key
        # (a cluster master loads no field of another slot's document).
        query = KnnQuery(
            self._agent,
            lane,
            k,
            (),
            filters,
            ef_runtime=max(self._knn.ef_runtime, k) if self._knn.ef_runtime else None,
            hybrid_policy=self._knn.hybrid_policy,
        )
        blob = np.asarray(vector, dtype=np.float32).tobytes()
        target = await self._index()
        reply = await self._redis.execute_command(
            "FT.SEARCH", target.index, *query.arguments(blob), **target.options
        )
        hits = [
            LaneHit(self._keys.memory_id_of(key), 1.0 - float(text_of(fields["distance"])))
            for key, fields in keyed_docs(reply)
        ]
        hits.sort(key=lambda hit: (-hit.score, hit.memory_id))
        return hits

    async def full_text(
        self, terms: Sequence[str], k: int, filters: ProvenanceFilters
    ) -> list[LaneHit]:
        """BM25 as the sum of per-term scores: a pipelined query per term finds
        the memories, then their lexical forms are read and scored here (two
        round trips).

        Terms are searched VERBATIM: RediSearch's stem expansion of a query
        term varied between two indexes built from the same events (a word's
        score moved from 6.2 to 10.9 as `+stem` joined it in one of them), so
        recall answered differently after a replay; and the term counts that
        pick the common terms are unstemmed too.

        RediSearch scores a single term by the book, but a union of terms
        (`a|b|c`) by its own aggregate, which ranks documents full of common
        words (a speaker's name) above ones holding the rare term: on LoCoMo that
        cost 0.08 R@5 against a textbook BM25 over the same turns."""
        if not terms or k <= 0:
            return []
        depth = max(k, self._knn.term_depth)
        corpus = await self._corpus_of(terms)
        searched = self._searched_terms(terms, filters, corpus)
        target = await self._index()
        # First which memories: each searched term's best `depth` by the index's
        # own ranking, without EXPLAINSCORE, which formats an explanation for
        # every posting it ranks (~4 µs each: 0.6 -> 8.5 ms for a term held by
        # 2,000 memories).
        async with self._redis.pipeline(transaction=False) as pipe:
            for term in searched:
                query = FullTextQuery(self._agent, (term,), depth, filters)
                pipe.execute_command(
                    "FT.SEARCH",
                    target.index,
                    query.query_string(),
                    "SCORER",
                    "BM25STD",
                    "NOCONTENT",
                    "VERBATIM",
                    "LIMIT",
                    0,
                    depth,
                    "DIALECT",
                    2,
                    **target.options,
                )
            replies = await pipe.execute()
        found = {
            term: [self._keys.memory_id_of(key) for key in nocontent_keys(reply)]
            for term, reply in zip(searched, replies, strict=True)
        }
        pooled = sorted({memory_id for ids in found.values() for memory_id in ids})
        # Then every term's score on what it must score, from the agent's own
        # counts: a searched term on the memories it found; a common term's (cut
        # at `depth`, or never searched) on every pooled memory too, so each
        # pooled total is the full BM25 sum (on LoCoMo the cut alone cost 0.13
        # R@5 against a textbook BM25).
        jobs = []
        for term in terms:
            ids = found.get(term)
            if ids is None or len(ids) >= depth:
                jobs.append((term, pooled))
            elif ids:
                jobs.append((term, sorted(ids)))
        # Scored from the memories' lexical forms (the words the index holds), read
        # in one round trip: a scoring search per term cost ~0.3 ms of Redis each.
        totals = self._bm25(jobs, await self._forms_of(pooled), corpus)
        hits = [LaneHit(memory_id, total) for memory_id, total in totals.items()]
        hits.sort(key=lambda hit: (-hit.score, hit.memory_id))
        return hits[:k]

    async def _corpus_of(self, terms: Sequence[str]) -> CorpusStats:
        """The agent's counts for these terms (read once per request and term)."""
        known = self._corpus
        wanted = [t for t in dict.fromkeys(terms) if known is None or t not in known.holding]
        if known is not None and not wanted:
            return known
        values = await self._redis.hmget(
            self._keys.terms(self._agent), [*wanted, MEMORIES_FIELD, LENGTH_FIELD]
        )
        holding = dict(known.holding) if known is not None else {}
        holding.update((t, int(v or 0)) for t, v in zip(wanted, values, strict=False))
        self._corpus = CorpusStats(int(values[-2] or 0), int(values[-1] or 0), holding)
        return self._corpus

    async def _forms_of(self, memory_ids: Sequence[str]) -> dict[str, _Form | None]:
        """The memories' lexical forms (read once per request)."""
        missing = [i for i in memory_ids if i not in self._forms]
        if missing:
            rows = await self._scripts.hmget_many([self._key(i) for i in missing], ["lexical"])
            for memory_id, (lexical,) in zip(missing, rows, strict=True):
                self._forms[memory_id] = _form(lexical)
        return {i: self._forms.get(i) for i in memory_ids}

    def _searched_terms(
        self, terms: Sequence[str], filters: ProvenanceFilters, corpus: CorpusStats
    ) -> tuple[str, ...]:
        """The terms the lane searches: all but the common ones (see
        `KnnPolicy`), and at least the rarest one. A provenance filter narrows
        each term's postings in the index itself, so then every term is searched."""
        policy = self._knn
        if policy.common_term_docs is None or len(terms) < 2 or not filters.empty:
            return tuple(terms)
        held = corpus.holding
        share = max(policy.common_term_floor, policy.common_term_share * corpus.memories)
        cutoff = min(policy.common_term_docs, share)
        searched = tuple(term for term in terms if held[term] <= cutoff)
        return searched or (min(terms, key=lambda term: (held[term], term)),)

    async def lexical(self, terms: Sequence[str], memory_ids: Sequence[str]) -> dict[str, float]:
        """BM25 of `terms` on the given live memories, from their lexical forms as
        read with their records: the index holds those same words, so the counts
        are the ones it would report (a search per term cost ~0.3 ms of Redis and
        the parsing of its explanation, for memories the pool has read already)."""
        ids = tuple(sorted(set(memory_ids)))
        if not ids or not terms:
            return {}
        corpus = await self._corpus_of(terms)
        records = await self.records(ids)
        live = [i for i in ids if (record := records.get(i)) is not None and record.live]
        jobs = [(term, live) for term in dict.fromkeys(terms)]
        return self._bm25(jobs, self._forms, corpus)

    def _bm25(
        self,
        jobs: Sequence[tuple[str, Sequence[str]]],
        forms: Mapping[str, _Form | None],
        corpus: CorpusStats,
    ) -> dict[str, float]:
        """Each memory's BM25 sum over the (term, memory ids) jobs, in job order,
        counted in the memories' lexical forms."""
        totals: dict[str, float] = {}
        average = corpus.average_length()
        for term, ids in jobs:
            idf = corpus.idf(term)
            for memory_id in ids:
                form = forms.get(memory_id)
                if form is not None and (tf := form[0][term]):
                    score = bm25.term_score(tf, form[1], idf, average, self._knn.bm25)
                    totals[memory_id] = totals.get(memory_id, 0.0) + score
        return totals

    async def adjacent(self, anchors: Sequence[Anchor]) -> dict[str, tuple[str, ...]]:
        if not anchors:
            return {}
        rows = await self._scripts.around(
            [self._keys.nexus(self._agent, anchor.key) for anchor in anchors],
            [anchor.ts_ms for anchor in anchors],
        )
        found: dict[str, tuple[str, ...]] = {}
        for anchor, (after, before) in zip(anchors, rows, strict=True):
            near = [_first_other(before, anchor.memory_id), _first_other(after, anchor.memory_id)]
            found[anchor.memory_id] = tuple(
                dict.fromkeys([*found.get(anchor.memory_id, ()), *(n for n in near if n)])
            )
        return found

    # ---- records and graph ---------------------------------------------------------

    async def records(self, memory_ids: Sequence[str]) -> dict[str, RecallRecord]:
        missing = sorted({i for i in memory_ids if i not in self._records})
        if missing:
            rows, accessed = await self._scripts.records(
                [self._key(i) for i in missing],
                [self._keys.usage(self._agent, i) for i in missing],
                _RECORD_READ,
            )
            for memory_id, row, last in zip(missing, rows, accessed, strict=True):
                *fields, lexical = row
                self._records[memory_id] = decode_row(fields, last, self._agent, self._dims)
                self._forms[memory_id] = _form(lexical)
        return {i: r for i in memory_ids if (r := self._records.get(i)) is not None}

    async def nodes(self, memory_ids: Sequence[str]) -> dict[str, NodeInfo]:
        missing = sorted({i for i in memory_ids if i not in self._nodes})
        if missing:
            packed = await self._redis.hmget(self._keys.nodes(self._agent), missing)
            unpacked = []
            for memory_id, raw in zip(missing, packed, strict=True):
                node = self._decoded.node(memory_id, raw) if raw is not None else None
                if node is None:
                    unpacked.append(memory_id)
                else:
                    self._nodes[memory_id] = node
            if unpacked:
                # Memories written before the node table existed: read their hashes.
                keys = [self._key(memory_id) for memory_id in unpacked]
                rows = await self._scripts.hmget_many(keys, list(NODE_FIELDS))
                for memory_id, row in zip(unpacked, rows, strict=True):
                    self._nodes[memory_id] = decode_node(row, self._agent)
        return {i: n for i in memory_ids if (n := self._nodes.get(i)) is not None}

    async def linked_keys(self, keys: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        """Facts' entity links of `keys` (`Keyspace.fact_links`); an agent without
        any costs one round trip per request."""
        if not self._may_link or not keys:
            return {}
        table = self._keys.fact_links(self._agent)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.exists(table)
            pipe.hmget(table, list(keys))
            exists, rows = await pipe.execute()
        if not exists:
            self._may_link = False
            return {}
        return {key: decode_links(raw) for key, raw in zip(keys, rows, strict=True) if raw}

    @property
    def may_link(self) -> bool:
        return self._may_link

    async def degrees(self, keys: Sequence[str]) -> dict[str, int]:
        if not keys:
            return {}
        nexus = [self._keys.nexus(self._agent, key) for key in keys]
        counts = await self._scripts.cardinalities(nexus)
        return dict(zip(keys, counts, strict=True))

    async def newest(self, keys: Sequence[str], limit: int) -> dict[str, list[str]]:
        """Newest members per key; their walk nodes come in the same round trip
        and wait in the node cache for the `nodes` call that follows."""
        return (await self._newest(keys, limit, degrees=False))[1]

    async def neighbourhood(
        self, keys: Sequence[str], limit: int
    ) -> tuple[dict[str, int], dict[str, list[str]]]:
        if limit <= 0:
            return await self.degrees(keys), {key: [] for key in keys}
        return await self._newest(keys, limit, degrees=True)

    async def _newest(
        self, keys: Sequence[str], limit: int, *, degrees: bool
    ) -> tuple[dict[str, int], dict[str, list[str]]]:
        if not keys or limit <= 0:
            return {}, {key: [] for key in keys}
        nexus = [self._keys.nexus(self._agent, key) for key in keys]
        table = self._keys.nodes(self._agent)
        lists, raw_ids, packed, counts = await self._scripts.newest_with_nodes(
            table, nexus, limit, degrees=degrees
        )
        ids = [text_of(raw_id) for raw_id in raw_ids]
        cached = self._nodes
        for memory_id, raw in zip(ids, packed, strict=True):
            if raw is not None and memory_id not in cached:
                node = self._decoded.node(memory_id, raw)
                if node is not None:
                    cached[memory_id] = node
        newest = {
            key: [ids[at] for at in positions] for key, positions in zip(keys, lists, strict=True)
        }
        return dict(zip(keys, counts, strict=True)) if degrees else {}, newest

    async def hyperedges(self, edge_ids: Sequence[str]) -> dict[str, Mapping[str, str]]:
        if not edge_ids:
            return {}
        async with self._redis.pipeline(transaction=False) as pipe:
            for edge in edge_ids:
                pipe.hgetall(self._keys.hyperedge(self._agent, edge))
            rows = await pipe.execute()
        return {
            edge: {text_of(k): text_of(v) for k, v in row.items()}
            for edge, row in zip(edge_ids, rows, strict=True)
            if row
        }

    async def touch(self, memory_ids: Sequence[str], as_of_ms: int) -> None:
        await self._scripts.touch([self._keys.usage(self._agent, i) for i in memory_ids], as_of_ms)


def _first_other(members: Sequence[Any], memory_id: str) -> str | None:
    return next((m for m in map(text_of, members) if m != memory_id), None)
