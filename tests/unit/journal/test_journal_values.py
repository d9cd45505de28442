"""The journal's pure parts: the envelope, the fold's runs and marks, usage entries,
and commands."""

from __future__ import annotations

import orjson
import pytest

from grimoire.streams.inbound.command import CommandKind, parse_command
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.inbound.validators import InputLimits
from grimoire.streams.journal.entry import (
    EntryKind,
    InvalidEntry,
    JournalEntry,
    SourceRef,
    associated_data,
    decode_entry,
    encode_entry,
)
from grimoire.streams.journal.fold import SourceMarks, runs
from grimoire.streams.journal.usage import RecallUsage, decode_usage, encode_usage
from grimoire.topics.schemas import CommandV1

ENTRY = JournalEntry(
    agent_id="golem-1",
    seq=7,
    kind=EntryKind.OUTCOME,
    source=SourceRef("g.outcomes", 3, 41),
    key_id="k1",
    nonce=b"\x00" * 12,
    ciphertext=b"sealed bytes",
)


def test_an_entry_round_trips_and_hides_nothing_but_its_payload() -> None:
    raw = encode_entry(ENTRY)
    assert decode_entry(raw) == ENTRY
    envelope = orjson.loads(raw)
    assert envelope["agent_id"] == "golem-1" and envelope["source"] == ["g.outcomes", 3, 41]
    assert b"sealed bytes" not in raw  # base64: nothing readable leaks by accident


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"v": 2}',
        orjson.dumps({**orjson.loads(encode_entry(ENTRY)), "kind": "nonsense"}),
        orjson.dumps({**orjson.loads(encode_entry(ENTRY)), "seq": "7"}),
        orjson.dumps({**orjson.loads(encode_entry(ENTRY)), "payload": "!!"}),
        orjson.dumps({**orjson.loads(encode_entry(ENTRY)), "source": ["t", "p", 1]}),
    ],
)
def test_what_is_not_an_entry_is_refused(raw: bytes) -> None:
    with pytest.raises(InvalidEntry):
        decode_entry(raw)


def test_the_binding_names_agent_key_and_place() -> None:
    one = associated_data("a", "k", 1)
    assert one != associated_data("b", "k", 1)
    assert one != associated_data("a", "k2", 1)
    assert one != associated_data("a", "k", 2)


def test_ingest_entries_run_together_and_nothing_jumps_a_command() -> None:
    kinds = [
        EntryKind.EPISODE,
        EntryKind.TRANSCRIPT,
        EntryKind.OUTCOME,
        EntryKind.TOOL_EVENT,
        EntryKind.EPISODE,
        EntryKind.EPISODE,
        EntryKind.MAINTENANCE,
        EntryKind.EPISODE,
    ]
    found = runs(list(zip(kinds, range(len(kinds)), strict=True)), max_run=2)
    assert [(r.kind, r.items) for r in found] == [
        (EntryKind.EPISODE, (0, 1)),
        (EntryKind.OUTCOME, (2,)),
        (EntryKind.TOOL_EVENT, (3, 4)),
        (EntryKind.EPISODE, (5,)),
        (EntryKind.MAINTENANCE, (6,)),
        (EntryKind.EPISODE, (7,)),
    ]


def test_marks_skip_what_a_source_partition_already_gave_this_agent() -> None:
    marks = SourceMarks({("a", "t", 0): 10})
    assert marks.is_applied(EntryKind.EPISODE, SourceRef("t", 0, 10), "a")
    assert not marks.is_applied(EntryKind.EPISODE, SourceRef("t", 0, 11), "a")
    assert not marks.is_applied(EntryKind.EPISODE, SourceRef("t", 1, 3), "a")
    # One source partition feeds many agents, applied side by side: another
    # agent's progress skips nothing here.
    assert not marks.is_applied(EntryKind.EPISODE, SourceRef("t", 0, 3), "b")
    # Usage entries of concurrent recalls may come out of order: never skipped.
    assert not marks.is_applied(EntryKind.USAGE, SourceRef("t", 0, 2), "a")
    marks.advance(EntryKind.EPISODE, SourceRef("t", 0, 12), "a")
    marks.advance(EntryKind.EPISODE, SourceRef("t", 0, 11), "a")
    assert marks.marks[("a", "t", 0)] == 12
    assert marks.moved({("a", "t", 0): 10}) == {("a", "t", 0): 12}


def test_usage_entries_round_trip_and_refuse_garbage() -> None:
    usage = RecallUsage(("m1", "m2"), 1_000, 3)
    assert decode_usage(encode_usage(usage)) == usage
    assert RecallUsage((), 1, None).empty and not RecallUsage((), 1, 0).empty
    with pytest.raises(InvalidEntry):
        decode_usage(b'{"memory_ids": "m1", "as_of": 1}')


@pytest.mark.parametrize(
    ("command", "kind", "target"),
    [
        (CommandV1(agent_id="a", command="retract", source_event_id="ev-1"), "retract", "ev-1"),
        (CommandV1(agent_id="a", command="pin", memory_id="m-1"), "pin", "m-1"),
        (CommandV1(agent_id="a", command="unpin", memory_id="m-1"), "unpin", "m-1"),
        (CommandV1(agent_id="a", command="forget"), "forget", ""),
    ],
)
def test_the_sdks_commands_parse(command: CommandV1, kind: str, target: str) -> None:
    parsed = parse_command(command.dumps_json(), InputLimits())
    assert not isinstance(parsed, Rejection)
    assert parsed.kind is CommandKind(kind) and parsed.target == target
    assert parsed.command_id  # a hash of the payload when no event id is given


@pytest.mark.parametrize(
    ("payload", "reason", "field"),
    [
        ({"agent_id": "a", "command": "erase"}, "invalid_value", "command"),
        ({"agent_id": "a", "command": "retract"}, "missing_field", "source_event_id"),
        ({"agent_id": "a", "command": "pin"}, "missing_field", "memory_id"),
        ({"command": "forget"}, "missing_field", "agent_id"),
        (
            {"agent_id": "a", "command": "forget", "schema": "grimoire.command/9"},
            "unsupported_schema",
            "schema",
        ),
    ],
)
def test_bad_commands_are_refused_with_a_reason(
    payload: dict[str, str], reason: str, field: str
) -> None:
    parsed = parse_command(orjson.dumps(payload), InputLimits())
    assert isinstance(parsed, Rejection)
    assert (parsed.reason, parsed.field) == (reason, field)
