"""One embedding space per prefix (tables/schema/vector_space.py), on a real Redis."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from grimoire.agents.ports import MemorySink
from grimoire.infra.runtime import Runtime
from grimoire.infra.settings import Settings
from grimoire.tables.exceptions import VectorSpaceMismatch
from grimoire.tables.schema.vector_space import (
    LEGACY_SPACE,
    claim_vector_space,
    compatible,
    space_key,
)
from tests.support.embedders import ConstantEmbedder

FLOAT = "bert-aaaa:float32"
INT8 = "bert-aaaa:int8-matmul-channel-v1"
OTHER_MODEL = "bert-bbbb:float32"


@pytest.fixture
async def redis(settings: Settings) -> AsyncIterator[Redis]:
    client = Redis.from_url(settings.redis.url)
    yield client
    await client.aclose()


def _prefix() -> str:
    return f"vs{uuid.uuid4().hex[:8]}"


def test_a_space_matches_its_precision_and_model_or_a_legacy_claim() -> None:
    assert compatible(FLOAT, FLOAT)
    assert not compatible(FLOAT, INT8) and not compatible(INT8, FLOAT)
    assert not compatible(FLOAT, OTHER_MODEL)
    assert compatible(LEGACY_SPACE, FLOAT) and compatible(LEGACY_SPACE, OTHER_MODEL)
    assert not compatible(LEGACY_SPACE, INT8)


async def test_the_first_claim_holds_and_another_space_is_refused(redis: Redis) -> None:
    prefix = _prefix()
    assert await claim_vector_space(redis, prefix, FLOAT, has_memories=False) == FLOAT
    # later workers: the same space passes, whatever they think of the index
    assert await claim_vector_space(redis, prefix, FLOAT, has_memories=True) == FLOAT
    for other in (INT8, OTHER_MODEL):
        with pytest.raises(VectorSpaceMismatch, match="replay the log"):
            await claim_vector_space(redis, prefix, other, has_memories=True)
    assert await redis.get(space_key(prefix)) == FLOAT.encode()


async def test_an_index_written_before_claims_is_taken_as_float(redis: Redis) -> None:
    prefix = _prefix()
    assert await claim_vector_space(redis, prefix, OTHER_MODEL, has_memories=True) == LEGACY_SPACE
    assert await claim_vector_space(redis, prefix, FLOAT, has_memories=True) == LEGACY_SPACE
    with pytest.raises(VectorSpaceMismatch):
        await claim_vector_space(redis, prefix, INT8, has_memories=True)


async def test_workers_starting_together_agree_on_one_space(redis: Redis) -> None:
    prefix = _prefix()
    outcomes = await asyncio.gather(
        *(claim_vector_space(redis, prefix, space, has_memories=False) for space in (FLOAT, INT8)),
        return_exceptions=True,
    )
    refused = [o for o in outcomes if isinstance(o, VectorSpaceMismatch)]
    claimed = [o for o in outcomes if isinstance(o, str)]
    assert len(refused) == 1 and len(claimed) == 1
    assert (await redis.get(space_key(prefix))).decode() == claimed[0]


async def test_a_worker_with_another_space_does_not_start(settings: Settings) -> None:
    mine = settings.with_values(topic_prefix=_prefix())
    first = Runtime(mine, MemorySink(), ConstantEmbedder(FLOAT))
    await first.handlers()
    await first.close()
    again = Runtime(mine, MemorySink(), ConstantEmbedder(FLOAT))
    await again.handlers()
    await again.close()
    refused = Runtime(mine, MemorySink(), ConstantEmbedder(INT8))
    try:
        with pytest.raises(VectorSpaceMismatch, match=INT8):
            await refused.handlers()
    finally:
        await refused.close()
