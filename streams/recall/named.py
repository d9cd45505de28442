"""Who a query names: the actors among a pool's memories that it asks about.

"What martial arts has John done?" is answered by what John said or did, not by
the line where someone else asked him about it. A memory records who acted
(`actor_id`: a speaker, a tool-calling agent, a user); a query that names that
actor, as a whole word, prefers that actor's memories. The match is exact on
the actor's words, never fuzzy, and reads nothing but the query and the record.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["names_actor", "query_names"]

_WORD: Final = re.compile(r"[^\W_]+")


def query_names(query: str) -> frozenset[str]:
    """The query's words, casefolded (a possessive's `'s` is its own word)."""
    return frozenset(_WORD.findall(query.casefold()))


def names_actor(named: frozenset[str], actor_id: str) -> bool:
    """Whether every word of `actor_id` is among the query's words."""
    if not actor_id or not named:
        return False
    words = _WORD.findall(actor_id.casefold())
    return bool(words) and all(word in named for word in words)
