"""Per-agent field state: what the agent is focused on and how it feels, in event time.

The state conditions the eidolon lane (docs/design.md §4.3), carries the freshness watermark
recall computes recency against, and gives the walk its field bonus later. It is
advanced by pure functions over events, so a replay rebuilds the same state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

DEFAULT_FOCUS_HALF_LIFE_MS = 60 * 60 * 1000  # an hour of event time
DEFAULT_MAX_TRACKED_KEYS = 64
DEFAULT_DIGEST_SIZE = 8
DEFAULT_CONDITIONING_KEYS = 5
_CONDITIONING_TYPES = frozenset({"tag", "err", "tool", "chan", "entity"})


@dataclass(frozen=True, slots=True)
class Affect:
    """PAD coordinates in [-1, 1] plus named drives in [0, 1] (e.g. SEEKING, CARE)."""

    pleasure: float = 0.0
    arousal: float = 0.0
    dominance: float = 0.0
    drives: tuple[tuple[str, float], ...] = ()

    def describe(self) -> str:
        """A few words for the state digest; quantised so tiny drifts keep one text."""
        words = [
            _band(self.pleasure, "unhappy", "pleased"),
            _band(self.arousal, "calm", "excited"),
            _band(self.dominance, "submissive", "in control"),
        ]
        strongest = sorted(self.drives, key=lambda item: (-item[1], item[0]))[:2]
        words.extend(name.lower() for name, level in strongest if level >= 0.5)
        return " ".join(word for word in words if word)


def _band(value: float, low: str, high: str) -> str:
    if value <= -0.34:
        return low
    if value >= 0.34:
        return high
    return ""


@dataclass(frozen=True, slots=True)
class FieldUpdate:
    """What one event tells us about the agent's field."""

    ts_ms: int
    keys: tuple[str, ...] = ()
    tick: int | None = None
    block: int | None = None
    regime: str = ""
    affect: Affect | None = None


@dataclass(frozen=True, slots=True)
class FieldState:
    agent_id: str
    watermark_ms: int = 0
    tick: int | None = None
    block: int | None = None
    regime: str = ""
    affect: Affect = field(default_factory=Affect)
    focus: tuple[tuple[str, float], ...] = ()  # key → decayed weight, sorted by key

    def digest(self, size: int = DEFAULT_DIGEST_SIZE) -> tuple[str, ...]:
        ranked = sorted(self.focus, key=lambda item: (-item[1], item[0]))
        return tuple(key for key, _ in ranked[:size])

    def digest_parts(self, size: int = DEFAULT_CONDITIONING_KEYS) -> tuple[str, ...]:
        """The state as the texts its vector is composed of
        (`grimoire.streams.model.eidolon.state_vector`): the regime, each focus key
        on its own, the mood; empty when there is nothing to condition on.

        Only the heaviest topical keys (tags, errors, tools, channels, entities)
        condition the vector, in alphabetical order: ids, paths and small shifts
        in weight would otherwise mint a new part on nearly every event. Each part
        recurs across many states (a state changes one key at a time), so a cache
        embeds it once.
        """
        ranked = sorted(self.focus, key=lambda item: (-item[1], item[0]))
        topical = [key for key, _ in ranked if key.split(":", 1)[0] in _CONDITIONING_TYPES]
        focus = sorted(key.split(":", 1)[-1] for key in topical[:size])
        parts = [f"regime {self.regime}"] if self.regime else []
        parts.extend(dict.fromkeys(focus))  # tag:eth and entity:eth weigh once
        mood = self.affect.describe()
        if mood:
            parts.append(f"mood {mood}")
        return tuple(parts)


def _decay(weights: Mapping[str, float], elapsed_ms: int, half_life_ms: int) -> dict[str, float]:
    factor = math.pow(2.0, -elapsed_ms / half_life_ms) if elapsed_ms > 0 else 1.0
    return {key: weight * factor for key, weight in weights.items()}


def advance(
    state: FieldState,
    update: FieldUpdate,
    *,
    half_life_ms: int = DEFAULT_FOCUS_HALF_LIFE_MS,
    max_keys: int = DEFAULT_MAX_TRACKED_KEYS,
) -> FieldState:
    """Fold one event into the state.

    Focus weights decay with event time between updates; an event older than
    the watermark (late arrival) adds a correspondingly decayed weight instead
    of rewinding the clock, so the result never depends on wall-clock time.
    """
    weights = dict(state.focus)
    late_by = state.watermark_ms - update.ts_ms
    if late_by < 0:
        weights = _decay(weights, -late_by, half_life_ms)
    contribution = math.pow(2.0, -late_by / half_life_ms) if late_by > 0 else 1.0
    for key in dict.fromkeys(update.keys):
        weights[key] = weights.get(key, 0.0) + contribution
    kept = sorted(weights.items(), key=lambda item: (-item[1], item[0]))[:max_keys]
    newer = update.ts_ms >= state.watermark_ms
    return replace(
        state,
        watermark_ms=max(state.watermark_ms, update.ts_ms),
        tick=_latest(state.tick, update.tick),
        block=_latest(state.block, update.block),
        regime=update.regime if (update.regime and newer) else state.regime,
        affect=update.affect if (update.affect is not None and newer) else state.affect,
        focus=tuple(sorted((key, round(weight, 9)) for key, weight in kept)),
    )


def _latest(current: int | None, seen: int | None) -> int | None:
    if seen is None:
        return current
    return seen if current is None else max(current, seen)


def advance_all(state: FieldState, updates: Iterable[FieldUpdate], **kwargs: int) -> FieldState:
    for update in updates:
        state = advance(state, update, **kwargs)
    return state
