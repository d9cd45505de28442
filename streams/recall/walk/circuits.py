"""Named circuits: key-weight profiles that give walkers different habits of association.

By default the walkers cycle through all of them, so one walk follows errors and
tools, people and channels, and places and runs at once; a request naming one
circuit puts every walker on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.inbound.validators import INVALID_VALUE
from grimoire.streams.recall.walk.daimoi import Circuit

BALANCED: Final = Circuit("balanced")
CAUSAL: Final = Circuit("causal", (("err", 1.5), ("tool", 1.3), ("run", 1.2)))
SOCIAL: Final = Circuit("social", (("entity", 1.5), ("chan", 1.3), ("session", 1.3)))
SPATIAL: Final = Circuit("spatial", (("path", 1.5), ("url", 1.5), ("regime", 1.2)))

CIRCUITS: Final[Mapping[str, Circuit]] = MappingProxyType(
    {circuit.name: circuit for circuit in (BALANCED, CAUSAL, SOCIAL, SPATIAL)}
)
DEFAULT_ROTATION: Final = (BALANCED, CAUSAL, SOCIAL, SPATIAL)


def circuits_for(name: str) -> tuple[Circuit, ...]:
    """The per-walker profiles for a request: its named circuit, or the rotation."""
    if not name:
        return DEFAULT_ROTATION
    try:
        return (CIRCUITS[name],)
    except KeyError:
        known = ", ".join(sorted(CIRCUITS))
        raise InvalidEvent(
            INVALID_VALUE, f"unknown circuit {name!r} (known: {known})", "state.circuit"
        ) from None
