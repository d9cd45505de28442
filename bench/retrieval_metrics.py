"""Turn-level evidence retrieval scores, as LoCoMo computes them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

HEADLINE_CATEGORIES = (1, 2, 3, 4)  # 5 (adversarial) has no answer in the data


def recall_at_k(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """Fraction of the relevant ids found in the first k (ranked ids deduplicated)."""
    wanted = set(relevant)
    if not wanted:
        raise ValueError("a question needs at least one relevant id")
    top = _dedupe(ranked)[:k]
    return len(wanted.intersection(top)) / len(wanted)


def ndcg_at_k(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """Binary-relevance NDCG@k."""
    wanted = set(relevant)
    if not wanted:
        raise ValueError("a question needs at least one relevant id")
    gains = sum(
        1.0 / math.log2(rank + 2) for rank, i in enumerate(_dedupe(ranked)[:k]) if i in wanted
    )
    ideal = sum(1.0 / math.log2(rank + 2) for rank in range(min(len(wanted), k)))
    return gains / ideal


@dataclass(frozen=True, slots=True)
class Judged:
    category: int
    ranked: tuple[str, ...]
    relevant: tuple[str, ...]


def score(judged: Sequence[Judged]) -> dict[str, object]:
    """{"overall_no_adv": {...}, "by_category": {"1": {...}, ...}} (4 decimals)."""
    by_category = {
        str(c): _mean([j for j in judged if j.category == c])
        for c in sorted({j.category for j in judged})
    }
    headline = [j for j in judged if j.category in HEADLINE_CATEGORIES]
    return {"overall_no_adv": _mean(headline), "by_category": by_category}


def _mean(judged: Sequence[Judged]) -> dict[str, float]:
    if not judged:
        return {"R@5": 0.0, "R@10": 0.0, "NDCG@10": 0.0, "n": 0}
    n = len(judged)
    return {
        "R@5": round(sum(recall_at_k(j.ranked, j.relevant, 5) for j in judged) / n, 4),
        "R@10": round(sum(recall_at_k(j.ranked, j.relevant, 10) for j in judged) / n, 4),
        "NDCG@10": round(sum(ndcg_at_k(j.ranked, j.relevant, 10) for j in judged) / n, 4),
        "n": n,
    }


def _dedupe(ranked: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ranked))
