"""grimoire.streams.model.eidolon: the state vector composed of its parts, the blend."""

from __future__ import annotations

import numpy as np
import pytest

from grimoire.streams.model.eidolon import eidolon_vector, state_key, state_vector
from grimoire.streams.model.field_state import FieldState


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return (vector / np.linalg.norm(vector)).astype(np.float32)


VECTORS = {"regime calm": unit(1, 0, 0), "eth": unit(0, 1, 0), "swap": unit(0, 0, 1)}


def test_no_parts_no_state_vector() -> None:
    assert state_vector((), VECTORS) is None


def test_one_part_is_its_own_vector() -> None:
    np.testing.assert_array_equal(state_vector(("eth",), VECTORS), VECTORS["eth"])


def test_parts_compose_to_their_normalised_mean() -> None:
    composed = state_vector(("regime calm", "eth", "swap"), VECTORS)
    assert composed is not None and composed.dtype == np.float32
    np.testing.assert_allclose(composed, unit(1, 1, 1), rtol=1e-6)
    assert float(np.linalg.norm(composed)) == pytest.approx(1.0, abs=1e-6)


def test_the_same_parts_give_the_same_bytes() -> None:
    rng = np.random.default_rng(3)
    vectors = {f"p{i}": unit(*rng.normal(size=384)) for i in range(6)}
    parts = tuple(vectors)
    first = state_vector(parts, vectors)
    again = state_vector(parts, dict(reversed(list(vectors.items()))))
    assert first is not None and again is not None
    assert first.tobytes() == again.tobytes()


def test_opposite_parts_cancel_to_no_state() -> None:
    vectors = {"up": unit(1, 0), "down": -unit(1, 0)}
    assert state_vector(("up", "down"), vectors) is None


def test_a_state_moves_the_eidolon_by_its_weight() -> None:
    canonical = unit(1, 0, 0)
    state = state_vector(("eth",), VECTORS)
    blended = eidolon_vector(canonical, state, state_weight=0.25)
    np.testing.assert_allclose(blended, unit(0.75, 0.25, 0), rtol=1e-6)
    np.testing.assert_array_equal(eidolon_vector(canonical, None), canonical)


def test_a_state_vector_is_named_by_its_parts_unambiguously() -> None:
    one_key = FieldState("agent-1", focus=(("tool:search web", 1.0),))
    two_keys = FieldState("agent-1", focus=(("tool:search", 1.0), ("tool:web", 1.0)))
    # Joined as words the two states read the same; their keys tell them apart.
    assert " ".join(one_key.digest_parts()) == " ".join(two_keys.digest_parts())
    assert state_key(one_key.digest_parts()) != state_key(two_keys.digest_parts())
    assert state_key(("a;b", "c")) != state_key(("a", "b;c"))
    assert state_key(()) == "[]"
