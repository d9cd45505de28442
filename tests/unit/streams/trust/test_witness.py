"""The witness chain: the canonical encoding, record hashes, chain verification
(and the tampering it catches), the stored JSON shape, and the apply loop's
`Witness` helper and the audit over the reference log."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from dataclasses import replace
from enum import IntEnum, StrEnum
from itertools import pairwise
from types import MappingProxyType
from typing import Any

import numpy as np
import pytest

from grimoire.streams.trust.witness import (
    GENESIS_HASH,
    NO_OFFSET,
    RECORD_DOMAIN,
    ChainVerdict,
    WitnessRecord,
    canonical_bytes,
    canonical_digest,
    next_record,
    record_hash,
    verify_chain,
)
from grimoire.tables.codec.witness import CorruptWitness, decode_witness, encode_witness
from grimoire.tables.testing.witness_log import InMemoryWitnessLog
from grimoire.tables.trust.witness_store import (
    ChainConflict,
    Witness,
    audit,
    is_chain_conflict,
)
from tests.support.witness import witness_chain

A, B = "agent-a", "agent-b"


def chain(n: int, agent: str = A) -> list[WitnessRecord]:
    def record(i: int) -> dict[str, Any]:
        fields = {"confidence": 0.5 + i / 100, "text": f"event {i}", "vec": bytes([i])}
        op = "ingest" if i % 2 == 0 else "outcome"
        return {
            "journal_partition": i % 3,
            "journal_offset": 100 + i,
            "op": op,
            "ids": [f"m{i}", f"m{i + 1}"],
            "fields": fields,
        }

    return witness_chain(agent, n, record)


# ---- the canonical encoding -----------------------------------------------------


def test_the_encoding_is_the_specified_one() -> None:
    value = {"b": [1, 2.5, None, True], "a": b"\x01", "c": "é"}
    expected = b"m3:" + b"s1:a" + b"b1:01" + b"s1:b" + b"l4:i1;d2.5;nt" + b"s1:c" + b"s2:\xc3\xa9"
    assert canonical_bytes(value) == expected
    assert canonical_digest(value) == hashlib.sha256(expected).hexdigest()


def test_mapping_order_does_not_matter() -> None:
    assert canonical_digest({"x": 1, "y": [1, 2]}) == canonical_digest({"y": [1, 2], "x": 1})


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (b"\x01", "01"),  # bytes are not their hex text
        (1, 1.0),
        (1, True),
        (0, None),
        ("", None),
        ([], {}),
        (["ab"], ["a", "b"]),
        ({"a": "b"}, ["a", "b"]),
        (0.1 + 0.2, 0.3),  # floats by their exact repr
        (0.0, -0.0),
    ],
)
def test_different_values_never_share_an_encoding(one: object, other: object) -> None:
    assert canonical_bytes(one) != canonical_bytes(other)


def test_tuples_read_as_lists_and_numpy_scalars_as_python_values() -> None:
    assert canonical_bytes((1, "a")) == canonical_bytes([1, "a"])
    assert canonical_bytes(np.float64(0.25)) == canonical_bytes(0.25)
    assert canonical_bytes(np.int64(7)) == canonical_bytes(7)
    assert canonical_bytes(np.float32(0.5)) == canonical_bytes(0.5)
    assert canonical_bytes(bytearray(b"ab")) == canonical_bytes(b"ab")


def _reference_encoding(value: object) -> bytes:
    """The module docstring's rules, written out plainly: the fast encoder must
    give these bytes for every value."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None:
        return b"n"
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, int):
        return b"i" + int.__repr__(value).encode() + b";"
    if isinstance(value, float):
        return b"d" + float.__repr__(value).encode() + b";"
    if isinstance(value, str):
        raw = str.encode(value, "utf-8")
        return b"s" + str(len(raw)).encode() + b":" + raw
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        return b"b" + str(len(raw)).encode() + b":" + raw.hex().encode()
    if isinstance(value, Mapping):
        keys = sorted(value)
        body = b"".join(_reference_encoding(str(k)) + _reference_encoding(value[k]) for k in keys)
        return b"m" + str(len(keys)).encode() + b":" + body
    if isinstance(value, (list, tuple)):
        body = b"".join(_reference_encoding(item) for item in value)
        return b"l" + str(len(value)).encode() + b":" + body
    raise TypeError(type(value).__name__)


