"""IngestHandler and RecallHandler against in-memory fakes of the store and embedder."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from grimoire.agents.ingest import IngestHandler, IngestReport
from grimoire.agents.messages import InputMessage
from grimoire.agents.recall import RecallHandler
from grimoire.agents.sinks import MemorySink
from grimoire.infra.embedding import Vectors
from grimoire.streams.ids import memory_id
from grimoire.streams.records import EventType, MemoryRecord
from grimoire.streams.text import search_terms
from grimoire.tables.memory_store import MemoryStore, ScoredHit, StoredMemory
from grimoire.topics.declarations import TopicNames

TS = 1_767_225_600_000
TOPICS = TopicNames("grimoire")
REPLY_TO = "grimoire.replies.client-1"


class FakeEmbedder:
    """Hashed bag of words, L2-normalised; records every non-empty call."""

    dims = 64

    def __init__(self) -> None:
        self.calls = 0
        self.texts: list[str] = []

    def vector(self, text: str) -> np.ndarray[Any, np.dtype[np.float32]]:
        out = np.zeros(self.dims, dtype=np.float32)
        for word in text.casefold().split():
            out[hashlib.sha256(word.encode()).digest()[0] % self.dims] += 1.0
        norm = float(np.linalg.norm(out))
        return out / norm if norm else out

    async def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:  # like the real embedder: no model call for nothing
            return np.zeros((0, self.dims), dtype=np.float32)
        self.calls += 1
        self.texts.extend(texts)
        return np.stack([self.vector(text) for text in texts])


def _stored(record: MemoryRecord) -> StoredMemory:
    cand = record.candidate
    return StoredMemory(
        id=cand.id,
        agent_id=cand.agent_id,
        kind=cand.kind.value,
        layer=cand.layer.value,
        text=cand.text,
        ts_ms=cand.ts_ms,
        source_event_id=cand.provenance.source_event_id,
        normalized_hash=cand.normalized_hash,
    )


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


class FakeStore:
    """The MemoryStore protocol over dicts; first write of an id wins, like Redis."""

    def __init__(self) -> None:
        self.records: dict[str, MemoryRecord] = {}
        self.watermarks: dict[str, int] = {}
        self.put_calls = 0

    async def ensure_schema(self) -> None:
        return None

    async def existing_ids(self, ids: Sequence[str]) -> set[str]:
        return {mid for mid in ids if mid in self.records}

    async def put_many(self, records: Sequence[MemoryRecord]) -> list[bool]:
        self.put_calls += 1
        written: list[bool] = []
        for record in records:
            fresh = record.id not in self.records
            if fresh:
                self.records[record.id] = record
            written.append(fresh)
        return written

    async def get_many(self, agent_id: str, ids: Sequence[str]) -> list[StoredMemory | None]:
        found: list[StoredMemory | None] = []
        for mid in ids:
            record = self.records.get(mid)
            ok = record is not None and record.agent_id == agent_id
            found.append(_stored(record) if record is not None and ok else None)
        return found

    def _of(self, agent_id: str) -> list[MemoryRecord]:
        return [r for r in self.records.values() if r.agent_id == agent_id]

    async def knn(self, agent_id: str, vector: Sequence[float], k: int) -> list[ScoredHit]:
        hits = [ScoredHit(_stored(r), _cosine(vector, r.canonical)) for r in self._of(agent_id)]
        hits.sort(key=lambda hit: (-hit.score, hit.memory.id))
        return hits[:k]

    async def full_text(self, agent_id: str, terms: Sequence[str], k: int) -> list[ScoredHit]:
        wanted = set(terms)
        hits = []
        for record in self._of(agent_id):
            matches = len(wanted & set(search_terms(record.candidate.text)))
            if matches:
                hits.append(ScoredHit(_stored(record), float(matches)))
        hits.sort(key=lambda hit: (-hit.score, hit.memory.id))
        return hits[:k]

    async def count(self, agent_id: str) -> int:
        return len(self._of(agent_id))

    async def advance_watermark(self, watermarks: dict[str, int]) -> None:
        for agent_id, ts_ms in watermarks.items():
            self.watermarks[agent_id] = max(self.watermarks.get(agent_id, ts_ms), ts_ms)

    async def watermark(self, agent_id: str) -> int | None:
        return self.watermarks.get(agent_id)


def episode(agent_id: str, text: str, ts: int, event_id: str | None = None, **extra: Any) -> bytes:
    data: dict[str, Any] = {"agent_id": agent_id, "ts": ts, "text": text, **extra}
    if event_id is not None:
        data["event_id"] = event_id
    return orjson.dumps(data)


def messages(
    *values: bytes, topic: str = TOPICS.episodes, first_offset: int = 0
) -> list[InputMessage]:
    return [
        InputMessage(value=v, topic=topic, partition=2, offset=first_offset + i)
        for i, v in enumerate(values)
    ]


class Rig:
    def __init__(self) -> None:
        self.store = FakeStore()
        _as_protocol: MemoryStore = self.store  # FakeStore must satisfy the Protocol
        self.embedder = FakeEmbedder()
        self.sink = MemorySink()
        self.ingest = IngestHandler(self.store, self.embedder, self.sink, TOPICS)
        self.recall = RecallHandler(self.store, self.embedder, self.sink, TOPICS)

    def on(self, topic: str) -> list[dict[str, Any]]:
        return [orjson.loads(value) for value in self.sink.on(topic)]


BAD = b'{"agent_id": "agent-1", "ts": '
GOOD_1 = episode("agent-1", "disk full on node seven", TS, "ev-1")
GOOD_2 = episode("agent-1", "cpu load high on scheduler", TS + 1_000, "ev-2")


# --- ingest -------------------------------------------------------------------------


async def test_ingest_dead_letters_the_bad_payload_and_stores_the_good_ones() -> None:
    rig = Rig()
    report = await rig.ingest.handle(EventType.EPISODE, messages(GOOD_1, BAD, GOOD_2))
    assert report == IngestReport(written=2, duplicates=0, dead_lettered=1)

    (dead,) = rig.on(TOPICS.dead_letters)
    assert dead["reason"] == "invalid_json"
    assert dead["detail"]
    assert dead["source_topic"] == TOPICS.episodes
    assert (dead["partition"], dead["offset"]) == (2, 1)
    assert dead["payload"] == BAD.decode()
    assert dead["schema"] == "grimoire.dead_letter/1"
    assert [key for topic, key, _ in rig.sink.sent if topic == TOPICS.dead_letters] == ["_unknown"]

    events = rig.on(TOPICS.memory_events)
    assert [e["type"] for e in events] == ["GrimoireWrite", "GrimoireWrite"]
    expected_ids = {
        memory_id("agent-1", "ev-1", 0, TS),
        memory_id("agent-1", "ev-2", 0, TS + 1_000),
    }
    assert {e["memory_id"] for e in events} == expected_ids
    assert set(rig.store.records) == expected_ids
    assert {e["source_event_id"] for e in events} == {"ev-1", "ev-2"}
    assert {(e["agent_id"], e["kind"], e["layer"]) for e in events} == {
        ("agent-1", "episode", "observation")
    }
    keys = {key for topic, key, _ in rig.sink.sent if topic == TOPICS.memory_events}
    assert keys == {"agent-1"}
    stored = rig.store.records[memory_id("agent-1", "ev-1", 0, TS)]
    assert len(stored.canonical) == FakeEmbedder.dims
    assert stored.candidate.text == "disk full on node seven"


async def test_dead_letter_keeps_a_valid_agent_id_and_field() -> None:
    rig = Rig()
    raw = episode("agent-1", "x", TS, tick=-1)
    await rig.ingest.handle(EventType.EPISODE, messages(raw, first_offset=41))
    (dead,) = rig.on(TOPICS.dead_letters)
    assert (dead["reason"], dead["field"], dead["agent_id"]) == ("invalid_value", "tick", "agent-1")
    assert dead["offset"] == 41
    assert [key for topic, key, _ in rig.sink.sent] == ["agent-1"]


async def test_redelivered_batch_writes_and_embeds_nothing() -> None:
    rig = Rig()
    batch = messages(GOOD_1, BAD, GOOD_2)
    await rig.ingest.handle(EventType.EPISODE, batch)
    records_before = dict(rig.store.records)
    events_before = len(rig.sink.on(TOPICS.memory_events))
    embedded_before = list(rig.embedder.texts)

    report = await rig.ingest.handle(EventType.EPISODE, batch)

    assert report == IngestReport(written=0, duplicates=2, dead_lettered=1)
    assert rig.store.records == records_before
    assert len(rig.sink.on(TOPICS.memory_events)) == events_before
    assert rig.embedder.texts == embedded_before
    assert rig.embedder.calls == 1


async def test_content_addressed_events_are_idempotent_too() -> None:
    rig = Rig()
    no_id = episode("agent-1", "restart the indexer", TS)
    reordered = orjson.dumps({"text": "restart the indexer", "ts": TS, "agent_id": "agent-1"})
    first = await rig.ingest.handle(EventType.EPISODE, messages(no_id))
    second = await rig.ingest.handle(EventType.EPISODE, messages(reordered))
    assert (first.written, second.written, second.duplicates) == (1, 0, 1)
    assert len(rig.store.records) == 1


async def test_identical_texts_in_a_batch_are_embedded_once() -> None:
    rig = Rig()
    batch = messages(
        episode("agent-1", "disk full", TS, "ev-1"),
        episode("agent-1", "  disk   full ", TS + 1, "ev-2"),
        episode("agent-2", "disk full", TS + 2, "ev-3"),
        episode("agent-1", "cpu hot", TS + 3, "ev-4"),
    )
    report = await rig.ingest.handle(EventType.EPISODE, batch)
    assert report.written == 4
    assert rig.embedder.calls == 1
    assert sorted(rig.embedder.texts) == ["cpu hot", "disk full"]
    vectors = {r.canonical for r in rig.store.records.values() if r.candidate.text == "disk full"}
    assert len(vectors) == 1


async def test_same_event_twice_in_one_batch_is_written_once() -> None:
    rig = Rig()
    report = await rig.ingest.handle(EventType.EPISODE, messages(GOOD_1, GOOD_1))
    assert report == IngestReport(written=1, duplicates=1, dead_lettered=0)
    assert len(rig.sink.on(TOPICS.memory_events)) == 1
    assert rig.embedder.texts == ["disk full on node seven"]


async def test_batch_boundaries_do_not_change_what_is_stored() -> None:
    """Replaying the log must rebuild the same memory whatever the batching (SPEC §1).

    Two events share an event id (so they map onto one memory id) but differ in text.
    Delivered in two batches the first one wins (the second is a duplicate); delivered
    in one batch, IngestHandler's `_unique` keeps the *last* one instead.
    """
    first = episode("agent-1", "first wording", TS, "ev-dup")
    second = episode("agent-1", "second wording", TS, "ev-dup")

    split = Rig()
    await split.ingest.handle(EventType.EPISODE, messages(first))
    await split.ingest.handle(EventType.EPISODE, messages(second, first_offset=1))

    together = Rig()
    await together.ingest.handle(EventType.EPISODE, messages(first, second))

    (split_record,) = split.store.records.values()
    (together_record,) = together.store.records.values()
    assert split_record.id == together_record.id
    assert split_record.candidate.text == "first wording"
    assert together_record.candidate.text == split_record.candidate.text


async def test_watermark_is_the_max_event_time_and_never_moves_back() -> None:
    rig = Rig()
    await rig.ingest.handle(
        EventType.EPISODE,
        messages(
            episode("agent-1", "a", TS + 10, "e1"),
            episode("agent-1", "b", TS + 30, "e2"),
            episode("agent-1", "c", TS + 20, "e3"),
            episode("agent-2", "d", TS + 5, "e4"),
            episode("agent-1", "rejected", TS + 99_999, "e5", tick=-1),
        ),
    )
    assert await rig.store.watermark("agent-1") == TS + 30
    assert await rig.store.watermark("agent-2") == TS + 5

    await rig.ingest.handle(EventType.EPISODE, messages(episode("agent-1", "old", TS, "e6")))
    assert await rig.store.watermark("agent-1") == TS + 30
    await rig.ingest.handle(EventType.EPISODE, messages(episode("agent-1", "new", TS + 40, "e7")))
    assert await rig.store.watermark("agent-1") == TS + 40
    assert await rig.store.watermark("agent-3") is None


async def test_transcript_parts_become_separate_memories() -> None:
    rig = Rig()
    line = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "maybe the cache"},
            {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}},
        ],
    }
    raw = orjson.dumps({"agent_id": "coder", "ts": TS, "line": line, "event_id": "t-1"})
    report = await rig.ingest.handle(EventType.TRANSCRIPT, messages(raw, topic=TOPICS.transcripts))
    assert report.written == 2
    layers = sorted(e["layer"] for e in rig.on(TOPICS.memory_events))
    assert layers == ["action", "contemplation"]


async def test_a_payload_that_breaks_the_normalizer_is_dead_lettered_not_fatal() -> None:
    rig = Rig()
    crashing = orjson.dumps(
        {"agent_id": "coder", "ts": TS, "line": {"role": ["user"], "content": "hi"}}
    )
    fine = orjson.dumps({"agent_id": "coder", "ts": TS, "line": {"role": "user", "content": "hi"}})
    report = await rig.ingest.handle(
        EventType.TRANSCRIPT, messages(crashing, fine, topic=TOPICS.transcripts)
    )
    assert (report.written, report.dead_lettered) == (1, 1)
    (dead,) = rig.on(TOPICS.dead_letters)
    assert dead["source_topic"] == TOPICS.transcripts
    assert dead["offset"] == 0


async def test_empty_batch_is_a_no_op() -> None:
    rig = Rig()
    assert await rig.ingest.handle(EventType.EPISODE, []) == IngestReport(0, 0, 0)
    assert rig.sink.sent == []
    assert rig.embedder.calls == 0


# --- recall -------------------------------------------------------------------------


async def _seeded() -> Rig:
    rig = Rig()
    await rig.ingest.handle(
        EventType.EPISODE,
        messages(
            episode("agent-1", "disk full on node seven", TS, "a1"),
            episode("agent-1", "cpu load high on scheduler", TS + 1, "a2"),
            episode("agent-1", "network partition detected between zones", TS + 2, "a3"),
            episode("agent-2", "disk full on node seven", TS + 3, "b1"),
            episode("agent-2", "disk quota exceeded for backups", TS + 4, "b2"),
        ),
    )
    rig.sink.sent.clear()
    return rig


def recall_request(**fields: Any) -> InputMessage:
    data: dict[str, Any] = {
        "agent_id": "agent-1",
        "query": "disk full node seven",
        "reply_to": REPLY_TO,
        "correlation_id": "corr-1",
        **fields,
    }
    return InputMessage(orjson.dumps(data), TOPICS.recall_requests, partition=0, offset=7)


async def test_recall_replies_once_with_only_the_agents_memories() -> None:
    rig = await _seeded()
    await rig.recall.handle(recall_request())

    assert len(rig.sink.sent) == 1
    topic, key, value = rig.sink.sent[0]
    assert (topic, key) == (REPLY_TO, "agent-1")
    reply = orjson.loads(value)
    assert reply["correlation_id"] == "corr-1"
    assert reply["agent_id"] == "agent-1"
    assert "error" not in reply
    assert reply["watermark"] == TS + 2
    items = reply["items"]
    assert {item["agent_id"] for item in items} == {"agent-1"}
    assert {item["source_event_id"] for item in items} == {"a1", "a2", "a3"}

    top = items[0]
    assert top["id"] == memory_id("agent-1", "a1", 0, TS)
    assert top["text"] == "disk full on node seven"
    assert sorted(top["lanes"]) == ["bm25", "canonical"]
    assert top["score"] == round(1 / 61 + 1 / 61, 9)  # rank 1 in both lanes, k=60
    assert all(item["lanes"] == ["canonical"] for item in items[1:])
    assert [item["score"] for item in items] == sorted((i["score"] for i in items), reverse=True)
    assert set(reply["timings_ms"]) == {"embed", "search", "fuse", "total"}


async def test_recall_never_crosses_tenants_even_on_an_exact_match() -> None:
    rig = await _seeded()
    await rig.recall.handle(recall_request(query="disk quota exceeded for backups"))
    (reply,) = rig.on(REPLY_TO)
    assert reply["items"]
    assert all(item["agent_id"] == "agent-1" for item in reply["items"])
    assert "disk quota exceeded for backups" not in {item["text"] for item in reply["items"]}


async def test_recall_returns_one_copy_of_a_repeated_text() -> None:
    rig = await _seeded()
    await rig.ingest.handle(
        EventType.EPISODE,
        messages(
            episode("agent-1", "Disk  full on NODE seven", TS + 10, "a4"),
            episode("agent-1", "disk full on node seven", TS + 11, "a5"),
        ),
    )
    rig.sink.sent.clear()
    await rig.recall.handle(recall_request())
    (reply,) = rig.on(REPLY_TO)
    texts = [item["text"].casefold() for item in reply["items"]]
    assert texts.count("disk full on node seven") == 1
    assert len(texts) == 3  # a1/a4/a5 collapse into one; a2 and a3 remain
    # Same vector and same term matches: ties break on id, and UUIDv7 ids follow ts, so
    # a1 (TS) ranks first in both lanes and is the copy kept.
    assert reply["items"][0]["id"] == memory_id("agent-1", "a1", 0, TS)
    assert reply["items"][0]["score"] == round(2 / 61, 9)


async def test_recall_k_counts_distinct_texts() -> None:
    rig = await _seeded()
    await rig.ingest.handle(
        EventType.EPISODE, messages(episode("agent-1", "disk full on node seven", TS + 10, "a4"))
    )
    rig.sink.sent.clear()
    await rig.recall.handle(recall_request(k=2))
    (reply,) = rig.on(REPLY_TO)
    assert len(reply["items"]) == 2
    assert len({item["text"] for item in reply["items"]}) == 2


async def test_recall_respects_k() -> None:
    rig = await _seeded()
    await rig.recall.handle(recall_request(k=1))
    (reply,) = rig.on(REPLY_TO)
    assert [item["source_event_id"] for item in reply["items"]] == ["a1"]


async def test_recall_for_an_unknown_agent_is_empty() -> None:
    rig = await _seeded()
    await rig.recall.handle(recall_request(agent_id="nobody"))
    (reply,) = rig.on(REPLY_TO)
    assert reply["items"] == []
    assert "watermark" not in reply
    assert "error" not in reply


async def test_recall_is_repeatable() -> None:
    rig = await _seeded()
    await rig.recall.handle(recall_request())
    await rig.recall.handle(recall_request())
    first, second = rig.on(REPLY_TO)
    assert first["items"] == second["items"]


async def test_bad_k_dead_letters_and_replies_with_an_error() -> None:
    rig = await _seeded()
    await rig.recall.handle(recall_request(k=0, correlation_id="corr-9"))

    (dead,) = rig.on(TOPICS.dead_letters)
    assert (dead["reason"], dead["field"]) == ("invalid_value", "k")
    assert dead["source_topic"] == TOPICS.recall_requests
    assert (dead["partition"], dead["offset"]) == (0, 7)
    assert dead["agent_id"] == "agent-1"

    (reply,) = rig.on(REPLY_TO)
    assert reply["correlation_id"] == "corr-9"
    assert reply["agent_id"] == "agent-1"
    assert reply["items"] == []
    assert reply["error"].startswith("invalid_value")
    assert len(rig.sink.sent) == 2
    assert rig.embedder.calls == 1  # only the seeding batch; no embedding for a bad request


async def test_bad_reply_to_is_only_dead_lettered() -> None:
    rig = await _seeded()
    await rig.recall.handle(recall_request(reply_to="bad topic!"))
    assert [topic for topic, _, _ in rig.sink.sent] == [TOPICS.dead_letters]
    (dead,) = rig.on(TOPICS.dead_letters)
    assert (dead["reason"], dead["field"]) == ("invalid_value", "reply_to")


async def test_unparseable_request_is_only_dead_lettered() -> None:
    rig = await _seeded()
    await rig.recall.handle(InputMessage(b"{nope", TOPICS.recall_requests, 0, 3))
    assert [topic for topic, _, _ in rig.sink.sent] == [TOPICS.dead_letters]
    (dead,) = rig.on(TOPICS.dead_letters)
    assert dead["reason"] == "invalid_json"
