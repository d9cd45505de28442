"""Stored rows → recall records and walk nodes, as the Redis source decodes them."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import orjson
import pytest

from grimoire.streams.recall.walk.daimoi import NodeInfo
from grimoire.tables.codec.memory_hash import RECORD_FIELDS, decode_record, decode_row, with_usage
from grimoire.tables.codec.walk_node import NODE_SEPARATOR, DecodedNodes, unpack_node

AGENT = "agent-1"


def stored_doc(rng: random.Random, index: int) -> dict[str, Any]:
    """A memory hash as Redis returns it (bytes), with optional fields absent."""
    vector = rng.random() < 0.8
    full: dict[str, Any] = {
        "memory_id": f"m{index}",
        "agent_id": AGENT,
        "kind": rng.choice(["episode", "summary", "insight"]),
        "layer": "episodic",
        "text": f"text {index} ünïcode",
        "gist": f"gist {index}",
        "ts": str(rng.randrange(10**12)),
        "confidence": repr(rng.random()),
        "quality": rng.choice([repr(rng.random()), "not-a-number"]),
        "importance": repr(rng.random()),
        "strength": repr(rng.uniform(0.5, 3)),
        "last_accessed": str(rng.randrange(10**12)),
        "decay_class": rng.choice(["", "tactical"]),
        "provenance": rng.choice(["", "self", "bloodstain"]),
        "regime": "calm",
        "affect": rng.choice(
            [orjson.dumps({"pleasure": 0.5, "drives": [["hunger", 0.2]]}).decode(), "{bad"]
        ),
        "normalized_hash": f"h{index}",
        "deleted": rng.choice(["0", "1"]),
        "quarantined": rng.choice(["0", "1"]),
        "archived": rng.choice(["0", "1"]),
        "replaced_by_summary_id": rng.choice(["", "s1"]),
        "session_id": "s",
        "run_id": "r",
        "actor_id": "bot",
        "event_type": "transcript",
        "source_event_id": f"e{index}",
        "hyperedge_ids": rng.choice(["", "h1|h2", "h1||"]),
        "nexus_keys": "speaker:ann|topic:tea",
    }
    doc: dict[str, Any] = {
        name: value.encode()
        for name, value in full.items()
        if name in ("memory_id", "agent_id") or rng.random() < 0.85
    }
    if vector:
        doc["canonical"] = np.arange(4, dtype=np.float32).tobytes()
    return doc


def test_a_row_decodes_as_its_hash_does_with_usage_merged() -> None:
    rng = random.Random(5)
    for index in range(500):
        doc = stored_doc(rng, index)
        usage = {"last_accessed": str(rng.randrange(10**12)).encode()} if index % 2 else {}
        expected = decode_record(with_usage(doc, usage), AGENT, 4)
        row = [doc.get(name) for name in RECORD_FIELDS]
        got = decode_row(row, usage.get("last_accessed"), AGENT, 4)
        assert expected is not None and got is not None
        if expected.vector is None:
            assert got.vector is None
        else:
            assert got.vector is not None
            np.testing.assert_array_equal(got.vector, expected.vector)
        assert (got.memory_id, got.last_accessed_ms) == (
            expected.memory_id,
            expected.last_accessed_ms,
        )
        assert repr(got) == repr(expected)


def test_usage_only_moves_last_access_forward() -> None:
    doc = {"memory_id": b"m", "agent_id": AGENT.encode(), "last_accessed": b"500"}
    row = [doc.get(name) for name in RECORD_FIELDS]
    assert (record := decode_row(row, b"900", AGENT, 4)) and record.last_accessed_ms == 900
    assert (record := decode_row(row, b"100", AGENT, 4)) and record.last_accessed_ms == 500
    bare = [doc.get(name) if name != "last_accessed" else None for name in RECORD_FIELDS]
    assert (record := decode_row(bare, None, AGENT, 4)) and record.last_accessed_ms is None


def test_missing_or_foreign_rows_read_as_missing() -> None:
    doc = stored_doc(random.Random(1), 1)
    row = [doc.get(name) for name in RECORD_FIELDS]
    assert decode_row(row, None, "someone-else", 4) is None
    assert decode_row([None] * len(RECORD_FIELDS), None, AGENT, 4) is None


def packed(*fields: str) -> bytes:
    return NODE_SEPARATOR.join(fields).encode()


ENTRY = packed("episode", "speaker:ann|topic:tea", "1000", "0.7", "0", "0", "0", "", "bot")


def test_a_cached_node_is_the_decoded_node() -> None:
    cache = DecodedNodes(10)
    first = cache.node("m1", ENTRY)
    assert first == unpack_node("m1", ENTRY)
    assert first == NodeInfo(
        "m1", "episode", ("speaker:ann", "topic:tea"), 1000, utility=0.7, actor="bot"
    )
    assert cache.node("m1", ENTRY) is first  # decoded once
    assert len(cache) == 1


def test_a_rewritten_entry_is_decoded_again_never_served_stale() -> None:
    cache = DecodedNodes(10)
    before = cache.node("m1", ENTRY)
    deleted = packed("episode", "speaker:ann", "1000", "0.7", "1", "0", "0", "", "bot")
    after = cache.node("m1", deleted)
    assert before is not None and not before.deleted
    assert after is not None and after.deleted
    # Same bytes under another id: another node.
    other = cache.node("m2", ENTRY)
    assert other is not None and other.memory_id == "m2"


def test_unpackable_entries_read_as_none_cached_or_not() -> None:
    for capacity in (0, 10):
        cache = DecodedNodes(capacity)
        assert cache.node("m1", b"too\x1ffew") is None
        assert cache.node("m1", b"too\x1ffew") is None


def test_the_cache_stays_within_its_capacity() -> None:
    cache = DecodedNodes(50)
    for index in range(500):
        entry = packed("episode", "k:v", str(index), "0.5", "0", "0", "0", "", "")
        node = cache.node(f"m{index}", entry)
        assert node is not None and node.ts_ms == index
        assert len(cache) <= 50
    assert len(DecodedNodes(0)) == 0
    with pytest.raises(ValueError):
        DecodedNodes(-1)


def test_every_field_decodes_to_its_value() -> None:
    doc = {
        "memory_id": b"m9",
        "agent_id": AGENT.encode(),
        "kind": b"summary",
        "layer": b"semantic",
        "text": "caf\u00e9".encode(),
        "gist": b"g",
        "ts": b"1700.0",
        "confidence": b"0.25",
        "quality": b"oops",
        "strength": b"2",
        "last_accessed": b"1800",
        "affect": b'{"pleasure": 0.5, "arousal": -0.25, "drives": [["rest", 1]]}',
        "deleted": b"1",
        "replaced_by_summary_id": b"s7",
        "hyperedge_ids": b"h1||h2",
        "nexus_keys": b"speaker:ann",
        "canonical": np.ones(4, dtype=np.float32).tobytes(),
    }
    record = decode_row([doc.get(name) for name in RECORD_FIELDS], b"1750", AGENT, 4)
    assert record is not None
    assert (record.memory_id, record.kind, record.layer, record.text) == (
        "m9",
        "summary",
        "semantic",
        "caf\u00e9",
    )
    assert (record.ts_ms, record.confidence, record.quality, record.importance) == (
        1700,
        0.25,
        0.5,
        0.5,
    )
    assert (record.strength, record.last_accessed_ms, record.provenance) == (2.0, 1800, "self")
    assert record.affect is not None and record.affect.arousal == -0.25
    assert record.affect.drives == (("rest", 1.0),)
    assert (record.deleted, record.quarantined, record.replaced_by) == (True, False, "s7")
    assert (record.hyperedge_ids, record.nexus_keys) == (("h1", "h2"), ("speaker:ann",))
    assert record.vector is not None and record.vector.tolist() == [1.0] * 4
