"""Typed options of a recall request: what `GrimoireClient.recall` sends instead of dicts.

Each class mirrors one section the worker parses (`grimoire.streams.inbound.
recall_request`) and `to_wire()` gives exactly the JSON object it expects. Checks here
are the ones the worker makes whatever its configuration (types, signs, known kinds
and layers, `since` <= `until`, value ranges), so a typo fails at the call site instead
of as a `RecallFailed` round trip. Ceilings (e.g. `max_items` <= the worker's
`recall_max_k`) are the worker's configuration and stay its call: a request above one
is answered with `invalid_value`, never clipped.

Only the standard library and the pure core's enums are imported: the SDK installs as
`grimoire[client]` with aiokafka and orjson alone (a unit test imports this module
with numpy, Faust and Redis blocked).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

from grimoire.streams.model.records import Kind, Layer

__all__ = [
    "Kind",
    "Layer",
    "RecallAffect",
    "RecallBudgets",
    "RecallFilters",
    "RecallMode",
    "RecallState",
]

#: How much retrieval a request gets (the worker's `RetrievalMode` values; a unit test
#: keeps the two in step).
RecallMode = Literal["auto", "none", "light", "semantic", "full"]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_PAD: Final = ("pleasure", "arousal", "dominance")
_KINDS: Final = frozenset(k.value for k in Kind)
_LAYERS: Final = frozenset(la.value for la in Layer)
_FILTER_IDS: Final = ("session_id", "run_id", "actor_id", "event_type_prefix")


def _integer(name: str, value: object) -> None:
    # bool is an int to Python but not to the worker's JSON validator.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def _number(name: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be within [{low:g}, {high:g}], got {value}")
    return float(value)


def _identifier(name: str, value: object) -> None:
    """The worker reads these as identifiers: non-empty (empty would mean "no filter",
    which is what None says), no whitespace."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if not value or any(ch.isspace() for ch in value):
        raise ValueError(f"{name} must be non-empty and without whitespace, got {value!r}")


def _strings(name: str, values: object) -> tuple[str, ...]:
    # A bare string is a sequence too; taking it as its characters is never meant.
    if isinstance(values, str) or not isinstance(values, Sequence | frozenset | set):
        raise TypeError(f"{name} must be a sequence of str, got {type(values).__name__}")
    items = tuple(values)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"{name} items must be str, got {type(item).__name__}")
    return items


def _choices(name: str, values: object, allowed: frozenset[str]) -> tuple[str, ...]:
    # StrEnum members and their plain values alike, kept sorted and unique as the worker
    # keeps them: two filters that select the same memories compare equal.
    items = {str(item) for item in _strings(name, values)}
    unknown = sorted(items - allowed)
    if unknown:
        raise ValueError(f"unknown {name}: {', '.join(unknown)} (known: {sorted(allowed)})")
    return tuple(sorted(items))


