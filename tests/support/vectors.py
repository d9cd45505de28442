"""float32 unit vectors whose cosines a test can work out by hand."""

from __future__ import annotations

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


def random_unit(seed: int, dims: int) -> Vector:
    """A standard-normal direction drawn from ``default_rng(seed)``, L2-normalised."""
    vector = np.random.default_rng(seed).standard_normal(dims).astype(np.float32)
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def flat_unit(dims: int) -> Vector:
    """Every component 1/sqrt(dims): the same vector for every text."""
    return np.full(dims, 1 / np.sqrt(dims), dtype=np.float32)
