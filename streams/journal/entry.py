"""One journal entry: an input or a command, sequenced for one agent.

The journal is the system of record: Redis is a fold of it. An entry names its
agent (the partition key), its place in the agent's sequence, what kind of input it
carries, where that input came from (topic, partition, offset: so a re-appended
input is recognised and applied once), and the input's bytes sealed with the
agent's own key (forgetting the agent destroys the key, and with it every entry's
content). The envelope is JSON so an operator can read everything but the payload.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

import orjson

from grimoire.streams.exceptions import StreamsError
from grimoire.streams.model.records import EventType

__all__ = [
    "ENVELOPE_VERSION",
    "INGEST_KINDS",
    "EntryKind",
    "InvalidEntry",
    "JournalEntry",
    "SourceRef",
    "associated_data",
    "decode_entry",
    "encode_entry",
]

ENVELOPE_VERSION: Final = 1


class InvalidEntry(StreamsError, ValueError):
    """Bytes on the journal that are not an entry this version can read."""


class EntryKind(StrEnum):
    EPISODE = "episode"
    TOOL_EVENT = "tool_event"
    TRANSCRIPT = "transcript"
    OUTCOME = "outcome"
    MAINTENANCE = "maintenance"
    COMMAND = "command"
    USAGE = "usage"  # what a recall used and which anti-rumination window it served
    FACT = "fact"  # a bi-temporal fact asserted (grimoire.fact/1)


# The kinds the write path folds in runs (one embedding batch per run).
INGEST_KINDS: Final = {
    EntryKind.EPISODE: EventType.EPISODE,
    EntryKind.TOOL_EVENT: EventType.TOOL,
    EntryKind.TRANSCRIPT: EventType.TRANSCRIPT,
}


@dataclass(frozen=True, slots=True, order=True)
class SourceRef:
    """Where an input was read from before it was journaled."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class JournalEntry:
    agent_id: str
    seq: int
    kind: EntryKind
    source: SourceRef | None
    key_id: str
    nonce: bytes
    ciphertext: bytes


def associated_data(agent_id: str, key_id: str, seq: int) -> bytes:
    """What a sealed payload is bound to: an entry cannot be moved to another agent,
    key or place in the sequence without failing to open."""
    return orjson.dumps([agent_id, key_id, seq])


def encode_entry(entry: JournalEntry) -> bytes:
    source = entry.source
    return orjson.dumps(
        {
            "v": ENVELOPE_VERSION,
            "agent_id": entry.agent_id,
            "seq": entry.seq,
            "kind": entry.kind.value,
            "source": None if source is None else [source.topic, source.partition, source.offset],
            "key_id": entry.key_id,
            "nonce": base64.b64encode(entry.nonce).decode(),
            "payload": base64.b64encode(entry.ciphertext).decode(),
        }
    )


def decode_entry(raw: bytes) -> JournalEntry:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidEntry(f"not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("v") != ENVELOPE_VERSION:
        raise InvalidEntry("not a journal entry of version 1")
    try:
        return JournalEntry(
            agent_id=_text(data, "agent_id"),
            seq=_integer(data, "seq"),
            kind=EntryKind(data["kind"]),
            source=_source(data.get("source")),
            key_id=_text(data, "key_id"),
            nonce=base64.b64decode(_text(data, "nonce"), validate=True),
            ciphertext=base64.b64decode(_text(data, "payload"), validate=True),
        )
    except (KeyError, ValueError, TypeError, binascii.Error) as exc:
        raise InvalidEntry(f"malformed entry: {exc!r}") from exc


def _text(data: dict[str, Any], name: str) -> str:
    value = data[name]
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string")
    return value


def _integer(data: dict[str, Any], name: str) -> int:
    value = data[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer")
    return value


def _source(raw: Any) -> SourceRef | None:
    if raw is None:
        return None
    topic, partition, offset = raw
    if not isinstance(topic, str) or not isinstance(partition, int) or not isinstance(offset, int):
        raise TypeError("source must be [topic, partition, offset]")
    return SourceRef(topic, partition, offset)
