"""An agent's runtime configuration: what a `configure` command sets, at its place
in the agent's journal, and what ingest and recall then obey.

A configuration is a value folded from the journal like any state: a partial
update is merged into the current one and validated as a whole, so a replay
reaches the same configuration at the same place, and the next event after the
command is the first one handled under it (on whichever worker applies it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Final

from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.inbound.validators import INVALID_VALUE, WRONG_TYPE
from grimoire.streams.model.records import Layer

__all__ = [
    "LANES",
    "MAX_TOP_K",
    "SHARE_POLICIES",
    "AgentConfig",
    "apply_update",
    "config_from_json",
    "config_to_json",
]

LANES: Final = ("bm25", "canonical", "eidolon", "walk", "entity")
MAX_TOP_K: Final = 200
MAX_WEIGHT: Final = 10.0
MAX_EXPLORATION: Final = 2.0
SHARE_POLICIES: Final = ("explicit", "auto")


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Defaults are what an agent gets before any `configure` command."""

    memory_enabled: bool = True  # off: neither ingest nor retrieval
    ingest_enabled: bool = True  # off: inputs are journaled and skipped, never decided
    retrieval_enabled: bool = True  # off: recalls answer with no items
    top_k: int | None = None  # a recall's item count when the request names none
    time_window_ms: int | None = None  # recall only what happened this long before `as_of`
    layers: tuple[str, ...] | None = None  # recall only these layers (None: all)
    lane_weights: tuple[tuple[str, float], ...] | None = None  # fusion weights by lane
    # Learning (docs/design.md §7): a run's outcome credits and blames its memories and moves
    # the causal graph; learned weights replace the static rerank weights once the
    # agent has learned any; causal scoring adds the causal utility factor.
    learn_from_outcomes: bool = True
    use_learned_weights: bool = True
    use_causal_scoring: bool = True
    causal_alpha: float = 0.4  # causal utility = alpha*sim + beta*causal_uplift - gamma*latency
    causal_beta: float = 0.5
    causal_gamma: float = 0.1
    # How much a memory's run record (successful vs failed runs) scales its score,
    # with learned weights on: 0.8 gives 0.2x-1.8x (one success 1.4x, one failure 0.6x).
    outcome_bias: float = 1.0
    # Optimism for rarely tried actions when recall orders a situation's evidence
    # (0: by posterior mean alone; see grimoire.streams.learn.evidence).
    exploration_bonus: float = 0.0
    # What reaches the agent's clades (docs/clades.md): "explicit", only what a
    # `publish` command names; "auto", also its warnings as they are written,
    # its insights and heuristics once promoted, its evidence as it is counted.
    share_policy: str = "explicit"

    @property
    def ingests(self) -> bool:
        return self.memory_enabled and self.ingest_enabled

    @property
    def retrieves(self) -> bool:
        return self.memory_enabled and self.retrieval_enabled

    def to_wire(self) -> dict[str, Any]:
        return {
            "memory_enabled": self.memory_enabled,
            "ingest_enabled": self.ingest_enabled,
            "retrieval_enabled": self.retrieval_enabled,
            "top_k": self.top_k,
            "time_window_ms": self.time_window_ms,
            "layers": list(self.layers) if self.layers is not None else None,
            "lane_weights": dict(self.lane_weights) if self.lane_weights is not None else None,
            "learn_from_outcomes": self.learn_from_outcomes,
            "use_learned_weights": self.use_learned_weights,
            "use_causal_scoring": self.use_causal_scoring,
            "causal_alpha": self.causal_alpha,
            "causal_beta": self.causal_beta,
            "causal_gamma": self.causal_gamma,
            "outcome_bias": self.outcome_bias,
            "exploration_bonus": self.exploration_bonus,
            "share_policy": self.share_policy,
        }


_NAMES: Final = frozenset(f.name for f in fields(AgentConfig))
_SWITCHES: Final = frozenset(
    {
        "memory_enabled",
        "ingest_enabled",
        "retrieval_enabled",
        "learn_from_outcomes",
        "use_learned_weights",
        "use_causal_scoring",
    }
)


