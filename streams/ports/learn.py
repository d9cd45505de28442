"""What the curator needs from outside the core to learn from episodes.

Distillation turns a recurring cluster of episodes into the text of an insight;
the step is pluggable (an extractive default, or an LLM), so the curator names
it as the `Distiller` port. The cluster and polarity values stay in
`grimoire.streams.learn.curator.distill`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    # Type-only: `distill` imports this port at import time.
    from grimoire.streams.learn.curator.distill import EpisodeCluster, Polarity

__all__ = ["Distiller"]


class Distiller(Protocol):
    """Writes the text of an insight about a cluster (an LLM may implement it).

    It must be a function of its arguments: the curator calls it during replay
    too, and a different answer would re-edit the insight.
    """

    def distil(self, cluster: EpisodeCluster, polarity: Polarity) -> str: ...
