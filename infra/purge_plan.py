"""Which stored record batches a staging purge may delete: pure functions, no I/O.

A broker's staging topics (inputs, queries, dead letters, memory events, replies)
are purged in whole batches, from the start of each partition: what the workers'
group has committed on an input (the sequencer or a read handler has taken it),
and what is older than the retention elsewhere. Deleting a prefix of the log,
never a record in the middle, keeps every partition a contiguous log whose start
simply moved, which is what a consumer reading from the earliest offset expects.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "BATCH_HEADER_BYTES",
    "Purged",
    "StoredBatch",
    "Vacuum",
    "consumed_prefix",
    "expired_prefix",
    "forget_bound_s",
    "header_end_offset",
    "spans",
]

# A Kafka record batch (magic 2) header up to its record count: base offset (8),
# length (4), leader epoch (4), magic (1), crc (4), attributes (2), last offset
# delta (4), first and max timestamps (8 + 8), producer id (8), epoch (2), base
# sequence (4), record count (4).
BATCH_HEADER_BYTES = 61
_MAGIC_AT = 16
_LAST_DELTA_AT = 23
_MAGIC_V2 = 2


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """One record batch as its store lists it: the offset of its first record, the
    store's own name for it, when it was written (Unix seconds) and its size."""

    base_offset: int
    key: str
    written_at: float
    size: int


@dataclass(frozen=True, slots=True)
class Purged:
    """What a purge deleted: batches, the offsets they spanned, and bytes (0 where the
    store does not say)."""

    batches: int = 0
    records: int = 0
    bytes: int = 0

    def __add__(self, other: Purged) -> Purged:
        return Purged(
            self.batches + other.batches, self.records + other.records, self.bytes + other.bytes
        )

    def __bool__(self) -> bool:
        return self.batches > 0 or self.records > 0


class Vacuum(enum.Enum):
    """What a pass did to make its deletions leave the disk (`StagingStore.settle`)."""

    #: Nothing to ask: no deletions since the last vacuum, no master to ask, or a
    #: store that removes deleted bytes itself (Kafka, at its retention check).
    NONE = "none"
    #: Compacted after every deletion since the last vacuum had reached the volume
    #: servers: their bytes left the disk in this pass.
    DONE = "done"
    #: Compacted before the volume servers counted every deletion (they did not
    #: within the wait, or could not be read): those bytes may stay on the disk
    #: until the next pass, which vacuums again.
    EARLY = "early"


def consumed_prefix(
    batches: Iterable[StoredBatch], committed: int | None, last_end: int | None
) -> list[StoredBatch]:
    """The batches of one partition lying wholly below `committed` (the group's next
    offset to read), in offset order.

    A batch ends where the next one starts; the last one ends at `last_end` (one
    past its last offset, from its header), or is kept when that is unknown. A batch
    that straddles the committed offset is kept whole: some of it is not taken yet.
    """
    if committed is None or committed <= 0:
        return []
    ordered = sorted(batches, key=lambda batch: batch.base_offset)
    doomed: list[StoredBatch] = []
    for index, batch in enumerate(ordered):
        end = ordered[index + 1].base_offset if index + 1 < len(ordered) else last_end
        if end is None or end > committed:
            break
        doomed.append(batch)
    return doomed


def expired_prefix(batches: Iterable[StoredBatch], cutoff: float) -> list[StoredBatch]:
    """The batches of one partition written before `cutoff` (Unix seconds), from its
    start up to the first one that is not: a later batch written earlier (producers
    racing by milliseconds) waits for the next pass rather than leave a hole."""
    doomed: list[StoredBatch] = []
    for batch in sorted(batches, key=lambda batch: batch.base_offset):
        if batch.written_at >= cutoff:
            break
        doomed.append(batch)
    return doomed


def spans(doomed: Sequence[StoredBatch], following: int | None) -> int:
    """Offsets covered by `doomed` (a prefix of a partition's batches), up to
    `following`: the base of the first batch kept, or the end of the last deleted."""
    if not doomed or following is None:
        return 0
    return max(0, following - doomed[0].base_offset)


def header_end_offset(base_offset: int, header: bytes) -> int | None:
    """One past the last offset of the batch at `base_offset`, read from the first
    bytes of its stored form; None when they are not a v2 record batch header."""
    if len(header) < _LAST_DELTA_AT + 4 or header[_MAGIC_AT] != _MAGIC_V2:
        return None
    last_delta = int(struct.unpack_from(">i", header, _LAST_DELTA_AT)[0])
    if last_delta < 0:
        return None
    return base_offset + last_delta + 1


def forget_bound_s(retention_s: float, interval_s: float) -> float:
    """How long after it was written (an input: after it was sequenced) a record of a
    staging topic may still be read: a record just younger than the cutoff is
    deleted by the first pass after it expires, at most one interval later."""
    return retention_s + interval_s
