"""float32 unit vectors whose cosines a test can work out by hand."""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]


def unit(*components: float, dims: int = 8) -> Vector:
    """The given leading components, zero-padded to ``dims`` and L2-normalised.

    ``unit(1.0)`` and ``unit(0.0, 1.0)`` are orthogonal; ``unit(1.0, 1.0)`` is at cosine
    1/sqrt(2) from both.
    """
    padded = np.zeros(dims, dtype=np.float32)
    padded[: len(components)] = components
    return (padded / np.linalg.norm(padded)).astype(np.float32)


def axis_unit(axis: int, dims: int = 8) -> Vector:
    """1.0 on axis ``axis % dims``, 0 elsewhere: equal axes have cosine 1, others 0."""
    vector = np.zeros(dims, dtype=np.float32)
    vector[axis % dims] = 1.0
    return vector


def random_unit(seed: int, dims: int) -> Vector:
    """A standard-normal direction drawn from ``default_rng(seed)``, L2-normalised."""
    vector = np.random.default_rng(seed).standard_normal(dims).astype(np.float32)
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def flat_unit(dims: int) -> Vector:
    """Every component 1/sqrt(dims): the same vector for every text."""
    return np.full(dims, 1 / np.sqrt(dims), dtype=np.float32)


def text_unit(text: str, dims: int) -> Vector:
    """``random_unit`` seeded by the first 8 bytes of the text's SHA-256: one vector per
    text, the same in every run, unrelated to any other text's."""
    return random_unit(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"), dims)
