"""Fake ``grimoire.agents.ports.Embedder``s: deterministic, instant, no model."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from grimoire.agents.ports import Vectors
from grimoire.streams.model.text import search_terms

from .vectors import Vector, flat_unit, text_unit


def bag_of_words(text: str, dims: int) -> Vector:
    """Casefolded words hashed into ``dims`` buckets, counted, L2-normalised.

    Two texts that share s of their n and m distinct words (no bucket collisions among
    the words used) have cosine s / sqrt(n·m). An empty text gives the zero vector.
    """
    out = np.zeros(dims, dtype=np.float32)
    for word in text.casefold().split():
        out[hashlib.sha256(word.encode()).digest()[0] % dims] += 1.0
    norm = float(np.linalg.norm(out))
    return out / norm if norm else out


def search_terms_vector(text: str, dims: int) -> Vector:
    """The text's search terms (``search_terms``) hashed into ``dims`` buckets (the first 4
    bytes of each term's SHA-256), counted, L2-normalised: texts sharing terms point the
    same way. A text without terms gives the zero vector."""
    vector = np.zeros(dims, dtype=np.float32)
    for term in search_terms(text):
        vector[int.from_bytes(hashlib.sha256(term.encode()).digest()[:4], "big") % dims] += 1
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


class FakeEmbedder:
    """Hashed bag of words (``bag_of_words``), 64 dims; records every non-empty call."""

    dims = 64
    vector_space = "bag-of-words-64:float32"

    def __init__(self) -> None:
        self.calls = 0
        self.query_calls = 0
        self.texts: list[str] = []

    def vector(self, text: str) -> Vector:
        return bag_of_words(text, self.dims)

    async def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:  # like the real embedder: no model call for nothing
            return np.zeros((0, self.dims), dtype=np.float32)
        self.calls += 1
        self.texts.extend(texts)
        return np.stack([self.vector(text) for text in texts])

    async def embed_query(self, texts: Sequence[str]) -> Vectors:
        if texts:
            self.query_calls += 1
        return await self.embed(texts)


class ConstantEmbedder:
    """The same flat unit vector for every text, in a named vector space."""

    def __init__(self, vector_space: str, dims: int = 8) -> None:
        self.vector_space = vector_space
        self.dims = dims

    async def embed(self, texts: Sequence[str]) -> Vectors:
        return np.tile(flat_unit(self.dims), (len(texts), 1))

    async def embed_query(self, texts: Sequence[str]) -> Vectors:
        return await self.embed(texts)


class TextSeededEmbedder:
    """``text_unit`` of each text, ``dims`` wide, as the maintenance runners take an
    embedder: a callable to float32 bytes (the curator's) or to an array (compaction's)."""

    def __init__(self, dims: int) -> None:
        self.dims = dims

    def vector(self, text: str) -> bytes:
        return text_unit(text, self.dims).tobytes()

    async def embed_bytes(self, texts: Sequence[str]) -> list[bytes]:
        return [self.vector(text) for text in texts]

    async def embed_array(self, texts: Sequence[str]) -> Vectors:
        return np.stack([text_unit(text, self.dims) for text in texts])
