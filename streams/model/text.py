"""Text normalization shared by hashing, validation and full-text queries."""

from __future__ import annotations

import hashlib
import re
import unicodedata

_WHITESPACE = re.compile(r"\s+")
# A word: letters and digits, joined by inner dots, underscores or apostrophes
# ("config.yaml", "don't"); what search terms and the lexical form are cut from.
WORD = re.compile(r"[^\W_]+(?:[._'][^\W_]+)*")
# Control characters other than tab, newline and carriage return mark binary or
# corrupted payloads; text with them is rejected rather than silently stripped.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "not",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)


def has_control_characters(text: str) -> bool:
    return _CONTROL.search(text) is not None


def normalize_text(text: str) -> str:
    """NFKC, trimmed, internal whitespace collapsed: the form that gets hashed."""
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def normalized_hash(text: str) -> str:
    folded = normalize_text(text).casefold()
    return hashlib.sha256(folded.encode("utf-8")).hexdigest()[:32]


def search_terms(text: str, *, limit: int = 32) -> tuple[str, ...]:
    """Distinct lowercase content words in first-seen order, for BM25 queries."""
    seen: dict[str, None] = {}
    for match in WORD.finditer(normalize_text(text).casefold()):
        word = match.group(0)
        if word not in STOPWORDS and len(word) > 1:
            seen.setdefault(word, None)
        if len(seen) >= limit:
            break
    return tuple(seen)


def gist(text: str, *, max_tokens: int = 16) -> str:
    """A 10-20 token compressed form: the text's first content-bearing tokens.

    Extractive and deterministic; stopwords go first because they carry the
    least, but the original order and casing of what remains is kept.
    """
    tokens = normalize_text(text).split(" ")
    if len(tokens) <= max_tokens:
        return " ".join(tokens)
    kept = [t for t in tokens if t.casefold().strip(".,;:!?") not in STOPWORDS]
    return " ".join(kept[:max_tokens]) + " …"
