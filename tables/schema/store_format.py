"""Which key layout a prefix was written in, claimed once per prefix.

The store's key names are part of its data: a worker reading keys another layout
wrote would see an empty store beside a full one (and write a second copy of
every agent). So the first worker on a prefix records the layout it writes
(`STORE_FORMAT`), and a worker of another refuses to start.

    {prefix}:store-format    "<format>", set once (SET NX)

Format 1 (before per-agent hash tags) recorded nothing: a prefix with no claim
but with the keys only format 1 wrote (`Keyspace.legacy_markers`) is refused,
naming the way out: replay the journal into the new layout (`grimoire replay
--wipe` in place, or `--into-prefix` beside it; the key store's names did not
change, so the journal stays readable).
"""

from __future__ import annotations

import logging

from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.exceptions import StoreFormatMismatch
from grimoire.tables.keyspace import STORE_FORMAT, Keyspace

__all__ = ["claim_store_format"]

logger = logging.getLogger(__name__)

LEGACY_FORMAT = "1"
_FORMATS = {
    "1": "keys without per-agent hash tags",
    "2": "memories indexed by their text as written",
    "3": "memories indexed by their lexical form: stems and time words",
}


async def claim_store_format(redis: object, prefix: str, mine: str = STORE_FORMAT) -> str:
    """Record `mine` as the prefix's layout unless one is recorded (or the prefix
    holds format-1 keys); raise `StoreFormatMismatch` when it is not `mine`."""
    keys = Keyspace(prefix)
    claimed_raw = await redis.get(keys.store_format)  # type: ignore[attr-defined]
    if claimed_raw is None:
        # One EXISTS per key: on a cluster the markers may live on two masters.
        legacy = [await redis.exists(key) for key in keys.legacy_markers]  # type: ignore[attr-defined]
        first = LEGACY_FORMAT if any(legacy) else mine
        # NX: workers starting together agree on whichever claim lands first.
        await redis.set(keys.store_format, first, nx=True)  # type: ignore[attr-defined]
        claimed_raw = await redis.get(keys.store_format)  # type: ignore[attr-defined]
    claimed = text_of(claimed_raw)
    if claimed != mine:
        held, wanted = _FORMATS.get(claimed, "unknown"), _FORMATS.get(mine, "unknown")
        raise StoreFormatMismatch(
            f"prefix {prefix!r} holds a store of format {claimed} ({held}), this worker "
            f"reads and writes format {mine} ({wanted}): stop the workers and "
            f"replay the journal into the new layout, in place with `grimoire replay --wipe` "
            f"or beside it with `grimoire replay --into-prefix NEW` "
            f"(docs/cluster.md: Upgrading a store)"
        )
    return claimed
