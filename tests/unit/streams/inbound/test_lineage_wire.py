"""Lineage on the wire: `provenance`, `decay_class` and `pinned` on published events,
validated by the normalizer, stored by the memory-hash codec and read back by decay,
the decay schedule, compaction, the curator and recall's rerank. Expected values are
worked out by hand in the comments (half-lives: warning 30 d, tactical 7 d,
structural never; lineage x3; bloodstain boost x1.2)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from grimoire.streams.inbound.events import Accepted, Rejection, normalize_event
from grimoire.streams.inbound.validators import InputLimits
from grimoire.streams.maintenance.compaction import (
    DEFAULT_COMPACTION_POLICY,
    eligible,
)
from grimoire.streams.maintenance.decay_pass import effective_now, initial_due_ms
from grimoire.streams.model.decay import (
    DAY_MS,
    DREAM_PROVENANCES,
    LINEAGE_PROVENANCES,
    DecayClass,
    effective_confidence,
    half_life_ms,
)
from grimoire.streams.model.records import (
    PUBLISHED_PROVENANCES,
    EventType,
    Kind,
    MemoryCandidate,
    MemoryRecord,
)
from grimoire.streams.recall.rerank import Candidate, rerank
from grimoire.tables.codec.curator_state import Bookkeeping
from grimoire.tables.codec.memory_hash import (
    candidate_of,
    curated_entry,
    decode_record,
    decode_state,
    hash_fields,
    quarantined_view,
)
from grimoire.tables.trust.digest import EXCLUDED_FIELDS
from grimoire.topics.schemas import EpisodeV1, ToolEventV1, TranscriptV1

LIMITS = InputLimits()
TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
AGENT = "agent-1"
DIMS = 4
VECTOR = b"\x00" * (DIMS * 4)

BASES: dict[EventType, dict[str, Any]] = {
    EventType.EPISODE: {"agent_id": AGENT, "ts": TS, "text": "bridge drained", "kind": "warning"},
    EventType.TOOL: {"agent_id": AGENT, "ts": TS, "tool": "swap", "result": "slipped 3%"},
    EventType.TRANSCRIPT: {
        "agent_id": AGENT,
        "ts": TS,
        "line": {"role": "user", "content": "fee tiers are fixed"},
    },
}
STREAMS = sorted(BASES, key=lambda e: e.value)


def normalize(event_type: EventType, **extra: Any) -> Accepted | Rejection:
    raw = orjson.dumps({**BASES[event_type], **extra})
    return normalize_event(event_type, raw, LIMITS)


def only(event_type: EventType, **extra: Any) -> MemoryCandidate:
    outcome = normalize(event_type, **extra)
    assert isinstance(outcome, Accepted), outcome
    (candidate,) = outcome.candidates
    return candidate


def stored(candidate: MemoryCandidate, confidence: float = 0.8) -> dict[str, Any]:
    """The memory hash as Redis hands it back (bytes values)."""
    fields = hash_fields(MemoryRecord(candidate, VECTOR, confidence=confidence), 0)
    return {
        name: value if isinstance(value, bytes) else str(value).encode()
        for name, value in fields.items()
    }


# ---- the normalizer: (stream, extra fields) -> (provenance, decay_class, pinned) ----

VALID: list[tuple[str, dict[str, Any], tuple[str, str, bool]]] = [
    ("absent", {}, ("self", "", False)),
    ("bloodstain", {"provenance": "bloodstain"}, ("bloodstain", "", False)),
    ("clade", {"provenance": "clade"}, ("clade", "", False)),
    ("dream", {"provenance": "dream_validated"}, ("dream_validated", "", False)),
    ("spelled loosely", {"provenance": "Death-Reflection"}, ("death_reflection", "", False)),
    ("empty reads as self", {"provenance": ""}, ("self", "", False)),
    ("tactical", {"decay_class": "tactical"}, ("self", "tactical", False)),
    (
        "hyphenated class",
        {"decay_class": "regime-conditional"},
        ("self", "regime_conditional", False),
    ),
    ("pinned", {"pinned": True}, ("self", "", True)),
    ("unpinned", {"pinned": False}, ("self", "", False)),
    (
        "all three",
        {"provenance": "predecessor", "decay_class": "structural", "pinned": True},
        ("predecessor", "structural", True),
    ),
]  # fmt: skip


@pytest.mark.parametrize("event_type", STREAMS, ids=lambda e: e.value)
@pytest.mark.parametrize(("extra", "expected"), [v[1:] for v in VALID], ids=[v[0] for v in VALID])
def test_valid_lineage_fields_reach_every_candidate(
    event_type: EventType, extra: dict[str, Any], expected: tuple[str, str, bool]
) -> None:
    candidate = only(event_type, **extra)
    assert (candidate.provenance.provenance, candidate.decay_class, candidate.pinned) == expected


INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown provenance", {"provenance": "ghost"}, "invalid_value", "provenance"),
    # Grimoire's own origins are not for events to claim.
    ("internal provenance", {"provenance": "compaction"}, "invalid_value", "provenance"),
    ("provenance with a space", {"provenance": "blood stain"}, "invalid_value", "provenance"),
    ("provenance not a string", {"provenance": 7}, "wrong_type", "provenance"),
    ("provenance a list", {"provenance": ["self"]}, "wrong_type", "provenance"),
    ("unknown decay class", {"decay_class": "forever"}, "invalid_value", "decay_class"),
    ("decay class not a string", {"decay_class": 1}, "wrong_type", "decay_class"),
    ("pinned as a string", {"pinned": "true"}, "wrong_type", "pinned"),
    ("pinned as a number", {"pinned": 1}, "wrong_type", "pinned"),
]  # fmt: skip


@pytest.mark.parametrize("event_type", STREAMS, ids=lambda e: e.value)
@pytest.mark.parametrize(
    ("extra", "reason", "field"), [v[1:] for v in INVALID], ids=[v[0] for v in INVALID]
)
def test_bad_lineage_fields_are_dead_lettered_on_their_field(
    event_type: EventType, extra: dict[str, Any], reason: str, field: str
) -> None:
    outcome = normalize(event_type, **extra)
    assert isinstance(outcome, Rejection), outcome
    assert (outcome.reason, outcome.field, outcome.agent_id) == (reason, field, AGENT)


def test_every_part_of_a_transcript_line_carries_the_fields() -> None:
    line = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "the old golem died here"},
            {"type": "text", "text": "avoid the bridge"},
        ],
    }
    outcome = normalize(
        EventType.TRANSCRIPT, line=line, provenance="bloodstain", decay_class="tactical"
    )
    assert isinstance(outcome, Accepted)
    assert len(outcome.candidates) == 2
    for part in outcome.candidates:
        assert (part.provenance.provenance, part.decay_class) == ("bloodstain", "tactical")


def test_the_sdk_records_carry_the_fields_and_omit_them_when_unset() -> None:
    records = [
        (EventType.EPISODE, EpisodeV1(agent_id=AGENT, ts=TS, text="t", provenance="clade")),
        (EventType.TOOL, ToolEventV1(agent_id=AGENT, ts=TS, tool="t", decay_class="ephemeral")),
        (
            EventType.TRANSCRIPT,
            TranscriptV1(agent_id=AGENT, ts=TS, line={"role": "user", "content": "x"}, pinned=True),
        ),
    ]
    got = []
    for event_type, record in records:
        outcome = normalize_event(event_type, record.dumps_json(), LIMITS)
        assert isinstance(outcome, Accepted), outcome
        (cand,) = outcome.candidates
        got.append((cand.provenance.provenance, cand.decay_class, cand.pinned))
    assert got == [("clade", "", False), ("self", "ephemeral", False), ("self", "", True)]
    plain = orjson.loads(EpisodeV1(agent_id=AGENT, ts=TS, text="t").dumps_json())
    assert not {"provenance", "decay_class", "pinned"} & set(plain)


def test_published_provenances_cover_what_decay_and_rerank_know() -> None:
    assert LINEAGE_PROVENANCES | DREAM_PROVENANCES | {"self", "clade"} == PUBLISHED_PROVENANCES


# ---- storage: the memory hash holds them, and every reader sees them ------------


def test_the_memory_hash_stores_the_fields_only_when_set() -> None:
    plain = hash_fields(MemoryRecord(only(EventType.EPISODE), VECTOR), 0)
    # Absent, not empty: a record published without them stores (and digests) as before.
    assert "decay_class" not in plain and "pinned" not in plain
    assert plain["provenance"] == "self"
    marked = hash_fields(
        MemoryRecord(
            only(EventType.EPISODE, provenance="bloodstain", decay_class="tactical", pinned=True),
            VECTOR,
        ),
        0,
    )
    assert (marked["provenance"], marked["decay_class"], marked["pinned"]) == (
        "bloodstain",
        "tactical",
        "1",
    )
    # The agent digest hashes every memory-hash field but these, so a replay that
    # lost one of the three would not rebuild the same digest.
    assert not {b"provenance", b"decay_class", b"pinned"} & EXCLUDED_FIELDS["memory"]


def test_recall_and_the_decay_pass_read_the_stored_fields() -> None:
    doc = stored(only(EventType.EPISODE, provenance="bloodstain", decay_class="tactical"))
    record = decode_record(doc, AGENT, DIMS)
    assert record is not None
    assert (record.provenance, record.decay_class) == ("bloodstain", "tactical")
    state = decode_state(doc, None, None)
    assert state is not None
    assert (state.entry.provenance, state.entry.decay_class) == ("bloodstain", "tactical")
    # Tactical 7 d, x3 for a bloodstain = 21 d: after 21 days 0.8 · ½ = 0.4, both readers.
    later = TS + 21 * DAY_MS
    assert record.effective_confidence(later) == pytest.approx(0.4)
    assert effective_now(state.entry, later) == pytest.approx(0.4)


def test_compaction_and_the_curator_see_a_published_pin() -> None:
    pinned = stored(only(EventType.EPISODE, pinned=True, decay_class="ephemeral"))
    loose = stored(only(EventType.EPISODE, text="another warning entirely"))
    much_later = TS + 365 * DAY_MS
    assert candidate_of(pinned, (None, None)).pinned
    assert not eligible(candidate_of(pinned, (None, None)), much_later, DEFAULT_COMPACTION_POLICY)
    assert eligible(candidate_of(loose, (None, None)), much_later, DEFAULT_COMPACTION_POLICY)
    entry = curated_entry(pinned, None, Bookkeeping())
    assert (entry.pinned, entry.decay_class, entry.kind) == (True, "ephemeral", Kind.WARNING)
    assert quarantined_view(pinned).pinned and not quarantined_view(loose).pinned


# ---- decay with the published fields, by hand -----------------------------------


def test_a_tactical_memory_fades_where_a_structural_one_does_not() -> None:
    tactical = stored(only(EventType.TOOL, decay_class="tactical"))
    structural = stored(only(EventType.TOOL, decay_class="structural"))
    plain = stored(only(EventType.TOOL))  # an episode: 48 h
    now = TS + 7 * DAY_MS
    values = []
    for doc in (tactical, structural, plain):
        record = decode_record(doc, AGENT, DIMS)
        assert record is not None
        values.append(record.effective_confidence(now))
    # Tactical: 0.8 · 2^(-7/7) = 0.4. Structural: no decay, 0.8. The kind alone
    # (episode, 2 d): 0.8 · 2^(-3.5) = 0.0707…, above the 0.05 floor.
    assert values == pytest.approx([0.4, 0.8, 0.8 * 0.08838834764831845])
    three_days = decode_record(tactical, AGENT, DIMS)
    assert three_days is not None
    # 0.8 · 2^(-3/7) = 0.8 · 0.742997… = 0.594398…
    assert three_days.effective_confidence(TS + 3 * DAY_MS) == pytest.approx(0.594398, abs=1e-6)


def test_a_bloodstain_warning_lives_three_times_as_long_as_a_plain_one() -> None:
    plain = only(EventType.EPISODE)
    blood = only(EventType.EPISODE, provenance="bloodstain")
    assert half_life_ms(plain.kind, plain.decay_class, plain.provenance.provenance) == 30 * DAY_MS
    assert half_life_ms(blood.kind, blood.decay_class, blood.provenance.provenance) == 90 * DAY_MS
    # After 90 days: plain 0.8 · 2^-3 = 0.1; bloodstain 0.8 · 2^-1 = 0.4.
    after = TS + 90 * DAY_MS
    got = [decode_record(stored(c), AGENT, DIMS) for c in (plain, blood)]
    assert [r.effective_confidence(after) for r in got if r is not None] == pytest.approx(
        [0.1, 0.4]
    )
    # A dream-validated warning sits between: 60 d, 0.8 · 2^-1.5 = 0.28284…
    dream = effective_confidence(0.8, TS, after, kind=Kind.WARNING, provenance="dream")
    assert dream == pytest.approx(0.282843, abs=1e-6)


def test_the_decay_schedule_follows_the_published_class() -> None:
    def first_due(candidate: MemoryCandidate) -> int | None:
        state = decode_state(
            hash_fields(MemoryRecord(candidate, VECTOR, confidence=0.8), 0), None, None
        )
        assert state is not None
        return initial_due_ms(state.entry)

    assert first_due(only(EventType.EPISODE, decay_class="structural")) is None  # never decays
    plain = first_due(only(EventType.EPISODE))
    blood = first_due(only(EventType.EPISODE, provenance="bloodstain"))
    assert plain is not None and blood is not None
    # The same retention is reached after 3x the time (to the millisecond the
    # schedule rounds to).
    assert abs((blood - TS) - 3 * (plain - TS)) <= 3


def test_decay_class_overrides_the_kind_for_a_published_warning() -> None:
    warning = only(EventType.EPISODE, decay_class=DecayClass.EPHEMERAL.value)
    record = decode_record(stored(warning), AGENT, DIMS)
    assert record is not None
    # Ephemeral 24 h instead of the warning's 30 d: 0.8 · 2^-2 = 0.2 after two days.
    assert record.effective_confidence(TS + 2 * DAY_MS) == pytest.approx(0.2)


# ---- recall's rerank: the lineage boost, from the stored provenance -------------


@pytest.mark.parametrize(
    ("origin", "boost"),
    [
        ("bloodstain", 1.2),
        ("predecessor", 1.2),
        ("death_reflection", 1.2),
        ("self", 1.0),
        ("clade", 1.0),
        ("dream", 1.0),
    ],
)
def test_the_rerank_boost_comes_from_the_published_provenance(origin: str, boost: float) -> None:
    record = decode_record(stored(only(EventType.EPISODE, provenance=origin)), AGENT, DIMS)
    assert record is not None
    now = TS
    candidate = Candidate(
        memory_id=record.memory_id,
        relevance=1.0,
        effective_confidence=record.effective_confidence(now),
        quality=0.5,
        ts_ms=record.ts_ms,
        provenance=record.provenance,
    )
    (scored,) = rerank([candidate], now_ms=now)
    # prior = (0.25·0.8 + 0.20·0.5 + 0.15·1 + 0.10·0.5) / 0.70 = 0.5 / 0.7
    # score = boost · 1 · (0.7 + 0.3 · 0.5/0.7) = boost · 0.914285…
    assert scored.factors.boost == boost
    assert scored.score == pytest.approx(boost * (0.7 + 0.3 * 0.5 / 0.7))
    assert scored.score == pytest.approx(boost * 0.9142857, abs=1e-6)
