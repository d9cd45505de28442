"""One journal entry: an input or a command, sequenced for one agent.

The journal is the system of record: Redis is a fold of it. An entry names its
agent, its place in the agent's sequence, what kind of input it carries, where that
input came from (topic, partition, offset: so a re-appended input is recognised and
applied once), and the input's bytes sealed with the agent's own key (forgetting the
agent destroys the key, and with it every entry's content). The envelope is JSON so
an operator can read everything but the payload.

Version 2 names the agent by its journal name (`journal_name`: an HMAC of its id
under a deployment secret kept in the key store), in the envelope and as the
record's key: the key store maps the name back while the agent lives, and
forgetting it removes that mapping with its keys, so what the journal keeps of a
forgotten agent names it nowhere in clear. Version 1 (the id in clear) still reads.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

import orjson

from grimoire.streams.exceptions import StreamsError
from grimoire.streams.model.records import EventType

__all__ = [
    "ENVELOPE_VERSION",
    "INGEST_KINDS",
    "JOURNAL_NAME_PREFIX",
    "EntryKind",
    "InvalidEntry",
    "JournalEntry",
    "SourceRef",
    "associated_data",
    "decode_entry",
    "encode_entry",
    "journal_name",
]

ENVELOPE_VERSION: Final = 2
_READABLE_VERSIONS: Final = frozenset({1, 2})
# A journal name: this prefix, then 32 hex digits of HMAC-SHA256 (128 bits: names
# only have to differ between a deployment's agents).
JOURNAL_NAME_PREFIX: Final = "j:"


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
    CLADE = "clade"  # a clade share, its withdrawal or credit (grimoire.clade/1)


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
    # The agent's id; "" in an entry just decoded from version 2, until the key
    # store has said whose `journal` name it is.
    agent_id: str
    seq: int
    kind: EntryKind
    source: SourceRef | None
    key_id: str
    nonce: bytes
    ciphertext: bytes
    # How the envelope names the agent (version 1: its id).
    journal: str = ""


def journal_name(secret: bytes, agent_id: str) -> str:
    """The agent's name in the journal: not its id, and no use to anyone without the
    deployment's secret, but the same for the same id (its entries share a name)."""
    digest = hmac.new(secret, agent_id.encode(), hashlib.sha256).hexdigest()
    return f"{JOURNAL_NAME_PREFIX}{digest[:32]}"


def associated_data(agent_id: str, key_id: str, seq: int) -> bytes:
    """What a sealed payload is bound to: an entry cannot be moved to another agent,
    key or place in the sequence without failing to open."""
    return orjson.dumps([agent_id, key_id, seq])


def encode_entry(entry: JournalEntry) -> bytes:
    """Version 2: the agent by its journal name (`entry.journal`), never its id."""
    if not entry.journal.startswith(JOURNAL_NAME_PREFIX):
        raise InvalidEntry("an entry is written with its agent's journal name")
    source = entry.source
    return orjson.dumps(
        {
            "v": ENVELOPE_VERSION,
            "agent": entry.journal,
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
    if not isinstance(data, dict) or data.get("v") not in _READABLE_VERSIONS:
        raise InvalidEntry("not a journal entry of version 1 or 2")
    try:
        if data["v"] == 1:
            agent_id = journal = _text(data, "agent_id")
        else:
            agent_id, journal = "", _text(data, "agent")
            if not journal.startswith(JOURNAL_NAME_PREFIX):
                raise ValueError("agent is not a journal name")
        return JournalEntry(
            agent_id=agent_id,
            journal=journal,
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
