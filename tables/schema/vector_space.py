"""Which embedding space an index's vectors live in, claimed once per prefix.

A vector only means something next to vectors from the same model at the same
precision: a worker embedding queries with int8 weights against memories stored
as float vectors (or with other weights altogether) would still answer, just
worse, and a replay would no longer rebuild the same memory. So the first worker
on a prefix records its space, and a worker with another one refuses to start.

    {prefix}:vector-space    "<model key>:<precision>", set once (SET NX)

An index that held memories before claims existed can only have been written
in float (the int8 backend came with the claim), by a model nobody recorded:
it is claimed as `*:float32`, which any float model matches.
"""

from __future__ import annotations

import logging
from typing import Final

from redis.asyncio import Redis

from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.exceptions import VectorSpaceMismatch
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.routing import SearchRouting

logger = logging.getLogger(__name__)

ANY_MODEL: Final = "*"
LEGACY_SPACE: Final = f"{ANY_MODEL}:float32"


def space_key(prefix: str) -> str:
    return Keyspace(prefix).vector_space


def compatible(claimed: str, mine: str) -> bool:
    """Same precision, and the same model unless the claim names none."""
    claimed_model, _, claimed_precision = claimed.rpartition(":")
    my_model, _, my_precision = mine.rpartition(":")
    return claimed_precision == my_precision and claimed_model in (ANY_MODEL, my_model)


async def claim_vector_space(redis: Redis, prefix: str, mine: str, *, has_memories: bool) -> str:
    """Record `mine` as the prefix's space unless one is recorded; return the
    recorded one, or raise `VectorSpaceMismatch` when it is not `mine`'s."""
    key = space_key(prefix)
    first = LEGACY_SPACE if has_memories else mine
    # NX: workers starting together agree on whichever claim lands first.
    await redis.set(key, first, nx=True)
    claimed = text_of(await redis.get(key))
    if not compatible(claimed, mine):
        raise VectorSpaceMismatch(
            f"prefix {prefix!r} holds vectors from {claimed!r}, this worker embeds with "
            f"{mine!r}: run the backend that wrote them (GRIMOIRE_EMBED_BACKEND, "
            f"GRIMOIRE_MODEL_PATH), or replay the log into a new prefix"
        )
    if claimed != mine:
        logger.info("prefix %s: vector space %s (written before claims), embedding as %s",
                    prefix, claimed, mine)  # fmt: skip
    return claimed


async def index_holds_documents(redis: Redis, prefix: str) -> bool:
    """Whether the prefix's memory index (any master's, on a cluster) holds any."""
    routing = SearchRouting(redis, prefix)
    try:
        for master in await routing.master_indexes():
            info = await master.client.ft(master.index).info()
            if int(text_of(info.get("num_docs", 0) if isinstance(info, dict) else 0)) > 0:
                return True
        return False
    finally:
        await routing.aclose()
