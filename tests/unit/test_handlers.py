"""IngestHandler and RecallHandler against InMemoryMemoryStore and a counting fake embedder.

Admission numbers are worked out by hand from streams/write/admission.py. A plain episode
observation of four words or more has importance 0.3, so U = 0.12, F = 0.4 (no
evidence, no neighbour above 0.5), T = 0.2; composite = 0.03 + 0.1 + 0.2·N + 0.15·R
+ 0.03. The fake embedder is a bag of words hashed into 64 buckets: two texts that
share s of their n and m distinct words (no bucket collisions among the words used)
have cosine s / sqrt(n·m).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
import pytest

from grimoire.agents.handlers.ingest import IngestHandler, IngestReport
from grimoire.agents.handlers.outcomes import OutcomeHandler
from grimoire.agents.handlers.recall import RecallHandler
from grimoire.agents.ports import Embedder, InputMessage, MemorySink, Vectors
from grimoire.infra.embedding.embedder import CachingEmbedder
from grimoire.streams.model.ids import memory_id
from grimoire.streams.model.records import EventType
from grimoire.streams.write.plan import aggregate_id
from grimoire.tables.memory.store import MemoryStore
from grimoire.tables.testing.memory_store import InMemoryMemoryStore
from grimoire.topics.declarations import TopicNames

TS = 1_767_225_600_000
TOPICS = TopicNames("grimoire")
REPLY_TO = "grimoire.replies.client-1"
WEIGHTS = {
    "future_utility": 0.25,
    "factual_confidence": 0.25,
    "novelty": 0.20,
    "recency": 0.15,
    "type_prior": 0.15,
}


class FakeEmbedder:
    """Hashed bag of words, L2-normalised; records every non-empty call."""

    dims = 64
    vector_space = "bag-of-words-64:float32"

    def __init__(self) -> None:
        self.calls = 0
        self.query_calls = 0
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

    async def embed_query(self, texts: Sequence[str]) -> Vectors:
        if texts:
            self.query_calls += 1
        return await self.embed(texts)


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
    def __init__(self, embedder: Embedder | None = None) -> None:
        self.store = InMemoryMemoryStore(dims=FakeEmbedder.dims)
        _as_protocol: MemoryStore = self.store  # must satisfy the Protocol
        self.fake = FakeEmbedder()
        self.embedder: Embedder = embedder if embedder is not None else self.fake
        self.sink = MemorySink()
        self.ingest = IngestHandler(self.store, self.embedder, self.sink, TOPICS)
        self.recall = RecallHandler(self.store, self.embedder, self.sink, TOPICS)
        self.outcomes = OutcomeHandler(self.store, self.sink, TOPICS)

    def on(self, topic: str) -> list[dict[str, Any]]:
        return [orjson.loads(value) for value in self.sink.on(topic)]

    def events(self) -> list[dict[str, Any]]:
        return self.on(TOPICS.memory_events)


def mid(agent: str, event: str, ts: int, part: int = 0) -> str:
    return memory_id(agent, event, part, ts)


BAD = b'{"agent_id": "agent-1", "ts": '
DISK = "disk full on node seven"
CPU = "cpu load high on scheduler"
GOOD_1 = episode("agent-1", DISK, TS, "ev-1")
GOOD_2 = episode("agent-1", CPU, TS + 1_000, "ev-2")


def assert_composite_adds_up(event: dict[str, Any]) -> None:
    admission = event["admission"]
    assert set(admission) == {"composite", *WEIGHTS}
    total = sum(weight * admission[name] for name, weight in WEIGHTS.items())
    assert admission["composite"] == pytest.approx(total, abs=1e-9)


# --- ingest: dead letters, events, admission ----------------------------------------


async def test_ingest_dead_letters_the_bad_payload_and_stores_the_good_ones() -> None:
    rig = Rig()
    report = await rig.ingest.handle(EventType.EPISODE, messages(GOOD_1, BAD, GOOD_2))
    assert report == IngestReport(candidates=2, written=2, duplicates=0, dead_lettered=1)

    (dead,) = rig.on(TOPICS.dead_letters)
    assert dead["reason"] == "invalid_json"
    assert dead["detail"]
    assert dead["source_topic"] == TOPICS.episodes
    assert (dead["partition"], dead["offset"]) == (2, 1)
    assert dead["payload"] == BAD.decode()
    assert dead["schema"] == "grimoire.dead_letter/1"
    assert [key for topic, key, _ in rig.sink.sent if topic == TOPICS.dead_letters] == ["_unknown"]

    first, second = rig.events()
    assert first["type"] == second["type"] == "GrimoireWrite"
    assert first["memory_id"] == first["candidate_id"] == mid("agent-1", "ev-1", TS)
    assert second["memory_id"] == mid("agent-1", "ev-2", TS + 1_000)
    assert (first["source_event_id"], second["source_event_id"]) == ("ev-1", "ev-2")
    assert (first["agent_id"], first["kind"], first["layer"]) == (
        "agent-1",
        "episode",
        "observation",
    )
    # Novel and fresh: composite 0.03 + 0.1 + 0.2 + 0.15 + 0.03 = 0.51, the low band.
    assert (first["action"], first["reason"], first["confidence"]) == (
        "admit",
        "admitted_low_confidence",
        0.3,
    )
    assert first["admission"] == {
        "composite": 0.51,
        "future_utility": 0.12,
        "factual_confidence": 0.4,
        "novelty": 1.0,
        "recency": 1.0,
        "type_prior": 0.2,
    }
    assert first["quality"] == 0.275  # 0.2·novelty + 0.15·0.5 (nothing concrete)
    assert first["off_topic"] is False
    # The second shares one word of five with the first (cosine 0.2): N = 0.8, off topic.
    assert second["admission"]["novelty"] == pytest.approx(0.8, abs=1e-6)
    assert second["admission"]["composite"] == pytest.approx(0.47, abs=1e-6)
    assert second["off_topic"] is True
    assert second["reason"] == "admitted_low_confidence"
    keys = {key for topic, key, _ in rig.sink.sent if topic == TOPICS.memory_events}
    assert keys == {"agent-1"}

    stored = rig.store.record(mid("agent-1", "ev-1", TS))
    assert stored is not None
    assert len(stored["canonical"]) == FakeEmbedder.dims * 4  # float32 bytes
    assert stored["text"] == DISK
    assert await rig.store.count("agent-1") == 2


async def test_dead_letter_keeps_a_valid_agent_id_and_field() -> None:
    rig = Rig()
    raw = episode("agent-1", "x", TS, tick=-1)
    await rig.ingest.handle(EventType.EPISODE, messages(raw, first_offset=41))
    (dead,) = rig.on(TOPICS.dead_letters)
    assert (dead["reason"], dead["field"], dead["agent_id"]) == ("invalid_value", "tick", "agent-1")
    assert dead["offset"] == 41
    assert [key for topic, key, _ in rig.sink.sent] == ["agent-1"]


MIXED = [
    # a warning clears the upper band: U = 0.4·0.9 + 0.15, T = 0.9 → confidence 0.7
    episode("agent-1", "the bridge is safe", TS, "m1", kind="warning"),
    # negates it at cosine 4/sqrt(20) = 0.894: F = 0.4 - 0.4·0.7 = 0.12 → quarantine
    episode("agent-1", "the bridge is not safe", TS + 1, "m2"),
    episode("agent-1", DISK, TS + 2, "m3"),  # unrelated: admitted, off topic
    episode("agent-1", DISK, TS + 3, "m4"),  # identical: aggregate
    episode("agent-1", "replica lag grew while compaction ran overnight", TS + 4, "m5"),
    # the same seven words and one more: cosine 7/sqrt(56) = 0.935 → merge
    episode("agent-1", "replica lag grew while compaction ran overnight today", TS + 5, "m6"),
    # four of five words of m3, cosine 0.8: N = 0.2, F = 0.4 + 0.2·0.8·0.3 = 0.448,
    # composite = 0.03 + 0.112 + 0.04 + 0.15 + 0.03 = 0.362 → reject
    episode("agent-1", "disk full on node eight", TS + 6, "m7"),
]


async def test_every_decision_is_a_memory_event_with_its_breakdown() -> None:
    rig = Rig()
    report = await rig.ingest.handle(EventType.EPISODE, messages(*MIXED))
    assert report == IngestReport(candidates=7, written=4, duplicates=0, dead_lettered=0)

    events = rig.events()
    ids = [mid("agent-1", f"m{i}", TS + i - 1) for i in range(1, 8)]
    assert [e["candidate_id"] for e in events] == ids
    assert [(e["type"], e["action"], e["reason"]) for e in events] == [
        ("GrimoireWrite", "admit", "admitted"),
        ("GrimoireQuarantine", "quarantine", "contradiction"),
        ("GrimoireWrite", "admit", "admitted_low_confidence"),
        ("GrimoireAggregate", "aggregate", "duplicate"),
        ("GrimoireWrite", "admit", "admitted_low_confidence"),
        ("GrimoireMerge", "merge", "near_duplicate"),
        ("GrimoireReject", "reject", "below_threshold"),
    ]
    for event in events:
        assert_composite_adds_up(event)
    warning, quarantined, disk, repeat, replica, merged, rejected = events

    # U = 0.36 + 0.15 = 0.51; composite = 0.1275 + 0.1 + 0.2 + 0.15 + 0.135 = 0.7125
    assert warning["admission"]["composite"] == 0.7125
    assert (warning["kind"], warning["confidence"]) == ("warning", 0.7)
    assert quarantined["memory_id"] == ids[1]
    assert quarantined["target_id"] == ids[0]
    assert quarantined["admission"]["factual_confidence"] == 0.12
    assert quarantined["admission"]["novelty"] == 1.0
    assert quarantined["confidence"] == 0.12
    assert disk["off_topic"] is True
    assert repeat["target_id"] == ids[2]
    assert repeat["memory_id"] == aggregate_id("agent-1", ids[2])
    assert repeat["admission"]["novelty"] == pytest.approx(0.0, abs=1e-6)
    assert "quality" not in repeat
    assert (merged["memory_id"], merged["target_id"]) == (ids[4], ids[4])
    assert rejected["memory_id"] == ids[6]
    assert rejected["admission"]["composite"] == pytest.approx(0.362, abs=1e-6)
    assert "quality" not in rejected and rejected["confidence"] == 0.0

    stats = await rig.store.stats("agent-1")
    quality_sum = sum(e["quality"] for e in (warning, quarantined, disk, replica))
    assert stats == pytest.approx(
        {
            "candidates": 7,
            "admit": 3,
            "quarantine": 1,
            "aggregate": 1,
            "merge": 1,
            "reject": 1,
            "off_topic": 2,  # m3 and m5 have no neighbour above 0.5
            "quality_sum": quality_sum,
        }
    )
    assert await rig.store.decisions("agent-1") == {
        cid: e["action"] for cid, e in zip(ids, events, strict=True)
    }
    # m1, m2 (quarantined), m3, m5 and the aggregate standing for m3/m4
    assert await rig.store.count("agent-1") == 5
    aggregate = rig.store.record(aggregate_id("agent-1", ids[2]))
    assert aggregate is not None
    assert (aggregate["kind"], aggregate["count"], aggregate["aggregate_of"]) == (
        "aggregate",
        "2",
        ids[2],
    )
    reinforced = rig.store.record(ids[4])
    assert reinforced is not None
    assert (reinforced["reinforced_count"], reinforced["last_seen"]) == ("1", str(TS + 5))
    assert rig.store.record(ids[6]) is None


async def test_a_quarantined_memory_is_not_recalled() -> None:
    rig = Rig()
    await rig.ingest.handle(EventType.EPISODE, messages(*MIXED[:2]))
    rig.sink.sent.clear()
    await rig.recall.handle(recall_request(query="bridge safe"))
    (reply,) = rig.on(REPLY_TO)
    assert [item["text"] for item in reply["items"]] == ["the bridge is safe"]


# --- ingest: idempotency -------------------------------------------------------------

HEARTBEAT = "heartbeat pool depth stable"
HEARTBEATS = [
    episode("agent-1", HEARTBEAT, TS + i, f"hb-{i}", tags=["ops/heartbeat"], run_id="r1")
    for i in range(3)
]


async def _snapshot(rig: Rig) -> dict[str, Any]:
    store = rig.store
    return {
        "count": await store.count("agent-1"),
        "degrees": await store.degrees("agent-1", ["tag:ops/heartbeat", "run:r1"]),
        "edge": await store.hyperedge("agent-1", "run:r1"),
        "aggregate": store.record(aggregate_id("agent-1", mid("agent-1", "hb-0", TS))),
        "decided": await store.decisions("agent-1"),
        "stats": await store.stats("agent-1"),
        "fields": await store.load_fields(["agent-1"]),
        "watermark": await store.watermark("agent-1"),
        "events": len(rig.sink.sent),
        "embed_calls": rig.fake.calls,
    }


async def test_redelivered_batch_changes_nothing() -> None:
    rig = Rig()
    batch = messages(*HEARTBEATS, BAD)
    first = await rig.ingest.handle(EventType.EPISODE, batch)
    assert first == IngestReport(candidates=3, written=1, duplicates=0, dead_lettered=1)
    before = await _snapshot(rig)
    original = mid("agent-1", "hb-0", TS)
    # one record, then two repeats folded into its aggregate (count 1 + 2)
    assert before["count"] == 2
    assert before["degrees"] == {"tag:ops/heartbeat": 2, "run:r1": 2}
    assert before["edge"] == {original: "context"}
    assert before["aggregate"]["count"] == "3"
    assert before["aggregate"]["last_seen"] == str(TS + 2)
    assert before["embed_calls"] == 1

    again = await rig.ingest.handle(EventType.EPISODE, batch)

    assert again == IngestReport(candidates=3, written=0, duplicates=3, dead_lettered=1)
    after = await _snapshot(rig)
    dead_letters = after.pop("events") - before.pop("events")
    assert dead_letters == 1  # the bad payload is dead-lettered again, nothing else is sent
    assert rig.sink.sent[-1][0] == TOPICS.dead_letters
    assert after == before


async def test_a_partly_redelivered_batch_counts_only_the_new_repeat() -> None:
    rig = Rig()
    await rig.ingest.handle(EventType.EPISODE, messages(*HEARTBEATS))
    late = episode("agent-1", HEARTBEAT, TS + 9, "hb-9", tags=["ops/heartbeat"], run_id="r1")
    report = await rig.ingest.handle(EventType.EPISODE, messages(*HEARTBEATS, late))
    assert report == IngestReport(candidates=4, written=0, duplicates=3, dead_lettered=0)
    (event,) = rig.events()[3:]
    assert (event["source_event_id"], event["action"]) == ("hb-9", "aggregate")
    aggregate = rig.store.record(aggregate_id("agent-1", mid("agent-1", "hb-0", TS)))
    assert aggregate is not None
    assert (aggregate["count"], aggregate["last_seen"]) == ("4", str(TS + 9))
    assert (await rig.store.stats("agent-1"))["candidates"] == 4


async def test_content_addressed_events_are_idempotent_too() -> None:
    rig = Rig()
    no_id = episode("agent-1", "restart the indexer", TS)
    reordered = orjson.dumps({"text": "restart the indexer", "ts": TS, "agent_id": "agent-1"})
    first = await rig.ingest.handle(EventType.EPISODE, messages(no_id))
    second = await rig.ingest.handle(EventType.EPISODE, messages(reordered))
    assert (first.written, second.written, second.duplicates) == (1, 0, 1)
    assert await rig.store.count("agent-1") == 1
    assert len(rig.events()) == 1


async def test_same_event_twice_in_one_batch_is_decided_once() -> None:
    rig = Rig()
    report = await rig.ingest.handle(EventType.EPISODE, messages(GOOD_1, GOOD_1))
    assert report == IngestReport(candidates=2, written=1, duplicates=1, dead_lettered=0)
    assert len(rig.events()) == 1
    assert rig.fake.texts == [DISK]


async def test_batch_boundaries_do_not_change_what_is_stored() -> None:
    """Two events share an event id (so one memory id) but differ in text: the first
    copy wins whether they arrive in one batch or two (SPEC §1, replays)."""
    first = episode("agent-1", "first wording here", TS, "ev-dup")
    second = episode("agent-1", "second wording here", TS, "ev-dup")

    split = Rig()
    await split.ingest.handle(EventType.EPISODE, messages(first))
    await split.ingest.handle(EventType.EPISODE, messages(second, first_offset=1))

    together = Rig()
    await together.ingest.handle(EventType.EPISODE, messages(first, second))

    record_id = mid("agent-1", "ev-dup", TS)
    split_record, together_record = split.store.record(record_id), together.store.record(record_id)
    assert split_record is not None and together_record is not None
    assert split_record["text"] == together_record["text"] == "first wording here"
    assert await split.store.count("agent-1") == await together.store.count("agent-1") == 1


async def test_empty_batch_is_a_no_op() -> None:
    rig = Rig()
    assert await rig.ingest.handle(EventType.EPISODE, []) == IngestReport(0, 0, 0, 0)
    assert rig.sink.sent == []
    assert rig.fake.calls == 0


# --- ingest: embedding ---------------------------------------------------------------


async def test_identical_texts_in_a_batch_are_embedded_once() -> None:
    rig = Rig()
    batch = messages(
        episode("agent-1", "disk full", TS, "ev-1"),
        episode("agent-1", "  disk   full ", TS + 1, "ev-2"),
        episode("agent-2", "disk full", TS + 2, "ev-3"),
        episode("agent-1", "cpu hot", TS + 3, "ev-4"),
    )
    report = await rig.ingest.handle(EventType.EPISODE, batch)
    assert report.candidates == 4
    assert rig.fake.calls == 1
    assert rig.fake.texts == ["disk full", "cpu hot"]  # no field state yet: no digests
    one = rig.store.record(mid("agent-1", "ev-1", TS))
    two = rig.store.record(mid("agent-2", "ev-3", TS + 2))
    assert one is not None and two is not None
    assert one["canonical"] == two["canonical"]
    # ev-2 repeats ev-1 for the same agent: folded, not stored again
    assert [e["action"] for e in rig.events()] == ["admit", "aggregate", "admit", "admit"]


async def test_the_cache_spares_the_model_across_batches() -> None:
    fake = FakeEmbedder()
    rig = Rig(CachingEmbedder(fake))
    await rig.ingest.handle(EventType.EPISODE, messages(GOOD_1, GOOD_2))
    assert fake.calls == 1
    assert await rig.store.metrics() == {
        "embed_hits": 0.0,
        "embed_misses": 2.0,
        "embed_model_calls": 1.0,
        "embed_model_seconds": 0.0,  # the fake model reports no time
        "ingest_batches": 1.0,
        "ingest_candidates": 2.0,
    }

    await rig.ingest.handle(
        EventType.EPISODE,
        messages(
            episode("agent-1", DISK, TS + 5, "ev-3"),
            episode("agent-2", CPU, TS + 6, "ev-4"),
        ),
    )
    assert fake.calls == 1  # both texts came from the cache
    assert fake.texts == [DISK, CPU]
    # the second batch adds its own deltas: two hits, no miss, no model call
    assert await rig.store.metrics() == {
        "embed_hits": 2.0,
        "embed_misses": 2.0,
        "embed_model_calls": 1.0,
        "embed_model_seconds": 0.0,
        "ingest_batches": 2.0,
        "ingest_candidates": 4.0,
    }
    assert [e["action"] for e in rig.events()] == ["admit", "admit", "aggregate", "admit"]


# --- ingest: the eidolon lane ----------------------------------------------------------

OPENING = "market opened quietly today"
DEPTH = "order book depth recovered slowly"


def _regime_pair(agent: str, regime: str) -> list[bytes]:
    return [
        episode(agent, OPENING, TS, f"{agent}-1", regime=regime),
        episode(agent, DEPTH, TS + 1, f"{agent}-2"),
    ]


def _vectors(rig: Rig, agent: str) -> tuple[bytes, bytes]:
    record = rig.store.record(mid(agent, f"{agent}-2", TS + 1))
    assert record is not None
    canonical, eidolon = record["canonical"], record["eidolon"]
    assert isinstance(canonical, bytes) and isinstance(eidolon, bytes)
    return canonical, eidolon


async def test_the_eidolon_depends_on_the_field_state_not_only_the_text() -> None:
    rig = Rig()
    plain = episode("plain", DEPTH, TS + 1, "plain-2")
    batch = [*_regime_pair("a", "bull"), *_regime_pair("b", "bear"), *_regime_pair("c", "bull")]
    await rig.ingest.handle(EventType.EPISODE, messages(*batch, plain))

    # One model call for the contents and the state digests together.
    assert rig.fake.calls == 1
    assert rig.fake.texts == [OPENING, DEPTH, "regime bull", "regime bear"]

    a_canonical, a_eidolon = _vectors(rig, "a")
    b_canonical, b_eidolon = _vectors(rig, "b")
    c_canonical, c_eidolon = _vectors(rig, "c")
    assert a_canonical == b_canonical == c_canonical  # same text, same canonical vector
    assert a_eidolon == c_eidolon  # same text, same state
    assert a_eidolon != b_eidolon  # same text, another regime

    # eidolon = normalise(0.75·canonical + 0.25·state)
    blended = 0.75 * rig.fake.vector(DEPTH) + 0.25 * rig.fake.vector("regime bull")
    expected = blended / np.linalg.norm(blended)
    np.testing.assert_allclose(np.frombuffer(a_eidolon, dtype=np.float32), expected, atol=1e-6)

    # Without any field state there is nothing to condition on.
    record = rig.store.record(mid("plain", "plain-2", TS + 1))
    assert record is not None
    assert record["eidolon"] == record["canonical"]


async def test_the_same_state_gives_the_same_eidolon_across_batches() -> None:
    together = Rig()
    await together.ingest.handle(EventType.EPISODE, messages(*_regime_pair("a", "bull")))
    split = Rig()
    first, second = _regime_pair("a", "bull")
    await split.ingest.handle(EventType.EPISODE, messages(first))
    await split.ingest.handle(EventType.EPISODE, messages(second))
    assert _vectors(together, "a") == _vectors(split, "a")
    assert split.fake.calls == 2  # one per batch; the second embeds its text and its digest
    assert split.fake.texts == [
        OPENING,
        "regime bull",
        DEPTH,
        "regime bull",
    ]


# --- ingest: watermark and transcripts -----------------------------------------------


async def test_watermark_is_the_max_event_time_and_never_moves_back() -> None:
    rig = Rig()
    await rig.ingest.handle(
        EventType.EPISODE,
        messages(
            episode("agent-1", "alpha", TS + 10, "e1"),
            episode("agent-1", "bravo", TS + 30, "e2"),
            episode("agent-1", "charlie", TS + 20, "e3"),
            episode("agent-2", "delta", TS + 5, "e4"),
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
    (state,) = (await rig.store.load_fields(["agent-1"])).values()
    assert state.watermark_ms == TS + 40


async def test_a_transcript_turn_becomes_layered_memories_in_one_hyperedge() -> None:
    rig = Rig()
    user = {"type": "user", "message": {"role": "user", "content": "Why did the deploy fail?"}}
    assistant = {
        "type": "assistant",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "The deploy failed; check the nginx config."},
                {"type": "tool_use", "name": "read_file", "input": {"path": "/etc/nginx.conf"}},
                {
                    "type": "tool_result",
                    "is_error": True,
                    "content": [{"type": "text", "text": "Permission denied: /etc/nginx.conf"}],
                },
                {"type": "text", "text": "I will ask for sudo access."},
            ],
        },
    }
    raws = [
        orjson.dumps({"agent_id": "coder", "ts": TS + i, "line": line, "turn_id": "t-7"})
        for i, line in enumerate((user, assistant))
    ]
    report = await rig.ingest.handle(
        EventType.TRANSCRIPT, messages(*raws, topic=TOPICS.transcripts)
    )
    assert report.candidates == 5
    events = rig.events()
    assert {e["hyperedge_id"] for e in events} == {"turn:t-7"}
    assert [(e["layer"], e["action"]) for e in events] == [
        ("input", "admit"),
        ("contemplation", "admit"),
        ("action", "admit"),
        ("observation", "admit"),
        ("output", "admit"),
    ]
    edge = await rig.store.hyperedge("coder", "turn:t-7")
    roles = {}
    for memory, role in edge.items():
        record = rig.store.record(memory)
        assert record is not None
        assert record["hyperedge_ids"] == "turn:t-7"
        roles[record["layer"]] = role
    assert roles == {
        "input": "trigger",
        "contemplation": "context",
        "action": "action",
        "observation": "outcome",
        "output": "outcome",
    }


async def test_a_payload_that_breaks_the_normalizer_is_dead_lettered_not_fatal() -> None:
    rig = Rig()
    crashing = orjson.dumps(
        {"agent_id": "coder", "ts": TS, "line": {"role": ["user"], "content": "hi"}}
    )
    fine = orjson.dumps({"agent_id": "coder", "ts": TS, "line": {"role": "user", "content": "hi"}})
    report = await rig.ingest.handle(
        EventType.TRANSCRIPT, messages(crashing, fine, topic=TOPICS.transcripts)
    )
    assert (report.candidates, report.dead_lettered) == (1, 1)
    (dead,) = rig.on(TOPICS.dead_letters)
    assert dead["source_topic"] == TOPICS.transcripts
    assert dead["offset"] == 0
    assert [e["layer"] for e in rig.events()] == ["input"]


# --- recall -------------------------------------------------------------------------


async def _seeded() -> Rig:
    rig = Rig()
    await rig.ingest.handle(
        EventType.EPISODE,
        messages(
            episode("agent-1", DISK, TS, "a1"),
            episode("agent-1", CPU, TS + 1, "a2"),
            episode("agent-1", "network partition detected between zones", TS + 2, "a3"),
            episode("agent-2", DISK, TS + 3, "b1"),
            episode("agent-2", "backups exceeded quota limits", TS + 4, "b2"),
        ),
    )
    assert [e["action"] for e in rig.events()] == ["admit"] * 5
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
    assert top["id"] == mid("agent-1", "a1", TS)
    assert top["text"] == DISK
    assert sorted(top["lanes"]) == ["bm25", "canonical", "eidolon"]
    assert top["reasons"] == ["lane:bm25", "lane:canonical", "lane:eidolon"]
    assert all("bm25" not in item["lanes"] for item in items[1:])
    assert reply["mode"] == "full"
    assert reply["budget"]["items"] == len(items)
    assert set(reply["timings_ms"]) == {
        "state", "embed", "lanes", "walk", "fetch", "relevance", "rank", "pack", "usage",
            "total",
    }  # fmt: skip


async def test_recall_embeds_its_query_beside_the_ingest_queue() -> None:
    rig = await _seeded()
    assert rig.fake.query_calls == 0  # ingest goes through the batching queue
    await rig.recall.handle(recall_request())
    assert rig.fake.query_calls == 1  # the query and the state digest, one call


async def test_recall_never_crosses_tenants_even_on_an_exact_match() -> None:
    rig = await _seeded()
    await rig.recall.handle(recall_request(query="backups exceeded quota limits"))
    (reply,) = rig.on(REPLY_TO)
    assert reply["items"]
    assert all(item["agent_id"] == "agent-1" for item in reply["items"])
    assert "backups exceeded quota limits" not in {item["text"] for item in reply["items"]}


async def test_recall_returns_one_copy_of_a_repeated_text() -> None:
    rig = await _seeded()
    await rig.ingest.handle(
        EventType.EPISODE,
        messages(
            episode("agent-1", "Disk  full on NODE seven", TS + 10, "a4"),
            episode("agent-1", DISK, TS + 11, "a5"),
        ),
    )
    assert [e["action"] for e in rig.events()] == ["aggregate", "aggregate"]
    rig.sink.sent.clear()
    await rig.recall.handle(recall_request())
    (reply,) = rig.on(REPLY_TO)
    texts = [item["text"].casefold() for item in reply["items"]]
    assert texts.count(DISK) == 1
    assert len(texts) == 3  # a1 and its aggregate collapse into one; a2 and a3 remain
    # a1 and the aggregate share vector and terms: whichever ranks first is kept
    a1 = mid("agent-1", "a1", TS)
    assert reply["items"][0]["id"] in {a1, aggregate_id("agent-1", a1)}


async def test_recall_k_counts_distinct_texts() -> None:
    rig = await _seeded()
    await rig.ingest.handle(EventType.EPISODE, messages(episode("agent-1", DISK, TS + 10, "a4")))
    rig.sink.sent.clear()
    await rig.recall.handle(recall_request(k=2))
    (reply,) = rig.on(REPLY_TO)
    assert len(reply["items"]) == 2
    assert len({item["text"].casefold() for item in reply["items"]}) == 2


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


async def test_recall_is_repeatable_on_the_same_state() -> None:
    rig = await _seeded()
    # A read that records no usage leaves the state as it was, so asking again
    # must give the same bytes.
    await rig.recall.handle(recall_request(record_usage=False, explain=True))
    await rig.recall.handle(recall_request(record_usage=False, explain=True))
    first, second = rig.sink.sent
    assert orjson.loads(first[2])["items"] == orjson.loads(second[2])["items"]
    assert _items_bytes(first[2]) == _items_bytes(second[2])


async def test_usage_is_recorded_before_the_reply_goes_out() -> None:
    # A caller that asks again once answered must find this answer's usage
    # recorded, even when another recall slot takes its next request.
    rig = await _seeded()
    seen_at_send: list[dict[str, Any]] = []

    class WatchingSink(MemorySink):
        async def send(self, topic: str, key: str, value: bytes) -> None:
            if topic == REPLY_TO:
                for item in orjson.loads(value)["items"]:
                    seen_at_send.append(dict(rig.store.usage(item["id"])))
            await super().send(topic, key, value)

    rig.recall.sink = WatchingSink()
    await rig.recall.handle(recall_request(as_of=TS + 500))
    assert seen_at_send
    for usage in seen_at_send:
        assert usage["last_accessed"] == str(TS + 500)
        assert int(usage["included_count_total"]) == 1


async def test_replaying_the_log_gives_the_same_answer_usage_included() -> None:
    # Two workers fed the same events and the same requests answer identically,
    # usage accounting and all: nothing depends on the wall clock.
    answers = []
    for _ in range(2):
        rig = await _seeded()
        await rig.recall.handle(recall_request(explain=True))
        await rig.recall.handle(recall_request(explain=True, query="cpu saturated"))
        answers.append([_items_bytes(value) for _, _, value in rig.sink.sent])
    assert answers[0] == answers[1]


def _items_bytes(reply: bytes) -> bytes:
    return orjson.dumps(orjson.loads(reply)["items"])


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
    assert rig.fake.calls == 1  # only the seeding batch; no embedding for a bad request


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


SAD = {"pleasure": -0.8, "arousal": 0.6}
SAD_DISK = (
    "disk full on node seven and the writes are failing",
    "the import job crashed when storage on node seven filled up",
    "paged at night because the postgres volume was exhausted",
    "free space alarm below one percent on the seven box",
    "we lost the nightly report since the partition filled",
)


def _anti_rumination(reply: dict[str, Any]) -> list[str]:
    return [
        item["source_event_id"] for item in reply["items"] if "anti-rumination" in item["reasons"]
    ]


async def test_the_first_recall_of_each_hundred_ticks_carries_a_memory_against_the_mood() -> None:
    rig = Rig()
    glad = episode(
        "agent-1", "celebrated a calm week with the storage cluster healthy", TS, "glad", tick=90,
        affect={"pleasure": 0.7},
    )  # fmt: skip
    sad = [
        episode(
            "agent-1",
            text,
            TS + 1_000 * (n + 1),
            f"sad{n}",
            tick=101 + n,
            affect=SAD,
            importance=0.9,
        )
        for n, text in enumerate(SAD_DISK)
    ]
    await rig.ingest.handle(EventType.EPISODE, messages(glad, *sad))
    rig.sink.sent.clear()

    def ask(**fields: Any) -> InputMessage:
        return recall_request(query="disk full node seven", k=4, **fields)

    await rig.recall.handle(ask(record_usage=False))  # a probe serves no window
    await rig.recall.handle(ask())
    await rig.recall.handle(ask())  # the same window (ticks 100-199), served already
    probe, first, again = rig.on(REPLY_TO)
    assert _anti_rumination(probe) == _anti_rumination(first) == ["glad"]
    assert first["items"][-1]["source_event_id"] == "glad"
    assert _anti_rumination(again) == []
    assert "glad" not in {item["source_event_id"] for item in again["items"]}

    more = episode("agent-1", "the disk on node seven is full yet again", TS + 9_000, "sad9",
                   tick=200, affect=SAD)  # fmt: skip
    await rig.ingest.handle(EventType.EPISODE, messages(more, first_offset=10))
    rig.sink.sent.clear()
    await rig.recall.handle(ask())  # a new window
    (later,) = rig.on(REPLY_TO)
    assert _anti_rumination(later) == ["glad"]


async def test_randomised_tenancy_agents_sharing_texts_and_keys_never_mix() -> None:
    rng = random.Random(20261122)
    words = ["disk", "cpu", "node", "seven", "backup", "deploy", "staging", "prod"]
    words += ["oracle", "gas", "reorg", "funding"]
    agents = [f"agent-{i}" for i in range(4)]
    rig = Rig()
    owned: dict[str, set[str]] = {a: set() for a in agents}
    batch = []
    for n in range(80):
        agent = rng.choice(agents)
        # Shared vocabulary, shared tags and, every fifth event, the very same text.
        text = "disk full on node seven" if n % 5 == 0 else " ".join(rng.sample(words, 5))
        tags = [f"topic/{w}" for w in rng.sample(words, 2)]
        batch.append(episode(agent, text, TS + n, f"e{n}", tags=tags))
        owned[agent].add(f"e{n}")
    await rig.ingest.handle(EventType.EPISODE, messages(*batch))
    rig.sink.sent.clear()
    for n in range(40):
        agent = rng.choice(agents)
        text = " ".join(rng.sample(words, 3))
        await rig.recall.handle(
            recall_request(agent_id=agent, query=text, k=20, correlation_id=f"q{n}")
        )
    replies = rig.on(REPLY_TO)
    assert len(replies) == 40
    for reply in replies:
        agent = reply["agent_id"]
        assert reply["items"], reply
        assert {item["agent_id"] for item in reply["items"]} == {agent}
        assert {item["source_event_id"] for item in reply["items"]} <= owned[agent]


# --- outcomes -----------------------------------------------------------------------


def outcome(kind: str, memory_ids: list[str], ts: int, **extra: Any) -> InputMessage:
    data = {"agent_id": "agent-1", "ts": ts, "outcome": kind, "memory_ids": memory_ids, **extra}
    return InputMessage(orjson.dumps(data), TOPICS.outcomes, partition=0, offset=1)


def _field(rig: Rig, memory_id: str, name: str) -> float:
    doc = rig.store.record(memory_id)
    assert doc is not None
    value = doc[name]
    return float(value.decode() if isinstance(value, bytes) else value)


async def test_positive_and_negative_outcomes_move_confidence_strength_and_decay_origin() -> None:
    rig = await _seeded()
    a1, a2 = mid("agent-1", "a1", TS), mid("agent-1", "a2", TS + 1)
    before = _field(rig, a1, "confidence")
    assert await rig.outcomes.handle(outcome("positive", [a1], TS + 50, event_id="o1")) == 1
    assert _field(rig, a1, "confidence") == pytest.approx(before + 0.1)
    assert _field(rig, a1, "strength") == 2.0
    assert rig.store.usage(a1)["last_accessed"] == str(TS + 50)  # decay restarts here

    # A redelivered outcome changes nothing.
    assert await rig.outcomes.handle(outcome("positive", [a1], TS + 50, event_id="o1")) == -1
    assert _field(rig, a1, "confidence") == pytest.approx(before + 0.1)

    conf2 = _field(rig, a2, "confidence")
    assert await rig.outcomes.handle(outcome("negative", [a2], TS + 60, event_id="o2")) == 1
    assert _field(rig, a2, "confidence") == pytest.approx(conf2 - 0.15)
    assert _field(rig, a2, "strength") == 1.0

    await rig.outcomes.handle(outcome("validated", [a1, a2], TS + 70, event_id="o3"))
    await rig.outcomes.handle(outcome("contradicted", [a2], TS + 80, event_id="o4"))
    assert (_field(rig, a1, "validated_count"), _field(rig, a2, "validated_count")) == (1, 1)
    assert _field(rig, a2, "contradicted_count") == 1
    events = [e for e in rig.events() if e["type"] == "GrimoireOutcome"]
    assert [e["action"] for e in events] == ["positive", "negative", "validated", "contradicted"]


async def test_an_outcome_never_touches_another_agents_memory() -> None:
    rig = await _seeded()
    b1 = mid("agent-2", "b1", TS + 3)
    before = _field(rig, b1, "confidence")
    assert await rig.outcomes.handle(outcome("positive", [b1, "missing"], TS + 9)) == 0
    assert _field(rig, b1, "confidence") == before


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"agent_id": "agent-1", "ts": TS, "outcome": "great"}, "outcome"),
        ({"agent_id": "agent-1", "ts": TS}, "outcome"),
        (
            {"agent_id": "agent-1", "ts": TS, "outcome": "positive", "memory_ids": "m1"},
            "memory_ids",
        ),
        ({"ts": TS, "outcome": "positive"}, "agent_id"),
    ],
)
async def test_bad_outcomes_are_dead_lettered(payload: dict[str, Any], field: str) -> None:
    rig = Rig()
    message = InputMessage(orjson.dumps(payload), TOPICS.outcomes, partition=0, offset=4)
    assert await rig.outcomes.handle(message) == 0
    (dead,) = rig.on(TOPICS.dead_letters)
    assert dead["field"] == field