def _epoch_ms(name: str, value: int | datetime) -> int:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"{name} needs a timezone: a naive datetime is ambiguous")
        # Integer arithmetic on the timedelta, as the worker does: float seconds lose a
        # millisecond after 2038.
        return (value - _EPOCH) // timedelta(milliseconds=1)
    _integer(name, value)
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallFilters:
    """Provenance filters; each one set narrows every lane and the walk alike.

    `since` / `until` bound the event time, inclusive: epoch milliseconds or an aware
    datetime (kept as epoch milliseconds). `kinds` / `layers` take `Kind` / `Layer` members
    or their string values.
    """

    since: int | datetime | None = None
    until: int | datetime | None = None
    session_id: str | None = None
    run_id: str | None = None
    actor_id: str | None = None
    event_type_prefix: str | None = None  # episode | tool | transcript, or a prefix
    kinds: Sequence[str] = ()
    layers: Sequence[str] = ()

    def __post_init__(self) -> None:
        # Frozen, so normalise through object.__setattr__: epoch ms is what the worker
        # compares, and tuples keep the value hashable whatever sequence came in.
        since = None if self.since is None else _epoch_ms("since", self.since)
        until = None if self.until is None else _epoch_ms("until", self.until)
        if since is not None and until is not None and since > until:
            raise ValueError(f"since ({since}) is after until ({until})")
        object.__setattr__(self, "since", since)
        object.__setattr__(self, "until", until)
        for name in _FILTER_IDS:
            value = getattr(self, name)
            if value is not None:
                _identifier(name, value)
        object.__setattr__(self, "kinds", _choices("kinds", self.kinds, _KINDS))
        object.__setattr__(self, "layers", _choices("layers", self.layers, _LAYERS))

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {}
        for name in ("since", "until", *_FILTER_IDS):
            value = getattr(self, name)
            if value is not None:
                wire[name] = value
        if self.kinds:
            wire["kinds"] = list(self.kinds)
        if self.layers:
            wire["layers"] = list(self.layers)
        return wire


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallBudgets:
    """Count and token budgets; None leaves the worker's configured default.

    The worker's default ceilings: lane k (`canonical_k`, `eidolon_k`, `bm25_k`) 500;
    walk `num_walkers` 64, `max_hops` 6, `max_keys_per_node` 32,
    `max_neighbors_per_key` 200, `max_total_candidates` 5,000; `max_items` and
    `full_text_items` its `recall_max_k` (100); `token_budget` 200,000.
    `max_items` is what `recall(k=...)` also sets: give one or the other (or equal).
    """

    canonical_k: int | None = None
    eidolon_k: int | None = None
    bm25_k: int | None = None
    num_walkers: int | None = None
    max_hops: int | None = None
    max_keys_per_node: int | None = None
    max_neighbors_per_key: int | None = None
    max_total_candidates: int | None = None
    max_items: int | None = None
    token_budget: int | None = None
    full_text_items: int | None = None

    def __post_init__(self) -> None:
        for name, value in self._present():
            _integer(name, value)

    def _present(self) -> list[tuple[str, int]]:
        values = ((f.name, getattr(self, f.name)) for f in fields(self))
        return [(name, value) for name, value in values if value is not None]

    def to_wire(self) -> dict[str, Any]:
        return dict(self._present())


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallAffect:
    """An affect to recall as if the agent felt it: PAD coordinates in [-1, 1] and
    named drives in [0, 1] (e.g. {"SEEKING": 0.6}). The worker replaces the agent's
    whole affect with it, so an unnamed coordinate is 0.0, not the agent's current."""

    pleasure: float = 0.0
    arousal: float = 0.0
    dominance: float = 0.0
    # A mapping or (name, level) pairs; kept as sorted pairs so the value is hashable.
    drives: Mapping[str, float] | Sequence[tuple[str, float]] = ()

    def __post_init__(self) -> None:
        for name in _PAD:
            object.__setattr__(self, name, _number(name, getattr(self, name), -1.0, 1.0))
        object.__setattr__(self, "drives", tuple(sorted(_drives(self.drives).items())))

    def to_wire(self) -> dict[str, float]:
        wire = {name: float(getattr(self, name)) for name in _PAD}
        wire.update(_drives(self.drives))
        return wire


def _drives(drives: Mapping[str, float] | Sequence[tuple[str, float]]) -> dict[str, float]:
    pairs = drives.items() if isinstance(drives, Mapping) else drives
    checked: dict[str, float] = {}
    for key, level in pairs:
        if not isinstance(key, str) or not key or key in _PAD:
            raise ValueError(f"a drive needs a non-empty str name other than PAD: {key!r}")
        checked[key] = _number(f"drive {key!r}", level, 0.0, 1.0)
    return checked


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallState:
    """The agent state to recall from in place of its current field state; whatever is
    left None comes from the field state.

    `digest`: the focus keys (an empty sequence is an empty focus, not "absent");
    `regime`: the regime label; `affect`: see `RecallAffect`; `circuit`: the walkers'
    key-weight profile by name (the worker rejects a name it does not know).
    """

    digest: Sequence[str] | None = None
    regime: str | None = None
    affect: RecallAffect | None = None
    circuit: str | None = None

    def __post_init__(self) -> None:
        if self.digest is not None:
            object.__setattr__(self, "digest", _strings("digest", self.digest))
        for name in ("regime", "circuit"):
            value = getattr(self, name)
            if value is not None:
                _identifier(name, value)
        if self.affect is not None and not isinstance(self.affect, RecallAffect):
            raise TypeError(f"affect must be a RecallAffect, got {type(self.affect).__name__}")

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {}
        if self.digest is not None:
            wire["digest"] = list(self.digest)
        if self.regime is not None:
            wire["regime"] = self.regime
        if self.affect is not None:
            wire["affect"] = self.affect.to_wire()
        if self.circuit is not None:
            wire["circuit"] = self.circuit
        return wire
