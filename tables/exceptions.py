"""Storage errors, and how to tell an outage from a bug."""

from __future__ import annotations

import asyncio

import redis.exceptions

from grimoire.streams.exceptions import GrimoireError


class StorageError(GrimoireError):
    """Root of the storage layer's errors."""


class SchemaMismatch(StorageError):
    """An index with our name exists but was created from a different schema."""


class VectorSpaceMismatch(StorageError):
    """The prefix holds vectors from another model or precision than this worker's."""


class StoreFormatMismatch(StorageError):
    """The prefix holds keys in another layout than this worker's (`STORE_FORMAT`)."""


class CorruptRecord(StorageError, ValueError):
    """Stored bytes that are not the shape their key holds."""


class FenceBroken(StorageError):
    """A transaction's fence moved before it committed: another writer changed the
    agent's state since this worker read it (a worker the group had dropped, still
    at work, or the partition's new owner). Nothing of the transaction was written;
    the retry reads the state again and finds what the other writer did."""


class StoreLost(StorageError):
    """The store no longer holds what this worker wrote (Redis came back empty: the
    index is gone). The fold must be rebuilt from the journal."""


# Server replies that mean "not now" rather than "never": retried with backoff.
_TRANSIENT_REPLIES = ("LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY")
# Replies that mean the index (so the store) is gone.
_LOST_REPLIES = ("no such index", "unknown index name", "unknown: index name")


def is_store_lost(exc: BaseException) -> bool:
    if isinstance(exc, StoreLost):
        return True
    if isinstance(exc, redis.exceptions.ResponseError):
        text = str(exc).lower()
        return any(reply in text for reply in _LOST_REPLIES)
    return False


def is_outage(exc: BaseException) -> bool:
    """Whether `exc` is the store being unavailable (retry with backoff) rather than
    a bug the same input would hit again (dead-letter it and go on)."""
    if is_store_lost(exc) or isinstance(exc, FenceBroken):
        return True
    if isinstance(
        exc,
        # A Redis Cluster resharding or failing over: the slot map is read again
        # (`grimoire.tables.transaction`) and the retry finds the slot's master.
        redis.exceptions.AskError
        | redis.exceptions.TryAgainError
        | redis.exceptions.ClusterError
        | redis.exceptions.SlotNotCoveredError
        | redis.exceptions.ConnectionError
        | redis.exceptions.TimeoutError
        | redis.exceptions.BusyLoadingError
        | ConnectionError
        | TimeoutError
        | asyncio.TimeoutError
        | OSError,
    ):
        return True
    if isinstance(exc, redis.exceptions.ResponseError):
        return str(exc).upper().startswith(_TRANSIENT_REPLIES)
    return False
