"""The journal's pure parts: the envelope, the fold's runs and marks, usage entries,
and commands."""

from __future__ import annotations

from dataclasses import replace

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
    journal_name,
)
from grimoire.streams.journal.fold import SourceMarks, runs
from grimoire.streams.journal.usage import RecallUsage, decode_usage, encode_usage
from grimoire.topics.schemas import CommandV1

NAME = journal_name(b"deployment secret", "golem-1")
ENTRY = JournalEntry(
    agent_id="golem-1",
    seq=7,
    kind=EntryKind.OUTCOME,
    source=SourceRef("g.outcomes", 3, 41),
    key_id="k1",
    nonce=b"\x00" * 12,
    ciphertext=b"sealed bytes",
    journal=NAME,
)


def test_an_entry_round_trips_naming_its_agent_only_by_journal_name() -> None:
    raw = encode_entry(ENTRY)
    # The id comes back from the key store (the fold asks it), not from the log.
    assert decode_entry(raw) == replace(ENTRY, agent_id="")
    envelope = orjson.loads(raw)
    assert envelope["agent"] == NAME and envelope["source"] == ["g.outcomes", 3, 41]
    assert b"golem-1" not in raw
    assert b"sealed bytes" not in raw  # base64: nothing readable leaks by accident


def test_journal_names_are_keyed_stable_and_distinct() -> None:
    assert journal_name(b"deployment secret", "golem-1") == NAME
    assert journal_name(b"another secret", "golem-1") != NAME
    assert journal_name(b"deployment secret", "golem-2") != NAME
    assert NAME.startswith("j:") and len(NAME) == 34


def test_a_version_1_entry_still_reads_with_its_agent_in_clear() -> None:
    old = {**orjson.loads(encode_entry(ENTRY)), "v": 1, "agent_id": "golem-1"}
    del old["agent"]
    assert decode_entry(orjson.dumps(old)) == replace(ENTRY, journal="golem-1")


def test_an_entry_without_a_journal_name_is_not_written() -> None:
    with pytest.raises(InvalidEntry):
        encode_entry(replace(ENTRY, journal="golem-1"))


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"v": 2}',
        b'{"v": 3}',
        orjson.dumps({**orjson.loads(encode_entry(ENTRY)), "agent": "golem-1"}),
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
