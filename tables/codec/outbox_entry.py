"""An event waiting in the publication outbox (`Keyspace.outbox`): where it goes
and its bytes, framed as `topic \\n key \\n value` (topic names and agent ids
never hold a newline; the value is kept byte for byte)."""

from __future__ import annotations

from dataclasses import dataclass

from grimoire.tables.exceptions import CorruptRecord

__all__ = ["OutboxEntry", "decode_outbox_entry", "encode_outbox_entry"]

_SEPARATOR = b"\n"


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    topic: str
    key: str
    value: bytes


def encode_outbox_entry(entry: OutboxEntry) -> bytes:
    if "\n" in entry.topic or "\n" in entry.key:
        raise ValueError("an outbox entry's topic and key hold no newline")
    return _SEPARATOR.join((entry.topic.encode(), entry.key.encode(), entry.value))


def decode_outbox_entry(raw: bytes | str) -> OutboxEntry:
    data = raw.encode() if isinstance(raw, str) else raw
    parts = data.split(_SEPARATOR, 2)
    if len(parts) != 3:
        raise CorruptRecord(f"an outbox entry needs topic, key and value, got {len(parts)} parts")
    return OutboxEntry(parts[0].decode(), parts[1].decode(), parts[2])
