"""Who a query names: the actors among a pool's memories that it asks about.

"What martial arts has John done?" is answered by what John said or did, not by
the line where someone else asked him about it. A memory records who acted
(`actor_id`: a speaker, a tool-calling agent, a user); a query that names that
actor, as a whole word, prefers that actor's memories. The match is exact on
the actor's words, never fuzzy, and reads nothing but the query and the record.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Final

__all__ = [
    "MAX_ACTOR_WORDS",
    "actor_candidates",
    "actor_name",
    "names_actor",
    "query_names",
    "without_actors",
]

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


# Actor ids longer than this many words are not looked for in a query.
MAX_ACTOR_WORDS: Final = 3
# A query's first words only: the candidates stay few for a long query.
MAX_QUERY_WORDS: Final = 64
# "Caroline's": the possessive after a name is the name's.
_POSSESSIVE: Final = frozenset({"'", "\u2019"})


def actor_name(actor_id: str) -> str:
    """An actor as a query can name it: its words, casefolded, one space apart."""
    return " ".join(_WORD.findall(actor_id.casefold()))


def actor_candidates(query: str) -> tuple[str, ...]:
    """Every run of up to `MAX_ACTOR_WORDS` consecutive query words, spelled as
    `actor_name` spells an actor: what to ask the agent's actors about."""
    words = _WORD.findall(query.casefold())[:MAX_QUERY_WORDS]
    found = {
        " ".join(words[start : start + size])
        for size in range(1, MAX_ACTOR_WORDS + 1)
        for start in range(len(words) - size + 1)
    }
    return tuple(sorted(found))


def without_actors(query: str, actors: Collection[str]) -> str:
    """The query with the named `actors` (`actor_name` spellings) left out, with a
    possessive after one; the query itself when nothing else would be left.

    A short question's embedding is dominated by a name: "What martial arts has
    John done?" lies nearer to everything John said than to his kickboxing. The
    actor match (`names_actor`) already prefers John's memories, so the vector
    lanes are asked for the rest of the question."""
    if not actors:
        return query
    tokens = list(_WORD.finditer(query))
    words = [token.group().casefold() for token in tokens]
    cut: list[tuple[int, int]] = []
    index = 0
    while index < len(tokens):
        size = next(
            (
                size
                for size in range(min(MAX_ACTOR_WORDS, len(tokens) - index), 0, -1)
                if " ".join(words[index : index + size]) in actors
            ),
            0,
        )
        if size == 0:
            index += 1
            continue
        start, end = tokens[index].start(), tokens[index + size - 1].end()
        index += size
        following = tokens[index] if index < len(tokens) else None
        if (
            following is not None
            and words[index] == "s"
            and query[end : following.start()] in _POSSESSIVE
        ):
            end = following.end()
            index += 1
        cut.append((start, end))
    if not cut:
        return query
    kept: list[str] = []
    position = 0
    for start, end in cut:
        kept.append(query[position:start])
        position = end
    kept.append(query[position:])
    remaining = " ".join("".join(kept).split())
    return remaining if _WORD.search(remaining) else query
