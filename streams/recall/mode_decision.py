"""Whether and how much to retrieve (a deterministic, Self-RAG style decision)."""

from __future__ import annotations

from collections.abc import Sequence

from grimoire.streams.recall.options import RetrievalMode


def decide_mode(
    requested: RetrievalMode, *, search_terms: Sequence[str], has_memories: bool
) -> RetrievalMode:
    """An explicit mode is obeyed; `auto` is `full` unless the request or the
    state says that a part of the work cannot help.

    * an agent with nothing stored yet: `none` (there is nothing to find);
    * a query with no searchable term (only stopwords or symbols): `semantic`,
      as BM25 has nothing to match and the walk would start from weak seeds.
    """
    if requested is not RetrievalMode.AUTO:
        return requested
    if not has_memories:
        return RetrievalMode.NONE
    if not search_terms:
        return RetrievalMode.SEMANTIC
    return RetrievalMode.FULL


def lanes_for(mode: RetrievalMode) -> tuple[str, ...]:
    """The seed lanes a mode runs, in the order they are fused."""
    return {
        RetrievalMode.NONE: (),
        RetrievalMode.LIGHT: ("canonical", "bm25"),
        RetrievalMode.SEMANTIC: ("canonical", "eidolon"),
        RetrievalMode.FULL: ("canonical", "eidolon", "bm25"),
        RetrievalMode.AUTO: ("canonical", "eidolon", "bm25"),
    }[mode]


def walks(mode: RetrievalMode) -> bool:
    return mode in (RetrievalMode.FULL, RetrievalMode.AUTO)
