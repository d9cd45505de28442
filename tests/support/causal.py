"""One agent's causal graph as the causal reads' tests seed it, and how it is written:
as the apply loop writes an outcome's edges (one transaction part, applied alone)."""

from __future__ import annotations

from collections.abc import Sequence

from grimoire.streams.learn.causal import CausalEdge
from grimoire.tables.learn.store import LearningWrite
from grimoire.tables.ports.learn import LearningStore

#: s → a → b → c; x → s; s → d (a failure); y → a
EDGES = (
    CausalEdge("s", "a", 0.5, 2, 4),
    CausalEdge("a", "b", 0.8, 1, 5),
    CausalEdge("b", "c", 1.0, 1, 6),
    CausalEdge("x", "s", 1.0, 1, 2),
    CausalEdge("s", "d", -1.0, 3, 7),
    CausalEdge("y", "a", 0.25, 1, 3),
)


async def write_edges(store: LearningStore, agent: str, edges: Sequence[CausalEdge]) -> None:
    """``edges`` written for ``agent`` as an outcome's are: one part, applied alone."""
    await (await store.outcome_part(LearningWrite(agent, edges=tuple(edges)))).apply_alone()
