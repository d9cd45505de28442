"""The eidolon lane: a memory's vector as the agent experienced it.

eidolon = normalise((1 - w) · canonical + w · state), where `state` is the
agent's field state at that moment as one vector: the normalised mean of the
embeddings of its parts (`FieldState.digest_parts`: regime, focus keys, mood).
Two memories with the same text land apart when the agent was in different
states, and a query conditioned on the current state finds memories formed in
a similar one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]
DEFAULT_STATE_WEIGHT = 0.25

__all__ = ["DEFAULT_STATE_WEIGHT", "Vector", "eidolon_vector", "state_key", "state_vector"]


def state_key(parts: Sequence[str]) -> str:
    """What a state vector is the vector of: its parts, as a JSON array, which
    tells any two lists of parts apart whatever characters they hold (joined as
    words, `("search web",)` and `("search", "web")` would be one; keyed so,
    which vector a state got would depend on which other states shared its batch)."""
    return json.dumps(list(parts), ensure_ascii=False, separators=(",", ":"))


def state_vector(parts: Sequence[str], vectors: Mapping[str, Vector]) -> Vector | None:
    """The state's vector from its parts' embeddings (None: a state with no parts).

    A mean of the parts, not an embedding of the whole digest line: the parts
    recur across states, so a state change costs cache lookups instead of a model
    run, on the write path and on every recall; and a state that changed one key
    moves its vector by that key's share instead of to wherever the model puts a
    new sentence. Summed in float64 in the parts' order, so the same parts always
    give the same bytes.
    """
    if not parts:
        return None
    total = np.zeros(vectors[parts[0]].shape, dtype=np.float64)
    for part in parts:
        total += vectors[part].astype(np.float64)
    norm = float(np.linalg.norm(total))
    if norm == 0.0:
        return None
    return (total / norm).astype(np.float32)


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
