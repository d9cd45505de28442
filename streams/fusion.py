"""Reciprocal rank fusion of ranked lanes, with stable tie-breaks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_RRF_K = 60


@dataclass(frozen=True, slots=True)
class FusedHit:
    id: str
    score: float
    lanes: tuple[str, ...]
    ranks: tuple[int, ...]


def reciprocal_rank_fusion(
    lanes: Mapping[str, Sequence[str]],
    *,
    k: int = DEFAULT_RRF_K,
    weights: Mapping[str, float] | None = None,
) -> list[FusedHit]:
    """Fuse ranked id lists: score(id) = sum over lanes of w_lane / (k + rank).

    Ranks are 1-based. An id repeated inside one lane counts at its best rank.
    A lane missing from `weights` weighs 1. Ties sort by id so the same lanes
    always give the same order.
    """
    if k < 0:
        raise ValueError("rrf k must be non-negative")
    scores: dict[str, float] = {}
    seen_lanes: dict[str, list[str]] = {}
    seen_ranks: dict[str, list[int]] = {}
    for lane in sorted(lanes):
        weight = 1.0 if weights is None else weights.get(lane, 1.0)
        best_rank: dict[str, int] = {}
        for rank, item_id in enumerate(lanes[lane], start=1):
            best_rank.setdefault(item_id, rank)
        for item_id, rank in best_rank.items():
            scores[item_id] = scores.get(item_id, 0.0) + weight / (k + rank)
            if item_id in seen_lanes:
                seen_lanes[item_id].append(lane)
                seen_ranks[item_id].append(rank)
            else:
                seen_lanes[item_id] = [lane]
                seen_ranks[item_id] = [rank]
    fused = [
        FusedHit(item_id, score, tuple(seen_lanes[item_id]), tuple(seen_ranks[item_id]))
        for item_id, score in scores.items()
    ]
    fused.sort(key=lambda hit: (-hit.score, hit.id))
    return fused
