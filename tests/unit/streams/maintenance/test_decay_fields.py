"""Stored fields → decay inputs, read exactly as recall reads them (no services)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from grimoire.streams.maintenance.decay_pass import _first_true, effective_now, initial_due_ms
from grimoire.streams.model.decay import DAY_MS, HOUR_MS
from grimoire.streams.model.records import EventType, Kind, Provenance
from grimoire.tables.codec.memory_hash import decode_record, decode_state, hash_fields, with_usage
from tests.support.builders import memory_candidate, memory_record

T0 = 1_790_000_000_000


def recall_value(doc: dict[str, Any], usage: dict[str, Any], now_ms: int) -> float:
    record = decode_record(with_usage(doc, usage), "agent-1", 384)
    assert record is not None
    return record.effective_confidence(now_ms)


def random_doc(rng: random.Random, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Hash values as Redis returns them (bytes), with fields randomly absent."""
    full: dict[str, Any] = {
        "memory_id": f"m{index}",
        "agent_id": "agent-1",
        "kind": rng.choice(["episode", "insight", "heuristic", "warning", "summary"]),
        "ts": T0 + rng.randrange(-DAY_MS, DAY_MS),
        "last_accessed": T0 + rng.randrange(-DAY_MS, DAY_MS),
        "confidence": rng.random(),
        "quality": rng.random(),
        "strength": rng.uniform(0.5, 5.0),
        "decay_class": rng.choice(["", "tactical", "ephemeral", "regime-conditional"]),
        "provenance": rng.choice(["", "self", "bloodstain", "dream"]),
    }
    doc = {
        name: repr(value).encode() if isinstance(value, float) else str(value).encode()
        for name, value in full.items()
        if name in ("memory_id", "agent_id") or rng.random() < 0.8
    }
    usage: dict[str, Any] = {}
    if rng.random() < 0.5:
        usage["last_accessed"] = str(T0 + rng.randrange(-DAY_MS, 2 * DAY_MS)).encode()
    return doc, usage


def test_decoded_entry_decays_exactly_as_recall_reads_it() -> None:
    rng = random.Random(11)
    for index in range(2000):
        doc, usage = random_doc(rng, index)
        state = decode_state(doc, usage.get("last_accessed"), None)
        assert state is not None and state.live
        now = T0 + rng.randrange(0, 20 * DAY_MS)
        assert effective_now(state.entry, now) == recall_value(doc, usage, now), doc


def test_missing_lifecycle_and_snapshot() -> None:
    assert decode_state({"agent_id": b"a"}, None, None) is None
    base = {"memory_id": b"m", "agent_id": b"a", "kind": b"episode", "ts": b"5"}
    state = decode_state(base, None, b"0.25")
    assert state is not None
    assert state.entry.last_accessed_ms == 5  # no access recorded: the event time
    assert state.entry.stored_effective == 0.25
    assert (state.entry.confidence, state.entry.strength, state.entry.provenance) == (
        0.5,
        1.0,
        "self",
    )
    for flag, value in (("deleted", b"1"), ("archived", b"1"), ("replaced_by_summary_id", b"s")):
        gone = decode_state({**base, flag: value}, None, None)
        assert gone is not None and not gone.live
    kept = decode_state({**base, "quarantined": b"1", "deleted": b"0"}, None, None)
    assert kept is not None and kept.live  # quarantine is reviewed, not forgotten


def test_a_freshly_encoded_record_is_due_at_its_first_crossing() -> None:
    candidate = memory_candidate(
        "agent-1",
        "ev-1",
        "disk full",
        ts=T0,
        kind=Kind.INSIGHT,
        provenance=Provenance("ev-1", EventType.EPISODE.value, provenance="predecessor"),
        id="0194-x",
        normalized_hash="h",
    )
    vector = np.zeros(4, dtype=np.float32).tobytes()
    fields = hash_fields(memory_record(candidate, vector, eidolon=b"", confidence=0.8), 0)
    state = decode_state(fields, None, None)
    assert state is not None and state.agent_id == "agent-1"
    # Insight 7 d, predecessor 3x slower: 0.8 halves to 0.4 at 21 d.
    assert initial_due_ms(state.entry) == T0 + 21 * DAY_MS + 1


def test_first_true_corrects_any_guess() -> None:
    edge = T0 + 37 * HOUR_MS + 12_345

    def crossed(t: int) -> bool:
        return t >= edge

    for guess in (
        T0 - DAY_MS,
        T0,
        edge - 1_000_000,
        edge - 2,
        edge - 1,
        edge,
        edge + 1,
        edge + 10**9,
    ):
        assert _first_true(crossed, T0, guess) == edge
