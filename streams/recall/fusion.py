"""Reciprocal rank fusion of ranked lanes, with stable tie-breaks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

DEFAULT_RRF_K = 60


class FusedHit(NamedTuple):
    """One fused id. A named tuple: a recall fuses hundreds twice."""

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
    # id -> [score, lanes, ranks], summed in lane order so scores never depend
    # on the order the lanes were given in.
    found: dict[str, list[Any]] = {}
    for lane in sorted(lanes):
        weight = 1.0 if weights is None else weights.get(lane, 1.0)
        counted: set[str] = set()
        for rank, item_id in enumerate(lanes[lane], start=1):
            if item_id in counted:
                continue
            counted.add(item_id)
            entry = found.get(item_id)
            if entry is None:
                found[item_id] = [weight / (k + rank), [lane], [rank]]
            else:
                entry[0] += weight / (k + rank)
                entry[1].append(lane)
                entry[2].append(rank)
    ordered = sorted(found.items(), key=lambda item: (-item[1][0], item[0]))
    return [
        FusedHit(item_id, score, tuple(in_lanes), tuple(ranks))
        for item_id, (score, in_lanes, ranks) in ordered
    ]
