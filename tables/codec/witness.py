"""The witness record (`Keyspace.witness`, one per stream entry): JSON, the same
bytes the apply loop publishes on memory-events, so an auditor can compare the
two without knowing Redis.

Decoding checks every field's type and nothing else: whether a record fits its
chain is `grimoire.streams.trust.witness.verify_chain`'s question, and a record
that was tampered with must still decode so the audit can say where the chain
breaks. Only bytes that are not a witness record at all raise `CorruptWitness`.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from grimoire.streams.trust.witness import WitnessRecord
from grimoire.tables.exceptions import StorageError

__all__ = ["WITNESS_VERSION", "CorruptWitness", "decode_witness", "encode_witness"]

WITNESS_VERSION: Final = 1

_INT_FIELDS: Final = ("seq", "journal_partition", "journal_offset")
_STR_FIELDS: Final = ("agent_id", "op", "fields_digest", "prev_hash", "hash")


class CorruptWitness(StorageError, ValueError):
    """Stored bytes that do not decode as a witness record; `seq` is where they
    are stored, when the reader knows it."""

    def __init__(self, message: str, seq: int | None = None) -> None:
        super().__init__(message)
        self.seq = seq


def encode_witness(record: WitnessRecord) -> bytes:
    return orjson.dumps(
        {
            "v": WITNESS_VERSION,
            "agent_id": record.agent_id,
            "seq": record.seq,
            "journal_partition": record.journal_partition,
            "journal_offset": record.journal_offset,
            "op": record.op,
            "ids": list(record.ids),
            "fields_digest": record.fields_digest,
            "prev_hash": record.prev_hash,
            "hash": record.hash,
        }
    )


def decode_witness(raw: bytes | str) -> WitnessRecord:
    try:
        data: Any = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CorruptWitness(f"witness record is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CorruptWitness("witness record is not a JSON object")
    if data.get("v") != WITNESS_VERSION:
        raise CorruptWitness(f"witness record version {data.get('v')!r} is not {WITNESS_VERSION}")
    for name in _INT_FIELDS:
        value = data.get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise CorruptWitness(f"witness field {name!r} is not an integer")
    for name in _STR_FIELDS:
        if not isinstance(data.get(name), str):
            raise CorruptWitness(f"witness field {name!r} is not a string")
    ids = data.get("ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise CorruptWitness("witness field 'ids' is not a list of strings")
    return WitnessRecord(
        agent_id=data["agent_id"],
        seq=data["seq"],
        journal_partition=data["journal_partition"],
        journal_offset=data["journal_offset"],
        op=data["op"],
        ids=tuple(ids),
        fields_digest=data["fields_digest"],
        prev_hash=data["prev_hash"],
        hash=data["hash"],
    )