def apply_update(config: AgentConfig, update: Mapping[str, Any]) -> AgentConfig:
    """`config` with the fields `update` names set (null resets one to its default);
    InvalidEvent (with the field) for an unknown field or a value out of range."""
    if not isinstance(update, Mapping) or not update:
        raise InvalidEvent(INVALID_VALUE, "'config' must be a non-empty object", "config")
    unknown = sorted(set(update) - _NAMES)
    if unknown:
        raise InvalidEvent(INVALID_VALUE, f"unknown setting {unknown[0]!r}", f"config.{unknown[0]}")
    changes: dict[str, Any] = {}
    defaults = AgentConfig()
    for name, value in update.items():
        changes[name] = getattr(defaults, name) if value is None else _parsed(name, value)
    return replace(config, **changes)


def _parsed(name: str, value: Any) -> Any:
    where = f"config.{name}"
    if name in _SWITCHES:
        if not isinstance(value, bool):
            raise InvalidEvent(WRONG_TYPE, f"'{name}' must be true or false", where)
        return value
    if name in ("top_k", "time_window_ms"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidEvent(WRONG_TYPE, f"'{name}' must be an integer", where)
        ceiling = MAX_TOP_K if name == "top_k" else 100 * 365 * 86_400_000
        if not 1 <= value <= ceiling:
            raise InvalidEvent(INVALID_VALUE, f"'{name}' must be 1..{ceiling}", where)
        return value
    if name in ("causal_alpha", "causal_beta", "causal_gamma", "outcome_bias", "exploration_bonus"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidEvent(WRONG_TYPE, f"'{name}' must be a number", where)
        upper = {"outcome_bias": 1.0, "exploration_bonus": MAX_EXPLORATION}.get(name, MAX_WEIGHT)
        if not 0.0 <= float(value) <= upper:
            raise InvalidEvent(INVALID_VALUE, f"'{name}' must be 0..{upper}", where)
        return float(value)
    if name == "share_policy":
        if value not in SHARE_POLICIES:
            raise InvalidEvent(
                INVALID_VALUE, f"'share_policy' must be one of {SHARE_POLICIES}", where
            )
        return value
    if name == "layers":
        if not isinstance(value, list) or not value:
            raise InvalidEvent(WRONG_TYPE, "'layers' must be a non-empty list", where)
        known = {layer.value for layer in Layer}
        for layer in value:
            if layer not in known:
                raise InvalidEvent(INVALID_VALUE, f"unknown layer {layer!r}", where)
        return tuple(sorted(set(value)))
    # lane_weights: the lanes named are set, the others keep the defaults
    if not isinstance(value, Mapping) or not value:
        raise InvalidEvent(WRONG_TYPE, "'lane_weights' must be a non-empty object", where)
    weights: dict[str, float] = {}
    for lane, weight in value.items():
        if lane not in LANES:
            raise InvalidEvent(INVALID_VALUE, f"unknown lane {lane!r}", where)
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise InvalidEvent(WRONG_TYPE, f"the weight of {lane!r} must be a number", where)
        if not 0.0 <= float(weight) <= MAX_WEIGHT:
            detail = f"the weight of {lane!r} must be 0..{MAX_WEIGHT}"
            raise InvalidEvent(INVALID_VALUE, detail, where)
        weights[lane] = float(weight)
    return tuple(sorted(weights.items()))


def config_to_json(config: AgentConfig) -> dict[str, Any]:
    """The stored form: only what differs from the defaults (an agent never
    configured stores nothing)."""
    defaults = AgentConfig().to_wire()
    return {k: v for k, v in config.to_wire().items() if v != defaults[k]}


def config_from_json(data: Mapping[str, Any]) -> AgentConfig:
    """A stored configuration (already validated when it was set)."""
    return apply_update(AgentConfig(), data) if data else AgentConfig()
