"""IngestHandler (agents/handlers/ingest.py) against InMemoryMemoryStore and the counting
fake embedder, wired up in tests/support/handlers.py.

Admission numbers are worked out by hand from streams/write/admission.py. A plain episode
observation of four words or more has importance 0.3, so U = 0.12, F = 0.4 (no
evidence, no neighbour above 0.5), T = 0.2; composite = 0.03 + 0.1 + 0.2·N + 0.15·R
+ 0.03. The fake embedder is a bag of words hashed into 64 buckets: two texts that
share s of their n and m distinct words (no bucket collisions among the words used)
have cosine s / sqrt(n·m).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from grimoire.agents.handlers.ingest import IngestReport
from grimoire.infra.embedding.embedder import CachingEmbedder
from grimoire.streams.model.records import EventType
from grimoire.streams.write.plan import aggregate_id
from tests.support.embedders import FakeEmbedder
from tests.support.handlers import (
    CPU,
    DISK,
    REPLY_TO,
    TOPICS,
    TS,
    Rig,
    episode,
    messages,
    mid,
    recall_request,
)

WEIGHTS = {
    "future_utility": 0.25,
    "factual_confidence": 0.25,
    "novelty": 0.20,
    "recency": 0.15,
    "type_prior": 0.15,
}

BAD = b'{"agent_id": "agent-1", "ts": '
GOOD_1 = episode("agent-1", DISK, TS, "ev-1")
GOOD_2 = episode("agent-1", CPU, TS + 1_000, "ev-2")


def assert_composite_adds_up(event: dict[str, Any]) -> None:
    admission = event["admission"]
    assert set(admission) == {"composite", *WEIGHTS}
    total = sum(weight * admission[name] for name, weight in WEIGHTS.items())
    assert admission["composite"] == pytest.approx(total, abs=1e-9)


# --- dead letters, events, admission --------------------------------------------------


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


# --- idempotency ----------------------------------------------------------------------

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
    # the aggregate joins the repeats' run in their role (a run keeps its members)
    assert before["edge"] == {
        original: "context",
        aggregate_id("agent-1", original): "context",
    }
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
    copy wins whether they arrive in one batch or two (docs/design.md §1, replays)."""
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


# --- embedding ------------------------------------------------------------------------


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


# --- the eidolon lane -----------------------------------------------------------------

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


# --- watermark and transcripts --------------------------------------------------------


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
