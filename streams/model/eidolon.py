"""The eidolon lane: a memory's vector as the agent experienced it.

eidolon = normalise((1 - w) · canonical + w · state), where `state` is the
embedding of the agent's field digest at that moment. Two memories with the same
text land apart when the agent was in different states, and a query conditioned
on the current state finds memories formed in a similar one.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]
DEFAULT_STATE_WEIGHT = 0.25


def eidolon_vector(
    canonical: Vector, state: Vector | None, *, state_weight: float = DEFAULT_STATE_WEIGHT
) -> Vector:
    if not 0.0 <= state_weight < 1.0:
        raise ValueError("state_weight must be in [0, 1)")
    if state is None or state_weight == 0.0:
        return np.array(canonical, dtype=np.float32, copy=True)
    blended = (1.0 - state_weight) * canonical.astype(np.float64) + state_weight * state.astype(
        np.float64
    )
    norm = float(np.linalg.norm(blended))
    if norm == 0.0:
        return np.array(canonical, dtype=np.float32, copy=True)
    return (blended / norm).astype(np.float32)
