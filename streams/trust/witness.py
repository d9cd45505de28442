"""The witness chain: every mutation of an agent's state, summarised and hash-chained.

The apply loop is the only writer of an agent's state; for each mutation it makes
it appends one `WitnessRecord`: which journal entry caused it (partition, offset),
what kind of change it was (`op`), which memories or entries it touched (`ids`),
a digest of the fields it wrote, and the hash of the agent's previous record. The
records of one agent form a chain (`seq` 1, 2, …; the first one's `prev_hash` is
`GENESIS_HASH`), so removing, reordering or editing any record breaks every hash
after it, and `verify_chain` names the first record that does not fit.

What the chain proves, and what not: it is keyless (SHA-256, no secret), so whoever
can rewrite the whole log can rewrite it consistently. Its value comes from the
head hash also living somewhere else (each record is published on memory-events):
a verifier holding an older head, or the published records, sees any rewrite.

The canonical encoding (`canonical_bytes`) is specified here so that another
implementation can reproduce every digest: a type tag, then the value:

    None        b"n"
    bool        b"t" / b"f"
    int         b"i" + decimal + b";"
    float       b"d" + repr(float) + b";"      (shortest round-trip form)
    str         b"s" + byte length + b":" + UTF-8 bytes
    bytes       b"b" + byte length + b":" + lowercase hex
    list/tuple  b"l" + item count + b":" + each item
    mapping     b"m" + entry count + b":" + (key as str, value) pairs, keys sorted

Lengths and counts are decimal. Mapping keys must be strings and are sorted by
code point; numpy scalars read as the Python value they hold. Everything is
length-prefixed, so no two different values share an encoding (the bytes
b"\\x01" and the string "01" differ). A record's hash is SHA-256 over
`RECORD_DOMAIN` followed by the canonical bytes of the mapping of its other fields
(`record_body`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, TypedDict

import numpy as np

__all__ = [
    "GENESIS_HASH",
    "NO_OFFSET",
    "RECORD_DOMAIN",
    "BrokenReason",
    "ChainVerdict",
    "Mutation",
    "WitnessRecord",
    "canonical_bytes",
    "canonical_digest",
    "next_record",
    "record_body",
    "record_hash",
    "verify_chain",
]

GENESIS_HASH: Final = "0" * 64
# Journal coordinates of a mutation that did not come from a journal entry.
NO_OFFSET: Final = -1
# Domain separation: a record hash can never be mistaken for another digest of
# the same bytes (e.g. a `fields_digest`).
RECORD_DOMAIN: Final = b"grimoire.witness.v1\n"

# "unreadable" is the storage's verdict (bytes that are no record at all), never
# `verify_chain`'s.
BrokenReason = Literal["seq", "agent", "prev", "hash", "unreadable"]


@dataclass(frozen=True, slots=True)
class WitnessRecord:
    """One mutation of one agent's state, chained to the agent's previous one."""

    agent_id: str
    seq: int  # 1, 2, … per agent
    journal_partition: int  # NO_OFFSET when not from the journal
    journal_offset: int  # NO_OFFSET when not from the journal
    op: str  # "ingest", "outcome", "maintenance.decay", "usage", "retract", "forget", …
    ids: tuple[str, ...]  # memory / entry ids touched, sorted, distinct
    fields_digest: str  # canonical_digest of the fields written
    prev_hash: str  # the previous record's hash, GENESIS_HASH for seq 1
    hash: str  # record_hash of everything above


class Mutation(TypedDict):
    """What a mutation tells its record (`next_record`'s keywords after `agent_id`),
    passed on as one by whatever builds records for the apply loop."""

    journal_partition: int
    journal_offset: int
    op: str
    ids: Iterable[str]
    fields: Any


@dataclass(frozen=True, slots=True)
class ChainVerdict:
    """What `verify_chain` found. Records `1 .. first_broken - 1` are verified;
    `first_broken` is the seq the chain expected where it broke, and `reason`
    which check failed there: "seq" (a record missing, repeated or out of order),
    "agent" (another agent's record), "prev" (it does not follow the record
    before it), "hash" (its content does not match its hash)."""

    ok: bool
    count: int  # records read, the broken one and those after it included
    first_broken: int | None = None
    reason: BrokenReason | None = None
    head: str = GENESIS_HASH  # hash of the last verified record


def canonical_bytes(value: Any) -> bytes:
    """The canonical encoding of a value (see the module docstring); TypeError for
    anything it has no encoding for (sets, dataclasses, …: convert them first)."""
    out: list[bytes] = []
    _encode(value, out)
    return b"".join(out)


def canonical_digest(value: Any) -> str:
    """Hex SHA-256 of `canonical_bytes(value)`."""
    return hashlib.sha256(canonical_bytes(value)).hexdigest()


# Every ingest decision is digested (a record's written fields, both vectors
# included) and its record hashed: the encoder runs on the write path's event
# loop, once per journal entry. The exact built-in types take a table lookup and
# one formatted chunk each; anything else (subclasses, numpy scalars, other
# mappings and sequences) takes the general rules in `_encode_other`.
def _encode(value: Any, out: list[bytes]) -> None:
    kind = type(value)
    if kind is str:
        raw = value.encode("utf-8")
        out.append(b"s%d:%b" % (len(raw), raw))
    elif kind is dict:
        _encode_mapping(value, out)
    elif kind is int:
        out.append(b"i%d;" % value)
    elif kind is float:
        out.append(b"d%b;" % float.__repr__(value).encode())
    elif kind is bytes:
        out.append(b"b%d:%b" % (len(value), value.hex().encode()))
    elif kind is list or kind is tuple:
        out.append(b"l%d:" % len(value))
        for item in value:
            _encode(item, out)
    elif value is None:
        out.append(b"n")
    elif kind is bool:
        out.append(b"t" if value else b"f")
    else:
        _encode_other(value, out)


def _encode_mapping(value: Mapping[Any, Any], out: list[bytes]) -> None:
    keys = list(value)
    if not all(isinstance(key, str) for key in keys):
        raise TypeError("canonical encoding needs string mapping keys")
    out.append(b"m%d:" % len(keys))
    append = out.append
    for key in sorted(keys):
        name = str.encode(key if type(key) is str else str(key), "utf-8")
        item = value[key]
        kind = type(item)
        # The common leaves inline: a record's fields are mostly flat.
        if kind is str:
            raw = item.encode("utf-8")
            append(b"s%d:%bs%d:%b" % (len(name), name, len(raw), raw))
        elif kind is int:
            append(b"s%d:%bi%d;" % (len(name), name, item))
        elif kind is float:
            append(b"s%d:%bd%b;" % (len(name), name, float.__repr__(item).encode()))
        else:
            append(b"s%d:%b" % (len(name), name))
            _encode(item, out)


def _encode_other(value: Any, out: list[bytes]) -> None:
    if isinstance(value, np.generic):
        value = value.item()
    if value is None:
        out.append(b"n")
    elif isinstance(value, bool):
        out.append(b"t" if value else b"f")
    elif isinstance(value, int):
        out.append(b"i" + int.__repr__(value).encode() + b";")
    elif isinstance(value, float):
        out.append(b"d" + float.__repr__(value).encode() + b";")
    elif isinstance(value, str):
        raw = str.encode(value, "utf-8")
        out.append(b"s" + str(len(raw)).encode() + b":" + raw)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        out.append(b"b" + str(len(raw)).encode() + b":" + raw.hex().encode())
    elif isinstance(value, Mapping):
        _encode_mapping(value, out)
    elif isinstance(value, (list, tuple)):
        out.append(b"l" + str(len(value)).encode() + b":")
        for item in value:
            _encode(item, out)
    else:
        raise TypeError(f"no canonical encoding for {type(value).__name__}")


def record_body(
    *,
    agent_id: str,
    seq: int,
    journal_partition: int,
    journal_offset: int,
    op: str,
    ids: Sequence[str],
    fields_digest: str,
    prev_hash: str,
) -> dict[str, Any]:
    """Every field of a record but its hash: what the hash covers."""
    return {
        "agent_id": agent_id,
        "seq": seq,
        "journal_partition": journal_partition,
        "journal_offset": journal_offset,
        "op": op,
        "ids": list(ids),
        "fields_digest": fields_digest,
        "prev_hash": prev_hash,
    }


def record_hash(record: WitnessRecord) -> str:
    """What `record.hash` must be: SHA-256 over the domain and its other fields."""
    body = record_body(
        agent_id=record.agent_id,
        seq=record.seq,
        journal_partition=record.journal_partition,
        journal_offset=record.journal_offset,
        op=record.op,
        ids=record.ids,
        fields_digest=record.fields_digest,
        prev_hash=record.prev_hash,
    )
    return hashlib.sha256(RECORD_DOMAIN + canonical_bytes(body)).hexdigest()


def next_record(
    prev: WitnessRecord | None,
    *,
    agent_id: str,
    journal_partition: int,
    journal_offset: int,
    op: str,
    ids: Iterable[str],
    fields: Any,
) -> WitnessRecord:
    """The record after `prev` (None: the agent's first) for one mutation that
    touched `ids` and wrote `fields` (any canonically encodable value, usually a
    mapping of field name to value; vectors as bytes)."""
    if not agent_id:
        raise ValueError("a witness record needs an agent_id")
    if not op:
        raise ValueError("a witness record needs an op")
    if prev is not None and prev.agent_id != agent_id:
        raise ValueError(f"record of {agent_id!r} cannot follow one of {prev.agent_id!r}")
    draft = WitnessRecord(
        agent_id=agent_id,
        seq=1 if prev is None else prev.seq + 1,
        journal_partition=journal_partition,
        journal_offset=journal_offset,
        op=op,
        ids=tuple(sorted(set(ids))),
        fields_digest=canonical_digest(fields),
        prev_hash=GENESIS_HASH if prev is None else prev.hash,
        hash="",
    )
    return replace(draft, hash=record_hash(draft))


def verify_chain(
    records: Iterable[WitnessRecord], *, after: WitnessRecord | None = None
) -> ChainVerdict:
    """Check one agent's records in order, from seq 1 (or from the record after
    `after`, a record verified before): each has the next seq, the same agent,
    the previous record's hash as `prev_hash`, and a hash that matches its
    content. The first record that fails breaks the chain (the rest are only
    counted); an empty chain is intact."""
    prev = after
    agent = None if after is None else after.agent_id
    count = 0
    broken: tuple[int, BrokenReason] | None = None
    for record in records:
        count += 1
        if broken is not None:
            continue  # only counted: nothing after a break can be trusted
        expected = 1 if prev is None else prev.seq + 1
        if record.seq != expected:
            broken = (expected, "seq")
        elif agent is not None and record.agent_id != agent:
            broken = (expected, "agent")
        elif record.prev_hash != (GENESIS_HASH if prev is None else prev.hash):
            broken = (expected, "prev")
        elif record.hash != record_hash(record):
            broken = (expected, "hash")
        else:
            agent = record.agent_id
            prev = record
    head = GENESIS_HASH if prev is None else prev.hash
    if broken is None:
        return ChainVerdict(True, count, head=head)
    return ChainVerdict(False, count, first_broken=broken[0], reason=broken[1], head=head)
