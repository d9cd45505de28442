"""The words the lexical lane matches: a memory's stems and its time in words.

The full-text index does not read a memory's text as written. It reads this
*lexical form*, made here once per memory at write time and once per query:

* each content word stemmed with the Snowball English stemmer (PyStemmer, the
  Snowball project's own C binding), so "painted", "paints" and "painting" meet;
  numbers and identifiers are kept as written (a path's or version's dots become
  `_`, which the index does not split on);
* the memory's event time in words (month, year, weekday and part of day, in
  UTC), so "what did she do in May 2023" finds May's memories by their time.

Stemming is ours, not the index's: RediSearch's own stemmer expands a query term
to the variants one index has seen, so two indexes of the same events (a replay
into a fresh Redis) matched differently. Here the same text always gives the
same words, and the index matches them verbatim.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, cast

from grimoire.streams.model.text import STOPWORDS, WORD, normalize_text
from grimoire.streams.model.time_words import MONTHS, WEEKDAYS

__all__ = ["LexicalForm", "lexical_form", "query_terms", "time_words", "unstemmed_words"]

_ALPHA: Final = re.compile(r"[^\W\d_]+")
MAX_QUERY_TERMS: Final = 32


StemWords = Callable[[list[str]], list[str]]
_local = threading.local()


def _stem_words() -> StemWords:
    # PyStemmer's stemmers are not thread-safe: one per thread, made on first use.
    found = getattr(_local, "stem_words", None)
    if found is None:
        import Stemmer  # type: ignore[import-not-found,unused-ignore]

        found = Stemmer.Stemmer("english").stemWords
        _local.stem_words = found
    return cast(StemWords, found)


def _tokens(text: str) -> list[str]:
    """Content words as the index will hold them: casefolded, stopwords out, a
    possessive's `'s` and other apostrophes (typewriter or typographic) dropped,
    inner dots as `_`."""
    out = []
    folded = normalize_text(text).casefold().replace("\u2019", "'")
    for match in WORD.finditer(folded):
        word = match.group(0)
        if word in STOPWORDS:
            continue
        if "'" in word:
            word = word.removesuffix("'s").replace("'", "")
        word = word.replace(".", "_")
        if len(word) > 1 and word not in STOPWORDS:
            out.append(word)
    return out


def _stemmed(words: list[str]) -> list[str]:
    alphabetic = [i for i, w in enumerate(words) if _ALPHA.fullmatch(w)]
    stems = _stem_words()([words[i] for i in alphabetic])
    out = list(words)
    for i, stem in zip(alphabetic, stems, strict=True):
        out[i] = stem
    return out


def _part_of_day(hour: int) -> str:
    if 5 <= hour < 12:
        return "morning"
    if 12 <= hour < 17:
        return "afternoon"
    if 17 <= hour < 22:
        return "evening"
    return "night"


def time_words(ts_ms: int) -> tuple[str, ...]:
    """An event time in words (UTC): month, year, weekday, part of day."""
    moment = datetime.fromtimestamp(ts_ms / 1000, tz=UTC)
    return (
        MONTHS[moment.month - 1],
        str(moment.year),
        WEEKDAYS[moment.weekday()],
        _part_of_day(moment.hour),
    )


@dataclass(frozen=True, slots=True)
class LexicalForm:
    """A memory's indexed words, in order (its BM25 length is how many)."""

    words: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.words)

    @property
    def length(self) -> int:
        return len(self.words)

    def terms(self) -> tuple[str, ...]:
        """Distinct words, first-seen order: what the agent's term counts count."""
        return tuple(dict.fromkeys(self.words))

    @classmethod
    def parse(cls, stored: str) -> LexicalForm:
        return cls(tuple(stored.split()))


def lexical_form(text: str, ts_ms: int | None) -> LexicalForm:
    """The words a memory is indexed under: its text's stems, then its event time
    in words (none for a memory without one)."""
    words = _tokens(text)
    if ts_ms is not None:
        words.extend(time_words(ts_ms))
    # Time words are stemmed as the query's are ("january" and "morning" are
    # not their own stems), so "in January" meets January's memories.
    words = _stemmed(words)
    return LexicalForm(tuple(words))


def unstemmed_words(text: str) -> list[str]:
    """The form's words before stemming (what the index held before store format 3,
    less its tokeniser's differences): for measuring what stemming is worth."""
    return _tokens(text)


def query_terms(query: str, *, limit: int = MAX_QUERY_TERMS) -> tuple[str, ...]:
    """A query's distinct terms in the memories' lexical form, first-seen order."""
    return tuple(dict.fromkeys(_stemmed(_tokens(query))))[:limit]
