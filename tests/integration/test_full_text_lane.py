"""The BM25 lane against real RediSearch: a term whose per-term list is cut at
`term_depth` is still scored for every pooled document, so each pooled total is
the full BM25 sum however common the term is."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from grimoire.infra.settings import Settings
from grimoire.streams.model.lexicon import lexical_form, query_terms
from grimoire.streams.model.records import MemoryRecord
from grimoire.streams.recall.options import NO_FILTERS, ProvenanceFilters
from grimoire.streams.write.changes import WriteBatch
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.memory.recall_source import KnnPolicy
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.queries import FullTextQuery
from grimoire.tables.redis_client import create_redis
from tests.support.builders import memory_candidate, memory_record
from tests.support.explain_score import term_matches
from tests.support.stored import drop_deployment
from tests.support.vectors import flat_unit

pytestmark = pytest.mark.integration

T0 = 1_790_000_000_000
AGENT = "golem-bm25"
# "jon" is everywhere; only the last text also says "banker".
TEXTS = [f"jon went running on day {n} with friends jon jon" for n in range(12)]
TEXTS.append("jon lost his job as a banker")


def _record(n: int, text: str) -> MemoryRecord:
    return memory_record(memory_candidate(AGENT, f"ev-{n}", text, ts=T0 + n), flat_unit(384))


@pytest.fixture
async def redis(settings: Settings) -> AsyncIterator[Redis]:
    client = create_redis(settings.redis.url, 4)
    prefix = f"ft{uuid.uuid4().hex[:8]}"
    store = RedisMemoryStore(client, prefix, 384)
    await store.ensure_schema()
    await store.commit(WriteBatch(records=tuple(_record(n, t) for n, t in enumerate(TEXTS))))
    client.grimoire_prefix = prefix  # type: ignore[attr-defined]
    yield client
    await drop_deployment(client, prefix)


async def test_a_cut_common_term_is_still_scored_for_pooled_documents(redis: Redis) -> None:
    prefix = redis.grimoire_prefix  # type: ignore[attr-defined]
    shallow = RedisMemoryStore(redis, prefix, 384, knn_policy=KnnPolicy(term_depth=2))
    deep = RedisMemoryStore(redis, prefix, 384, knn_policy=KnnPolicy(term_depth=100))
    banker = _record(12, TEXTS[12]).id
    terms = ("jon", "banker")
    cut = await shallow.recall_source(AGENT).full_text(terms, 2, ProvenanceFilters())
    full = await deep.recall_source(AGENT).full_text(terms, 100, ProvenanceFilters())
    by_id = {hit.memory_id: hit.score for hit in full}
    assert cut[0].memory_id == banker
    # Without the rescoring round the banker turn would carry only its "banker"
    # share: "jon" ranks it last among 13 and the per-term list stops at 2.
    assert cut[0].score == pytest.approx(by_id[banker])
    jon_only = await deep.recall_source(AGENT).full_text(("jon",), 100, ProvenanceFilters())
    banker_only = await deep.recall_source(AGENT).full_text(("banker",), 100, ProvenanceFilters())
    jon_share = {hit.memory_id: hit.score for hit in jon_only}[banker]
    assert cut[0].score == pytest.approx(jon_share + banker_only[0].score)
    for hit in cut:
        assert hit.score == pytest.approx(by_id[hit.memory_id])


async def test_a_term_held_by_many_memories_only_scores_what_rarer_terms_found(
    redis: Redis,
) -> None:
    prefix = redis.grimoire_prefix  # type: ignore[attr-defined]
    capped = RedisMemoryStore(redis, prefix, 384, knn_policy=KnnPolicy(common_term_docs=5))
    shared = KnnPolicy(common_term_share=0.5, common_term_floor=2)  # over 6.5 of 13 memories
    by_share = RedisMemoryStore(redis, prefix, 384, knn_policy=shared)
    every = RedisMemoryStore(redis, prefix, 384, knn_policy=KnnPolicy(common_term_docs=None))
    banker = _record(12, TEXTS[12]).id
    full = {
        hit.memory_id: hit.score
        for hit in await every.recall_source(AGENT).full_text(("jon", "banker"), 100, NO_FILTERS)
    }
    assert len(full) == 13  # searching "jon" finds every memory

    # "jon" is held by 13 memories: it does not search, it adds to what "banker" found.
    hits = await capped.recall_source(AGENT).full_text(("jon", "banker"), 100, NO_FILTERS)
    assert [hit.memory_id for hit in hits] == [banker]
    assert hits[0].score == pytest.approx(full[banker])

    # The same by share: "jon" is held by more than half of the agent's memories.
    by_share_hits = await by_share.recall_source(AGENT).full_text(("jon", "banker"), 9, NO_FILTERS)
    assert by_share_hits == hits

    # Every term common: the rarest ("friends", 12 memories) still searches.
    both = await capped.recall_source(AGENT).full_text(("jon", "friend"), 100, NO_FILTERS)
    assert len(both) == 12 and banker not in {hit.memory_id for hit in both}

    # A provenance filter narrows the postings in the index: every term searches.
    narrowed = ProvenanceFilters(since_ms=T0)
    filtered = await capped.recall_source(AGENT).full_text(("jon", "banker"), 100, narrowed)
    assert {hit.memory_id: hit.score for hit in filtered} == pytest.approx(full)


async def test_term_counts_count_each_memory_once(redis: Redis) -> None:
    prefix = redis.grimoire_prefix  # type: ignore[attr-defined]
    counts_key = Keyspace(prefix).terms(AGENT)
    length = sum(lexical_form(t, T0 + n).length for n, t in enumerate(TEXTS))
    expected = [b"13", b"1", b"12", b"13", b"13", str(length).encode()]
    # Counted by stem ("friends" as "friend") and by event time in words.
    counted = ["jon", "banker", "friend", "2026", "#memories", "#length"]
    assert await redis.hmget(counts_key, counted) == expected
    store = RedisMemoryStore(redis, prefix, 384)
    # A redelivered batch rewrites the memories but counts nothing twice.
    await store.commit(WriteBatch(records=tuple(_record(n, t) for n, t in enumerate(TEXTS))))
    assert await redis.hmget(counts_key, counted) == expected


async def test_stems_match_verbatim_without_the_index_expanding_them(redis: Redis) -> None:
    # RediSearch's stem expansion of a query term differed between two indexes
    # built from the same events, so memories are indexed by the stems the
    # lexical form made and the lane matches them as written: the query's terms
    # go through the same form (`query_terms`), the index adds nothing.
    prefix = redis.grimoire_prefix  # type: ignore[attr-defined]
    source = RedisMemoryStore(redis, prefix, 384).recall_source(AGENT)
    ids = [_record(n, text).id for n, text in enumerate(TEXTS)]
    assert query_terms("Running") == ("run",)
    running = await source.full_text(query_terms("Running"), 20, NO_FILTERS)
    assert {hit.memory_id for hit in running} == set(ids[:12])
    assert set(await source.lexical(("run",), ids)) == set(ids[:12])
    assert await source.full_text(("running",), 20, NO_FILTERS) == []
    assert await source.lexical(("running",), ids) == {}


async def test_indexed_length_is_the_length_the_index_counts(redis: Redis) -> None:
    # The agent's average length is summed from the lexical forms at write time;
    # each memory's own length comes from the index at query time: they must
    # count alike for the length normalisation to mean anything.
    prefix = redis.grimoire_prefix  # type: ignore[attr-defined]
    agent = "golem-lengths"
    texts = [
        "zzq The cat sat on the mat, with another cat! x 42 don't stop-words e-mail",
        "zzq Tab\there\nnewline x|y/z\\w?q`b",
        "zzq No NOT such Such A",
        "zzq ÉCOLE École 3.14 v1.2.3 user@example.com snake_case",
        "zzq emoji \U0001f389 party \u2014 dash \u2013 en",
        "zzq \uff26\uff35\uff2c\uff2c \xa1hola! \xbfqu\xe9?",
    ]
    store = RedisMemoryStore(redis, prefix, 384)
    records = [
        memory_record(memory_candidate(agent, f"len-{n}", t, ts=T0 + n), flat_unit(384))
        for n, t in enumerate(texts)
    ]
    await store.commit(WriteBatch(records=tuple(records)))
    reply = await redis.execute_command(
        "FT.SEARCH", Keyspace(prefix).index_name, FullTextQuery(agent, ("zzq",), 9).query_string(),
        "SCORER", "BM25STD", "WITHSCORES", "EXPLAINSCORE", "NOCONTENT", "VERBATIM",
        "DIALECT", 2,
    )  # fmt: skip
    by_key = {match.key: match.length for match in term_matches(reply, "zzq")}
    keys = Keyspace(prefix)
    forms = {r.id: lexical_form(r.candidate.text, r.candidate.ts_ms) for r in records}
    assert {keys.memory_id_of(k): n for k, n in by_key.items()} == {
        memory_id: form.length for memory_id, form in forms.items()
    }
    total = await redis.hget(keys.terms(agent), "#length")
    assert int(total) == sum(form.length for form in forms.values())
    # Recall scores from the stored forms: each word's count there must be the
    # index's count of it too ("cat" and "école" twice, dots kept as "_").
    for word in ("cat", "stop", "word", "école", "3_14", "v1_2_3", "example_com", "snake_case"):
        reply = await redis.execute_command(
            "FT.SEARCH", keys.index_name, FullTextQuery(agent, (word,), 9).query_string(),
            "SCORER", "BM25STD", "WITHSCORES", "EXPLAINSCORE", "NOCONTENT", "VERBATIM",
            "DIALECT", 2,
        )  # fmt: skip
        counted = {keys.memory_id_of(m.key): int(m.tf) for m in term_matches(reply, word)}
        held = {i: f.words.count(word) for i, f in forms.items() if word in f.words}
        assert counted == held, word
        assert held, word


async def test_lexical_scores_do_not_depend_on_the_index_history(redis: Redis) -> None:
    # The same memories, in a deployment whose index also holds another tenant's
    # memories and the garbage of rewritten and deleted documents: RediSearch's
    # own BM25 statistics differ, the lane's scores must not.
    prefix = redis.grimoire_prefix  # type: ignore[attr-defined]
    source = RedisMemoryStore(redis, prefix, 384).recall_source(AGENT)
    ids = [_record(n, text).id for n, text in enumerate(TEXTS)]
    terms = ("jon", "banker", "friends", "day")
    before = (await source.full_text(terms, 20, NO_FILTERS), await source.lexical(terms, ids))

    busy = f"ft{uuid.uuid4().hex[:8]}"
    other = RedisMemoryStore(redis, busy, 384)
    await other.ensure_schema()
    try:
        noise = [
            memory_record(
                memory_candidate(tenant, f"n-{n}", f"banker jon friends {n} " * (n % 5 + 1), ts=T0),
                flat_unit(384),
            )
            for tenant in ("golem-noise-1", "golem-noise-2")
            for n in range(40)
        ]
        await other.commit(WriteBatch(records=tuple(noise)))
        mine = tuple(_record(n, t) for n, t in enumerate(TEXTS))
        for _ in range(3):  # rewritten: each leaves its old postings behind
            await other.commit(WriteBatch(records=mine))
        await redis.delete(*(Keyspace(busy).memory("golem-noise-1", r.id) for r in noise[:40]))
        moved = other.recall_source(AGENT)
        after = (await moved.full_text(terms, 20, NO_FILTERS), await moved.lexical(terms, ids))
        assert after == before
    finally:
        await drop_deployment(redis, busy)
