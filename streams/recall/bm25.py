"""BM25 of one term in one memory, from the agent's own statistics.

The full-text index finds the memories that hold a term; how often each holds
it (`tf`) and how long it is (`length`) are counted from its lexical form, the
very words the index holds for it: both are facts of the memory's text alone.
How rare the term is and how long the agent's memories are on average come from
the agent's own counts, kept by the write path in the same transactions as its
memories. The index's own statistics are deployment-wide (every tenant's
memories move every other tenant's scores) and count rewritten and deleted
documents until its garbage collector purges them, so a replay into an empty
Redis, with other batch boundaries, scored the same memories differently.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["DEFAULT_BM25", "Bm25Parameters", "CorpusStats", "term_score"]


@dataclass(frozen=True, slots=True)
class Bm25Parameters:
    """Saturation (`k1`) and length normalisation (`b`), as RediSearch's BM25STD
    scored the lane before (its defaults), so rankings keep their calibration."""

    k1: float = 1.2
    b: float = 0.5

    def __post_init__(self) -> None:
        if self.k1 < 0.0:
            raise ValueError("k1 must be non-negative")
        if not 0.0 <= self.b <= 1.0:
            raise ValueError("b must be within [0, 1]")


DEFAULT_BM25 = Bm25Parameters()


@dataclass(frozen=True, slots=True)
class CorpusStats:
    """One agent's counts: memories counted, their summed indexed length, and
    how many of them hold each term asked about (absent: none counted)."""

    memories: int
    total_length: int
    holding: Mapping[str, int]

    def average_length(self) -> float | None:
        """None when the lengths were never counted (a store older than the
        count): every memory is then taken to be of average length."""
        if self.memories <= 0 or self.total_length <= 0:
            return None
        return self.total_length / self.memories

    def idf(self, term: str) -> float:
        # The counts are estimates (see tables/memory/graph.py): a term may be
        # found in more memories than were counted, never a negative weight.
        memories = max(self.memories, 1)
        held = min(max(self.holding.get(term, 0), 1), memories)
        return math.log(1.0 + (memories - held + 0.5) / (held + 0.5))


def term_score(
    tf: float,
    length: int,
    idf: float,
    average_length: float | None,
    params: Bm25Parameters = DEFAULT_BM25,
) -> float:
    """One term's BM25 contribution to one memory."""
    if tf <= 0.0:
        return 0.0
    ratio = 1.0 if average_length is None or length <= 0 else length / average_length
    norm = params.k1 * (1.0 - params.b + params.b * ratio)
    return idf * tf * (params.k1 + 1.0) / (tf + norm)