class _Colour(StrEnum):
    RED = "red"


class _Level(IntEnum):
    HIGH = 3


def _random_value(rng: random.Random, depth: int = 0) -> object:
    leaves: list[object] = [
        None, True, False, rng.randint(-(10**20), 10**20), rng.random() * 10 ** rng.randint(-8, 8),
        -0.0, float("inf"), "".join(rng.choice("aé\u00ff漢 :;") for _ in range(rng.randint(0, 6))),
        rng.randbytes(rng.randint(0, 9)), bytearray(b"xy"), np.float32(rng.random()),
        np.int64(rng.randint(-5, 5)), np.bool_(True), _Colour.RED, _Level.HIGH,
    ]  # fmt: skip
    if depth >= 3 or rng.random() < 0.5:
        return rng.choice(leaves)
    size = rng.randint(0, 4)
    shape = rng.random()
    if shape < 0.4:
        keys = ["".join(rng.choice("abcé") for _ in range(rng.randint(0, 3))) for _ in range(size)]
        keys += [_Colour.RED] if rng.random() < 0.2 else []
        return {key: _random_value(rng, depth + 1) for key in keys}
    if shape < 0.6:
        return MappingProxyType({"k": _random_value(rng, depth + 1)})
    items = [_random_value(rng, depth + 1) for _ in range(size)]
    return items if shape < 0.8 else tuple(items)


def test_the_encoder_gives_the_specified_bytes_for_any_value() -> None:
    rng = random.Random(24)
    for _ in range(3_000):
        value = _random_value(rng)
        assert canonical_bytes(value) == _reference_encoding(value), value


@pytest.mark.parametrize("value", [{1, 2}, {1: "a"}, object(), {"a": {"nested": {3}}}])
def test_what_has_no_encoding_is_refused(value: object) -> None:
    with pytest.raises(TypeError):
        canonical_bytes(value)


# ---- records ----------------------------------------------------------------------


def test_the_first_record_starts_from_genesis() -> None:
    record = next_record(
        None,
        agent_id=A,
        journal_partition=2,
        journal_offset=41,
        op="ingest",
        ids=["m2", "m1", "m2"],
        fields={"text": "hi"},
    )
    assert record.seq == 1
    assert record.prev_hash == GENESIS_HASH == "0" * 64
    assert record.ids == ("m1", "m2")  # sorted, each once
    assert record.fields_digest == canonical_digest({"text": "hi"})
    assert record.hash == record_hash(record)
    body = (
        b"m8:s8:agent_ids7:agent-a"
        + b"s13:fields_digests64:"
        + record.fields_digest.encode()
        + b"s3:idsl2:s2:m1s2:m2"
        + b"s14:journal_offseti41;"
        + b"s17:journal_partitioni2;"
        + b"s2:ops6:ingest"
        + b"s9:prev_hashs64:"
        + GENESIS_HASH.encode()
        + b"s3:seqi1;"
    )
    assert record.hash == hashlib.sha256(RECORD_DOMAIN + body).hexdigest()


def test_each_record_chains_to_the_one_before() -> None:
    records = chain(4)
    assert [r.seq for r in records] == [1, 2, 3, 4]
    for before, after in pairwise(records):
        assert after.prev_hash == before.hash
    assert len({r.hash for r in records}) == 4


def test_the_same_mutations_give_the_same_chain() -> None:
    assert chain(5) == chain(5)


def test_a_mutation_outside_the_journal_has_no_offset() -> None:
    record = next_record(
        None,
        agent_id=A,
        journal_partition=NO_OFFSET,
        journal_offset=NO_OFFSET,
        op="maintenance.decay",
        ids=(),
        fields={},
    )
    assert (record.journal_partition, record.journal_offset, record.ids) == (-1, -1, ())


