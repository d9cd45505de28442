"""The embedding cache shares a text on its way to the model between calls
(`CachingEmbedder`), with a gated fake model: no model, no timing."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import numpy as np
import pytest

from grimoire.agents.ports import Vectors
from grimoire.infra.embedding.embedder import CachingEmbedder
from tests.support.embedders import bag_of_words

T = TypeVar("T")


class GatedModel:
    """Embeds once `gate` is open; reports 1 model second per text; fails while
    `failing` is set, and the next `fail_calls` calls."""

    dims = 16
    vector_space = "gated:float32"

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.calls: list[list[str]] = []
        self.query_calls: list[list[str]] = []
        self.failing = False
        self.fail_calls = 0

    async def embed_timed(self, texts: Sequence[str]) -> tuple[Vectors, float]:
        self.calls.append(list(texts))
        fails = self.failing or self.fail_calls > 0
        self.fail_calls = max(0, self.fail_calls - 1)
        await self.gate.wait()
        if fails:
            raise RuntimeError("model down")
        return np.stack([bag_of_words(t, self.dims) for t in texts]), float(len(texts))

    async def embed(self, texts: Sequence[str]) -> Vectors:
        return (await self.embed_timed(texts))[0]

    async def embed_query(self, texts: Sequence[str]) -> Vectors:
        """The query path: never gated."""
        self.query_calls.append(list(texts))
        return np.stack([bag_of_words(t, self.dims) for t in texts])


def expected(*texts: str) -> Vectors:
    return np.stack([bag_of_words(t, GatedModel.dims) for t in texts])


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def gated() -> tuple[GatedModel, CachingEmbedder]:
    """A cache over a model whose gate is shut: its calls wait until the test opens it."""
    model = GatedModel()
    model.gate.clear()
    return model, CachingEmbedder(model)


async def started(call: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """``call`` as a task, once it has gone as far as it can."""
    task = asyncio.create_task(call)
    await settle()
    return task


async def test_two_calls_for_one_text_run_the_model_once() -> None:
    model, cache = gated()
    first = await started(cache.embed_with_usage(["shared", "own"]))
    second = await started(cache.embed_with_usage(["shared"]))
    model.gate.set()
    (one, used_one), (two, used_two) = await first, await second
    assert model.calls == [["shared", "own"]]
    np.testing.assert_array_equal(two, expected("shared"))
    np.testing.assert_array_equal(one, expected("shared", "own"))
    # The model ran the text for the first call; the second was served from it.
    assert (used_one.misses, used_two.misses, used_two.hits) == (2, 0, 1)


async def test_the_callers_error_is_its_own() -> None:
    model = GatedModel()
    model.failing = True
    cache = CachingEmbedder(model)
    with pytest.raises(RuntimeError, match="model down"):
        await cache.embed(["x"])
    model.failing = False
    np.testing.assert_array_equal(await cache.embed(["x"]), expected("x"))


async def test_cancelling_a_waiting_call_does_not_cancel_the_text_for_others() -> None:
    model, cache = gated()
    owner = await started(cache.embed(["kept"]))
    waiter = await started(cache.embed(["kept"]))
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    model.gate.set()
    np.testing.assert_array_equal(await owner, expected("kept"))
    assert model.calls == [["kept"]]


async def test_cancelling_the_sender_lets_the_waiter_embed_the_text() -> None:
    model, cache = gated()
    owner = await started(cache.embed(["orphan"]))
    waiter = await started(cache.embed_with_usage(["orphan"]))
    owner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await owner
    model.gate.set()
    vectors, usage = await waiter
    np.testing.assert_array_equal(vectors, expected("orphan"))
    assert usage.misses == 1
    assert model.calls == [["orphan"], ["orphan"]]


async def test_a_failed_sender_leaves_the_text_to_the_waiting_call() -> None:
    model, cache = gated()
    model.fail_calls = 1  # the first call's
    sender = await started(cache.embed(["fragile", "other"]))
    waiter = await started(cache.embed_with_usage(["fragile"]))
    model.gate.set()
    with pytest.raises(RuntimeError, match="model down"):
        await sender
    vectors, usage = await waiter
    np.testing.assert_array_equal(vectors, expected("fragile"))
    assert (usage.misses, usage.model_calls) == (1, 1)
    assert model.calls == [["fragile", "other"], ["fragile"]]


async def test_a_cached_vector_survives_its_eviction_while_the_call_waits() -> None:
    model = GatedModel()
    cache = CachingEmbedder(model, capacity=1)
    await cache.embed(["old"])
    model.gate.clear()
    other = await started(cache.embed(["fresh"]))
    # Hits "old", waits for "fresh"; "fresh" arriving evicts "old" meanwhile.
    mine = await started(cache.embed(["old", "fresh"]))
    model.gate.set()
    await other
    np.testing.assert_array_equal(await mine, expected("old", "fresh"))


async def test_a_query_does_not_wait_for_a_bulk_call_of_its_text() -> None:
    model, cache = gated()
    bulk = await started(cache.embed(["what failed last night"]))
    query = cache.embed_query(["what failed last night"])
    np.testing.assert_array_equal(
        await asyncio.wait_for(query, 5), expected("what failed last night")
    )
    assert model.query_calls == [["what failed last night"]]
    model.gate.set()
    np.testing.assert_array_equal(await bulk, expected("what failed last night"))
    # A bulk call now finds the text cached.
    await cache.embed(["what failed last night"])
    assert model.calls == [["what failed last night"]]
