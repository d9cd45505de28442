"""The causal graph (docs/design.md §7): cause → effect edges between an agent's memories.

An edge says "when the agent did `cause`, `effect` followed", weighted by the
evidence: `weight` is the mean signal of what followed (in [-1, 1]: +1 a full
success, -1 a full failure, 1 for an explicitly asserted link), `evidence` how
many times it was seen, `last_block` the block of the last sighting. Edges come
from two places: within a run, each action → the run's outcome memories, signed
by the run's quality; and explicit `causal_link` events naming a cause and an
effect memory.

A memory's causal uplift is what its out-edges say about doing it again: their
evidence-weighted mean signal, shrunk towards 0 while evidence is thin (one
success is not a law). It feeds recall's causal utility
(`alpha*sim + beta*causal_uplift - gamma*latency`, `grimoire.streams.recall.rerank`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

__all__ = [
    "ASSERTED_SIGNAL",
    "CausalEdge",
    "Direction",
    "Reached",
    "causal_uplift",
    "edges_by_cause",
    "k_hop",
    "reinforce",
    "run_links",
]

ASSERTED_SIGNAL: Final = 1.0
# Evidence that counts as much as the prior of "no effect": uplift = mean · n / (n + 1).
UPLIFT_PRIOR_EVIDENCE: Final = 1.0


@dataclass(frozen=True, slots=True)
class CausalEdge:
    cause: str
    effect: str
    weight: float
    evidence: int
    last_block: int

    def to_wire(self) -> dict[str, object]:
        return {
            "cause": self.cause,
            "effect": self.effect,
            "weight": self.weight,
            "evidence": self.evidence,
            "last_block": self.last_block,
        }


def reinforce(
    edge: CausalEdge | None, cause: str, effect: str, signal: float, block: int
) -> CausalEdge:
    """`edge` with one more sighting of `signal` (clamped to [-1, 1]) at `block`."""
    signal = min(1.0, max(-1.0, signal))
    if edge is None:
        return CausalEdge(cause, effect, round(signal, 9), 1, block)
    evidence = edge.evidence + 1
    weight = edge.weight + (signal - edge.weight) / evidence
    return CausalEdge(cause, effect, round(weight, 9), evidence, max(block, edge.last_block))


def run_links(members: Mapping[str, str], signal: float) -> list[tuple[str, str, float]]:
    """A run's cause → effect sightings: each action → each outcome memory.

    A run without an outcome memory (or without an action) links nothing: the
    quality says how the run went, not which of its memories caused what."""
    actions = sorted(m for m, role in members.items() if role == "action")
    outcomes = sorted(m for m, role in members.items() if role == "outcome")
    return [(a, o, signal) for a in actions for o in outcomes if a != o]


def causal_uplift(out_edges: Iterable[CausalEdge]) -> float:
    """What doing the cause again is expected to bring, in (-1, 1)."""
    total = 0.0
    evidence = 0
    for edge in out_edges:
        total += edge.weight * edge.evidence
        evidence += edge.evidence
    if evidence == 0:
        return 0.0
    return round(total / (evidence + UPLIFT_PRIOR_EVIDENCE), 9)


class Direction(StrEnum):
    EFFECTS = "effects"  # follow cause → effect
    CAUSES = "causes"  # follow effect → cause
    BOTH = "both"


@dataclass(frozen=True, slots=True)
class Reached:
    memory_id: str
    hops: int
    via: CausalEdge  # the edge it was first reached by


def k_hop(
    start: str,
    hops: int,
    edges_of: Callable[[Sequence[str]], Mapping[str, Sequence[CausalEdge]]],
    *,
    direction: Direction = Direction.EFFECTS,
    limit: int = 200,
) -> list[Reached]:
    """Breadth-first from `start` up to `hops` edges away; `edges_of` returns each
    node's edges (both directions: this keeps the ones `direction` follows).
    Nodes in (hops, memory id) order; each first reached by its strongest edge
    (largest |weight|·evidence, then the smaller id). Deterministic."""
    seen = {start}
    found: list[Reached] = []
    frontier = [start]
    for depth in range(1, hops + 1):
        if not frontier or len(found) >= limit:
            break
        by_node = edges_of(frontier)
        best: dict[str, CausalEdge] = {}
        for node in frontier:
            for edge in by_node.get(node, ()):
                nxt = _other_end(edge, node, direction)
                if nxt is None or nxt in seen:
                    continue
                held = best.get(nxt)
                if held is None or _rank(edge) < _rank(held):
                    best[nxt] = edge
        frontier = sorted(best)
        for node in frontier:
            seen.add(node)
            found.append(Reached(node, depth, best[node]))
    return found[:limit]


def _rank(edge: CausalEdge) -> tuple[float, str, str]:
    """Smaller is stronger: the most evidence for the largest effect, then ids."""
    return (-abs(edge.weight) * edge.evidence, edge.cause, edge.effect)


def _other_end(edge: CausalEdge, node: str, direction: Direction) -> str | None:
    if direction in (Direction.EFFECTS, Direction.BOTH) and edge.cause == node:
        return edge.effect
    if direction in (Direction.CAUSES, Direction.BOTH) and edge.effect == node:
        return edge.cause
    return None


def edges_by_cause(edges: Iterable[CausalEdge]) -> dict[str, list[CausalEdge]]:
    grouped: dict[str, list[CausalEdge]] = {}
    for edge in edges:
        grouped.setdefault(edge.cause, []).append(edge)
    return grouped
