"""How learning's state is stored: causal edges, adjacency lists, learned weights
and what a run recalled. One codec per stored shape; values as Redis returns them
(bytes or str) are accepted."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson

from grimoire.streams.learn.causal import CausalEdge
from grimoire.streams.learn.hedge import LEARNED_FACTORS, LearnedWeights
from grimoire.streams.learn.runs import EndedRun
from grimoire.tables.codec.hash_values import text_of

__all__ = [
    "edge_field",
    "edge_from_stored",
    "edge_value",
    "ended_from_stored",
    "ended_value",
    "ids_from_stored",
    "ids_value",
    "recalls_from_stored",
    "recalls_value",
    "weights_from_stored",
    "weights_value",
]

# Unit separator: memory ids never hold it (they are validated identifiers).
SEPARATOR: Final = "\x1f"


def edge_field(cause: str, effect: str) -> str:
    return f"{cause}{SEPARATOR}{effect}"


def edge_value(edge: CausalEdge) -> str:
    return f"{edge.weight!r}|{edge.evidence}|{edge.last_block}"


def edge_from_stored(field: Any, value: Any) -> CausalEdge:
    cause, effect = text_of(field).split(SEPARATOR, 1)
    weight, evidence, last_block = text_of(value).split("|")
    return CausalEdge(cause, effect, float(weight), int(evidence), int(last_block))


def ids_value(ids: Iterable[str]) -> str:
    return SEPARATOR.join(sorted(set(ids)))


def ids_from_stored(value: Any) -> list[str]:
    text = text_of(value) if value is not None else ""
    return [part for part in text.split(SEPARATOR) if part]


def weights_value(learned: LearnedWeights) -> bytes:
    return orjson.dumps({"weights": dict(learned.weights), "updates": learned.updates})


def weights_from_stored(value: Any) -> LearnedWeights | None:
    if value is None:
        return None
    data = orjson.loads(value)
    stored = data.get("weights") or {}
    return LearnedWeights(
        tuple((name, float(stored.get(name, 0.0))) for name in LEARNED_FACTORS),
        int(data.get("updates", 0)),
    )


def ended_value(ended: EndedRun) -> bytes:
    return orjson.dumps(
        {"outcome_id": ended.outcome_id, "quality": ended.quality, "ts": ended.ts_ms,
         "block": ended.block}
    )  # fmt: skip


def ended_from_stored(run_id: str, value: Any) -> EndedRun:
    data = orjson.loads(value)
    return EndedRun(
        run_id, str(data["outcome_id"]), float(data["quality"]), int(data["ts"]),
        int(data["block"]),
    )  # fmt: skip


def recalls_value(recalls: Mapping[str, Mapping[str, float]]) -> bytes:
    return orjson.dumps(
        {memory_id: dict(sorted(factors.items())) for memory_id, factors in sorted(recalls.items())}
    )


def recalls_from_stored(value: Any) -> dict[str, dict[str, float]]:
    if value is None:
        return {}
    data = orjson.loads(value)
    return {str(m): {str(k): float(v) for k, v in f.items()} for m, f in data.items()}
