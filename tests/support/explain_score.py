"""How RediSearch itself counts a term in a memory, read from a `WITHSCORES
EXPLAINSCORE` BM25 reply: the integration tests hold the lexical forms the recall
source scores from (grimoire.tables.memory.recall_source) to the index's counts."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grimoire.tables.codec.hash_values import text_of

__all__ = ["TermMatch", "term_matches"]


# One term's line of an EXPLAINSCORE tree under a BM25 scorer, e.g.
# `cat: (0.44 = IDF 0.36 * (F 2.00 * (k1 1.2 + 1)) / (F 2.00 + k1 1.2 * (1 - b 0.5
# + b 0.5 * Doc Len 5 / Average Doc Len 3.00)))`. Only the memory's own facts
# (F: how often the term occurs, Doc Len: its token count) are read from it.
_TERM_LINE = re.compile(
    r"^(?P<label>[^:]*): \(.*?\bF (?P<tf>[0-9]+(?:\.[0-9]+)?) .*?\bDoc Len (?P<length>[0-9]+) /"
)


@dataclass(frozen=True, slots=True)
class TermMatch:
    """A memory's occurrences of one term, as the index counted them."""

    key: str
    tf: float
    length: int


def term_matches(reply: Any, term: str) -> list[TermMatch]:
    """Each document of a `WITHSCORES EXPLAINSCORE` BM25 reply to a one-term
    query, in either protocol. The tenant and lifecycle tag clauses explain
    themselves as terms too (a tag's F is always 1), so the line labelled with
    the term is read, the higher F if a tag value spells the same word."""
    if isinstance(reply, dict):  # RESP3
        rows = reply.get("results", reply.get(b"results")) or []
        pairs = [
            (row.get("id", row.get(b"id")), row.get("score", row.get(b"score"))) for row in rows
        ]
    elif isinstance(reply, list):  # RESP2: [total, key, [score, explanation], ...]
        pairs = [(reply[i], reply[i + 1]) for i in range(1, len(reply) - 1, 2)]
    else:
        raise TypeError(f"not a search reply: {type(reply).__name__}")
    found = []
    for key, scored in pairs:
        best: tuple[float, int] | None = None
        fallback: tuple[float, int] | None = None
        for line in _lines(scored[1] if isinstance(scored, list | tuple) else ()):
            match = _TERM_LINE.match(line)
            if match is None:
                continue
            seen = (float(match["tf"]), int(match["length"]))
            if match["label"] == term:
                best = seen if best is None else max(best, seen)
            else:
                fallback = seen if fallback is None else max(fallback, seen)
        chosen = best or fallback
        if chosen is not None:
            found.append(TermMatch(text_of(key), chosen[0], chosen[1]))
    return found


def _lines(tree: Any) -> Iterator[str]:
    if isinstance(tree, bytes | str):
        yield text_of(tree)
    elif isinstance(tree, list | tuple):
        for part in tree:
            yield from _lines(part)
