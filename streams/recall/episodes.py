"""Episode expansion: a recalled memory brings its hyperedge siblings, with roles.

Siblings are gists only (lazy reconstruction) and spend the same token budget as
the items; a sibling that does not fit is left out, never an item.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

from grimoire.streams.model.text import gist as make_gist
from grimoire.streams.ports.recall import RecallSource
from grimoire.streams.recall.options import ProvenanceFilters
from grimoire.streams.recall.packing import estimate_tokens

if TYPE_CHECKING:
    from grimoire.streams.recall.flow import RecalledItem

SIBLING_OVERHEAD_TOKENS: Final = 4
# Story order inside an episode: what set it off, the situation, the act, the result.
_ROLE_ORDER: Final = {"trigger": 0, "context": 1, "action": 2, "outcome": 3}


@dataclass(frozen=True, slots=True)
class EpisodeSibling:
    memory_id: str
    edge_id: str
    role: str
    gist: str
    ts_ms: int


async def attach_episodes(
    source: RecallSource,
    items: Sequence[RecalledItem],
    tokens_used: int,
    *,
    token_budget: int,
    max_siblings: int,
    filters: ProvenanceFilters,
) -> tuple[list[RecalledItem], int]:
    edges = sorted({edge for item in items for edge in item.record.hyperedge_ids})
    if not edges or max_siblings <= 0:
        return list(items), tokens_used
    members = await source.hyperedges(edges)
    wanted = sorted({m for edge in edges for m in members.get(edge, {})})
    records = await source.records(wanted)
    shown = {item.record.memory_id for item in items}
    used = tokens_used
    out: list[RecalledItem] = []
    for item in items:
        siblings: list[EpisodeSibling] = []
        for edge in item.record.hyperedge_ids:
            for memory_id, role in members.get(edge, {}).items():
                record = records.get(memory_id)
                if memory_id in shown or record is None or not record.live:
                    continue
                if not record.admitted_by(filters):
                    continue
                text = record.gist or make_gist(record.text)
                siblings.append(EpisodeSibling(memory_id, edge, role, text, record.ts_ms))
        siblings.sort(key=lambda s: (_ROLE_ORDER.get(s.role, 9), s.ts_ms, s.memory_id))
        kept: list[EpisodeSibling] = []
        for sibling in siblings[:max_siblings]:
            cost = SIBLING_OVERHEAD_TOKENS + estimate_tokens(sibling.gist)
            if used + cost > token_budget:
                break
            used += cost
            kept.append(sibling)
        out.append(replace(item, episode=tuple(kept), tokens=item.tokens + _cost(kept)))
    return out, used


def _cost(siblings: Sequence[EpisodeSibling]) -> int:
    return sum(SIBLING_OVERHEAD_TOKENS + estimate_tokens(s.gist) for s in siblings)