def test_a_record_cannot_follow_another_agents() -> None:
    with pytest.raises(ValueError, match="cannot follow"):
        next_record(
            chain(1, B)[0],
            agent_id=A,
            journal_partition=0,
            journal_offset=0,
            op="ingest",
            ids=(),
            fields={},
        )


@pytest.mark.parametrize(("agent", "op"), [("", "ingest"), (A, "")])
def test_a_record_needs_an_agent_and_an_op(agent: str, op: str) -> None:
    with pytest.raises(ValueError):
        next_record(
            None, agent_id=agent, journal_partition=0, journal_offset=0, op=op, ids=(), fields={}
        )


# ---- verification and tampering -------------------------------------------------------


def test_an_intact_chain_verifies() -> None:
    records = chain(6)
    assert verify_chain(records) == ChainVerdict(True, 6, head=records[-1].hash)
    assert verify_chain([]) == ChainVerdict(True, 0, head=GENESIS_HASH)


def test_a_chain_verifies_from_a_record_checked_before() -> None:
    records = chain(6)
    assert verify_chain(records[3:], after=records[2]).ok
    assert verify_chain(records[4:], after=records[2]) == ChainVerdict(
        False, 2, first_broken=4, reason="seq", head=records[2].hash
    )


@pytest.mark.parametrize(
    "change",
    [
        {"op": "forget"},
        {"ids": ("m2",)},
        {"fields_digest": canonical_digest({"text": "other"})},
        {"journal_offset": 999},
        {"journal_partition": 7},
    ],
)
def test_a_changed_field_breaks_its_record(change: dict[str, object]) -> None:
    records = chain(5)
    records[2] = replace(records[2], **change)  # type: ignore[arg-type]
    verdict = verify_chain(records)
    assert (verdict.ok, verdict.first_broken, verdict.reason) == (False, 3, "hash")
    assert verdict.count == 5
    assert verdict.head == records[1].hash


def test_a_removed_record_breaks_the_chain_where_it_was() -> None:
    records = chain(5)
    del records[2]
    verdict = verify_chain(records)
    assert (verdict.ok, verdict.first_broken, verdict.reason) == (False, 3, "seq")


def test_a_removed_last_record_is_invisible_without_the_head() -> None:
    # Keyless: truncation leaves a valid chain; only a head known from elsewhere
    # (the published records) shows it.
    records = chain(5)
    verdict = verify_chain(records[:4])
    assert verdict.ok
    assert verdict.head != records[-1].hash


def test_a_reordered_pair_breaks_the_chain() -> None:
    records = chain(5)
    records[1], records[2] = records[2], records[1]
    verdict = verify_chain(records)
    assert (verdict.ok, verdict.first_broken, verdict.reason) == (False, 2, "seq")


def test_a_forged_hash_breaks_its_record() -> None:
    records = chain(5)
    records[3] = replace(records[3], hash="f" * 64)
    verdict = verify_chain(records)
    assert (verdict.ok, verdict.first_broken, verdict.reason) == (False, 4, "hash")


def test_a_rewritten_record_with_a_recomputed_hash_breaks_the_next_one() -> None:
    records = chain(5)
    forged = replace(records[2], op="forget")
    records[2] = replace(forged, hash=record_hash(forged))
    verdict = verify_chain(records)
    assert (verdict.ok, verdict.first_broken, verdict.reason) == (False, 4, "prev")


def test_a_renumbered_record_breaks_the_chain() -> None:
    records = chain(3)
    renumbered = replace(records[2], seq=4)
    verdict = verify_chain([*records[:2], replace(renumbered, hash=record_hash(renumbered))])
    assert (verdict.first_broken, verdict.reason) == (3, "seq")


def test_another_agents_record_breaks_the_chain() -> None:
    mine, theirs = chain(3), chain(3, B)
    verdict = verify_chain([*mine[:2], theirs[2]])
    assert (verdict.ok, verdict.first_broken, verdict.reason) == (False, 3, "agent")


def test_a_chain_not_starting_at_genesis_is_broken() -> None:
    verdict = verify_chain(chain(3)[1:])
    assert (verdict.first_broken, verdict.reason) == (1, "seq")
    first = replace(chain(1)[0], prev_hash="1" * 64)
    verdict = verify_chain([replace(first, hash=record_hash(first))])
    assert (verdict.first_broken, verdict.reason) == (1, "prev")


