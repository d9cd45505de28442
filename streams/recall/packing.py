"""Diversify and pack recall results (docs/design.md §5 step 4).

MMR trades relevance against redundancy; `pack` then fits a token budget with
lazy reconstruction: every item carries id, kind, scores and gist, and only the
top few carry full text, so more memories fit than if each were sent whole.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

import numpy as np
import numpy.typing as npt

from grimoire.streams.model.records import Kind
from grimoire.streams.model.text import gist as make_gist
from grimoire.streams.model.text import normalize_text
from grimoire.streams.ports.recall import Ranked

DEFAULT_MMR_LAMBDA: Final = 0.7
DEFAULT_MAX_ITEMS: Final = 10
DEFAULT_TOKEN_BUDGET: Final = 500
DEFAULT_FULL_TEXT_ITEMS: Final = 2
# What an item costs besides its text: id, kind, scores and the JSON around
# them. A fixed charge keeps the budget arithmetic checkable by hand.
ITEM_OVERHEAD_TOKENS: Final = 8

_WORD = re.compile(r"\S+")


R = TypeVar("R", bound=Ranked)
VectorLike = Sequence[float] | npt.NDArray[np.float32]


def _unit_rows(ids: Sequence[str], vectors: Mapping[str, VectorLike]) -> npt.NDArray[np.float64]:
    dims = {len(vectors[i]) for i in ids if i in vectors}
    if len(dims) > 1:
        raise ValueError("mmr vectors must share one dimension")
    width = dims.pop() if dims else 0
    rows = np.zeros((len(ids), width), dtype=np.float64)
    for row, item_id in enumerate(ids):
        if item_id in vectors:
            rows[row] = np.asarray(vectors[item_id], dtype=np.float64)
    # Normalise defensively so similarity is a cosine even if a caller passes raw
    # vectors; a zero (or missing) vector stays zero, i.e. similar to nothing.
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    unit: npt.NDArray[np.float64] = rows / np.where(norms > 0, norms, 1.0)
    return unit


def mmr(
    items: Sequence[R],
    vectors: Mapping[str, VectorLike],
    *,
    lambda_: float = DEFAULT_MMR_LAMBDA,
    limit: int | None = None,
) -> list[R]:
    """Maximal marginal relevance: pick argmax λ·score - (1-λ)·max cos(item, picked).

    `score` is the item's rerank score used as relevance. Ties go to the smaller
    memory_id, so the selection depends only on the inputs. Items without a
    vector are treated as similar to nothing. Duplicate ids keep the first.
    """
    if not 0.0 <= lambda_ <= 1.0:
        raise ValueError("lambda_ must be in [0, 1]")
    seen: set[str] = set()
    pool: list[R] = []
    for item in items:
        if item.memory_id not in seen:
            seen.add(item.memory_id)
            pool.append(item)
    count = len(pool) if limit is None else max(0, min(limit, len(pool)))
    if count == 0:
        return []
    unit = _unit_rows([item.memory_id for item in pool], vectors)
    sims = unit @ unit.T
    max_sim = np.full(len(pool), -math.inf)
    remaining = list(range(len(pool)))
    chosen: list[int] = []
    while len(chosen) < count:
        best: tuple[float, str, int] | None = None
        for idx in remaining:
            # Nothing picked yet: the redundancy term is 0, so the first pick is
            # simply the most relevant item.
            penalty = float(max_sim[idx]) if chosen else 0.0
            value = lambda_ * pool[idx].score - (1.0 - lambda_) * penalty
            key = (-value, pool[idx].memory_id, idx)
            if best is None or key < best:
                best = key
        assert best is not None
        picked = best[2]
        chosen.append(picked)
        remaining.remove(picked)
        np.maximum(max_sim, sims[picked], out=max_sim)
    return [pool[idx] for idx in chosen]


def estimate_tokens(text: str) -> int:
    """A deterministic token estimate: max(ceil(chars / 4), words).

    Four characters per token is the usual BPE average for English; the word
    count floor covers short-word and non-Latin text where that undercounts.
    Whitespace is normalised first, so layout never costs budget.
    """
    clean = normalize_text(text)
    if not clean:
        return 0
    return max(math.ceil(len(clean) / 4), len(_WORD.findall(clean)))


@dataclass(frozen=True, slots=True)
class PackInput:
    """A ranked memory to pack; `gist` is derived from `text` when left empty."""

    memory_id: str
    kind: Kind | str
    text: str
    score: float
    gist: str = ""
    factors: tuple[tuple[str, float], ...] = ()
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PackedItem:
    memory_id: str
    kind: str
    gist: str
    score: float
    factors: tuple[tuple[str, float], ...]
    reasons: tuple[str, ...]
    text: str | None  # None: gist only; the caller fetches full text on request
    tokens: int


@dataclass(frozen=True, slots=True)
class Packed:
    items: tuple[PackedItem, ...]
    tokens_used: int


def item_cost(gist_text: str, full_text: str | None) -> int:
    """Tokens an item spends: overhead + gist, + full text when it carries it."""
    cost = ITEM_OVERHEAD_TOKENS + estimate_tokens(gist_text)
    if full_text is not None:
        cost += estimate_tokens(full_text)
    return cost


def pack(
    items: Sequence[PackInput],
    *,
    max_items: int = DEFAULT_MAX_ITEMS,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    full_text_items: int = DEFAULT_FULL_TEXT_ITEMS,
) -> Packed:
    """Take items in order until the next would exceed `token_budget`.

    The first `full_text_items` positions carry full text; if a full-text item
    does not fit it falls back to gist only (more short entries beat fewer long
    ones). Packing stops at the first item that does not fit even as a gist,
    rather than skipping it, so a lower-ranked item never displaces a higher one.
    """
    if max_items < 0 or token_budget < 0 or full_text_items < 0:
        raise ValueError("pack budgets must be non-negative")
    packed: list[PackedItem] = []
    used = 0
    for position, item in enumerate(items[:max_items]):
        short = item.gist or make_gist(item.text)
        options: list[str | None] = [None]
        if position < full_text_items:
            options.insert(0, item.text)
        fitted: PackedItem | None = None
        for full in options:
            cost = item_cost(short, full)
            if used + cost <= token_budget:
                fitted = PackedItem(
                    memory_id=item.memory_id,
                    kind=str(item.kind),
                    gist=short,
                    score=item.score,
                    factors=item.factors,
                    reasons=item.reasons,
                    text=full,
                    tokens=cost,
                )
                break
        if fitted is None:
            break
        packed.append(fitted)
        used += fitted.tokens
    return Packed(items=tuple(packed), tokens_used=used)
