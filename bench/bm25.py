"""Okapi BM25 over a small in-memory corpus: the lexical baseline of benchmarks."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from grimoire.streams.model.text import STOPWORDS

_TOKEN = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text.casefold()) if t not in STOPWORDS]


class BM25:
    def __init__(self, documents: Sequence[str], *, k1: float = 1.2, b: float = 0.75) -> None:
        self._docs = [Counter(tokenize(d)) for d in documents]
        self._lengths = [sum(d.values()) for d in self._docs]
        self._avg = (sum(self._lengths) / len(self._lengths)) if self._lengths else 0.0
        frequency: Counter[str] = Counter()
        for doc in self._docs:
            frequency.update(doc.keys())
        n = len(self._docs)
        self._idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in frequency.items()}
        self._k1, self._b = k1, b

    def scores(self, query: str) -> list[float]:
        terms = tokenize(query)
        out = []
        for doc, length in zip(self._docs, self._lengths, strict=True):
            norm = self._k1 * (1 - self._b + self._b * length / self._avg) if self._avg else 0.0
            total = 0.0
            for term in terms:
                tf = doc.get(term, 0)
                if tf:
                    total += self._idf[term] * tf * (self._k1 + 1) / (tf + norm)
            out.append(total)
        return out

    def rank(self, query: str, k: int) -> list[int]:
        """Indexes of the best k documents (ties: the earlier document)."""
        scored = self.scores(query)
        order = sorted(range(len(scored)), key=lambda i: (-scored[i], i))
        return [i for i in order[:k] if scored[i] > 0]