# ---- the stored shape ------------------------------------------------------------------


def test_the_codec_round_trips() -> None:
    for record in chain(3):
        assert decode_witness(encode_witness(record)) == record
        assert decode_witness(encode_witness(record).decode()) == record


def test_a_tampered_record_still_decodes() -> None:
    tampered = replace(chain(1)[0], hash="not a hash")
    assert decode_witness(encode_witness(tampered)) == tampered


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"v": 2}',
        encode_witness(chain(1)[0]).replace(b'"seq":1', b'"seq":"1"'),
        encode_witness(chain(1)[0]).replace(b'"seq":1', b'"seq":true'),
        encode_witness(chain(1)[0]).replace(b'"ids":["m0","m1"]', b'"ids":[1]'),
        encode_witness(chain(1)[0]).replace(b'"op":"ingest"', b'"op":null'),
    ],
)
def test_bytes_that_are_no_record_are_refused(raw: bytes) -> None:
    with pytest.raises(CorruptWitness):
        decode_witness(raw)


# ---- the apply loop's helper and the audit, over the reference log --------------------


async def test_witness_reads_the_head_once_and_chains_from_it() -> None:
    log = InMemoryWitnessLog()
    for record in chain(2):
        await log.append(record)
    reads = 0
    last = log.last

    async def counting_last(agent_id: str) -> WitnessRecord | None:
        nonlocal reads
        reads += 1
        return await last(agent_id)

    log.last = counting_last  # type: ignore[method-assign]
    witness = Witness(log)
    mutation = {"journal_partition": 0, "journal_offset": 5, "op": "usage", "fields": {}}
    third = await witness.append(A, ids=["m9"], **mutation)  # type: ignore[arg-type]
    fourth = await witness.append(A, ids=["m8"], **mutation)  # type: ignore[arg-type]
    assert (third.seq, fourth.seq, fourth.prev_hash) == (3, 4, third.hash)
    assert reads == 1
    assert (await audit(log, A)).ok


async def test_witness_rereads_the_head_after_a_failed_write() -> None:
    log = InMemoryWitnessLog()
    witness = Witness(log)
    await witness.append(A, journal_partition=0, journal_offset=1, op="ingest", ids=(), fields={})
    # Another writer appends behind our back: our kept head is stale.
    await log.append(
        next_record(
            await log.last(A),
            agent_id=A,
            journal_partition=0,
            journal_offset=2,
            op="ingest",
            ids=(),
            fields={},
        )
    )
    with pytest.raises(ChainConflict) as refused:
        await witness.append(A, journal_partition=0, journal_offset=3, op="x", ids=(), fields={})
    assert is_chain_conflict(refused.value)
    record = await witness.append(
        A, journal_partition=0, journal_offset=3, op="x", ids=(), fields={}
    )
    assert record.seq == 3


async def test_the_audit_pages_through_the_log() -> None:
    log = InMemoryWitnessLog()
    records = chain(7)
    for record in records:
        await log.append(record)
    assert await audit(log, A, page=3) == ChainVerdict(True, 7, head=records[-1].hash)
    assert await audit(log, B) == ChainVerdict(True, 0)


@pytest.mark.parametrize("page", [2, 1000])
async def test_the_audit_finds_tampering_in_the_log(page: int) -> None:
    log = InMemoryWitnessLog()
    records = chain(6)
    for record in records:
        await log.append(record)
    stored = [(r.seq, r) for r in records]
    log.tamper(A, [*stored[:3], (4, replace(records[3], op="forget")), *stored[4:]])
    verdict = await audit(log, A, page=page)
    assert (verdict.ok, verdict.count, verdict.first_broken, verdict.reason) == (
        False,
        6,
        4,
        "hash",
    )
    log.tamper(A, [*stored[:3], *stored[4:]])
    verdict = await audit(log, A, page=page)
    assert (verdict.ok, verdict.count, verdict.first_broken, verdict.reason) == (
        False,
        5,
        4,
        "seq",
    )
