"""A successor's inheritance: new deterministic ids, provenance `predecessor`,
discounted confidence, counters reset, edges remapped, lineage kept."""

from __future__ import annotations

import pytest

from grimoire.streams.exchange.format import StateLine, hash_of, zset_of
from grimoire.streams.exchange.inherit import (
    Inheritance,
    InheritanceOptions,
    successor_memory_id,
)
from grimoire.streams.inbound.command import CommandKind, parse_command
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.inbound.validators import InputLimits

TS = 1_790_000_000_000


def _memory(memory_id: str, confidence: str, **extra: bytes) -> StateLine:
    fields = {
        b"memory_id": memory_id.encode(),
        b"agent_id": b"pred",
        b"ts": str(TS).encode(),
        b"confidence": confidence.encode(),
        b"provenance": b"self",
        b"included_count_total": b"4",
        b"validated_count": b"2",
        b"deleted": b"0",
        b"text": b"the pool was thin",
        **{k.encode(): v for k, v in extra.items()},
    }
    return StateLine("memory", memory_id, "hash", tuple(sorted(fields.items())))


def _export() -> list[StateLine]:
    return [
        _memory("m1", "0.8", aggregate_of=b"m2"),
        _memory("m2", "0.65"),
        _memory("m3", "0.9", deleted=b"1"),
        StateLine("usage", "m1", "hash", ((b"included_count_total", b"4"),)),
        StateLine("hyperedge", "run:r1", "hash", ((b"m1", b"cause"), (b"m3", b"effect"))),
        StateLine("nexus", "tool:curl", "zset", ((b"m1", float(TS)), (b"m2", float(TS)))),
        StateLine("nexus", "err:timeout", "zset", ((b"m3", float(TS)),)),
        StateLine("nodes", "", "hash", ((b"m1", b"packed"),)),
        StateLine("field_state", "", "member", b"{}"),
        StateLine("config", "", "string", b"{}"),
    ]


def test_a_successor_inherits_live_memories_at_a_discount() -> None:
    out = list(Inheritance("pred", "succ").lines(_export()))
    new = {name: successor_memory_id("succ", "pred", name, TS) for name in ("m1", "m2")}
    memories = {hash_of(line)[b"predecessor_memory_id"].decode(): line for line in out[:2]}
    assert set(memories) == {"m1", "m2"}  # the deleted m3 is not inherited
    m1 = hash_of(memories["m1"])
    assert memories["m1"].name == new["m1"] and m1[b"memory_id"] == new["m1"].encode()
    assert m1[b"agent_id"] == b"succ" and m1[b"provenance"] == b"predecessor"
    assert float(m1[b"confidence"]) == 0.8 * 0.5
    assert float(hash_of(memories["m2"])[b"confidence"]) == 0.65 * 0.5
    assert m1[b"included_count_total"] == b"0" and m1[b"validated_count"] == b"0"
    assert m1[b"predecessor_agent_id"] == b"pred" and m1[b"text"] == b"the pool was thin"
    assert m1[b"aggregate_of"] == new["m2"].encode()  # remapped, though it came later
    rest = {(line.type, line.name): line for line in out[2:]}
    assert set(rest) == {("hyperedge", "run:r1"), ("nexus", "tool:curl"), ("watermark", "")}
    assert rest["watermark", ""].value == float(TS)
    assert hash_of(rest["hyperedge", "run:r1"]) == {new["m1"].encode(): b"cause"}
    assert {m for m, _ in zset_of(rest["nexus", "tool:curl"])} == {
        new["m1"].encode(),
        new["m2"].encode(),
    }


def test_ids_are_deterministic_and_the_discount_is_an_option() -> None:
    first = list(Inheritance("pred", "succ", InheritanceOptions(0.25)).lines(_export()))
    again = list(Inheritance("pred", "succ", InheritanceOptions(0.25)).lines(_export()))
    assert first == again
    assert float(hash_of(first[0])[b"confidence"]) in (0.8 * 0.25, 0.65 * 0.25)
    with pytest.raises(ValueError):
        InheritanceOptions(0.0)
    with pytest.raises(ValueError):
        Inheritance("pred", "pred")


def test_an_import_command_is_parsed_or_dead_lettered() -> None:
    from grimoire.streams.exchange.chunks import ImportChunk, chunk_to_wire
    from grimoire.topics.schemas import CommandV1

    chunk = ImportChunk(
        "imp-x", 0, 1, "succ", "pred", tuple(Inheritance("pred", "succ").lines(_export()))
    )
    raw = CommandV1(
        agent_id="succ", command="import", import_chunk=chunk_to_wire(chunk)
    ).dumps_json()
    command = parse_command(raw, InputLimits())
    assert not isinstance(command, Rejection)
    assert command.kind is CommandKind.IMPORT and command.chunk == chunk
    other = CommandV1(agent_id="x", command="import", import_chunk=chunk_to_wire(chunk))
    rejected = parse_command(other.dumps_json(), InputLimits())
    assert isinstance(rejected, Rejection) and rejected.field == "import_chunk"
    missing = parse_command(CommandV1(agent_id="x", command="import").dumps_json(), InputLimits())
    assert isinstance(missing, Rejection) and missing.reason == "missing_field"
