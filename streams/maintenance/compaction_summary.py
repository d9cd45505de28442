"""What a compaction summary keeps of its cluster (docs/design.md §6 Compaction): extractive
text, rolled-up tags and nexus keys, and an id derived from the sources alone.

Everything here is a pure function of the cluster, so re-planning the same
cluster after a crash gives the same summary, byte for byte, under the same id.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from grimoire.streams.model.ids import memory_id
from grimoire.streams.model.nexus_keys import (
    DEFAULT_WEIGHTS,
    KeyWeights,
    commonness_penalty,
    type_weight,
)
from grimoire.streams.model.text import gist, normalize_text
from grimoire.streams.recall.packing import estimate_tokens

logger = logging.getLogger(__name__)

# Tags every summary carries so a reader can tell it came from the janitor.
GC_TAGS = ("topic/gc", "src/system")
# Tag namespaces whose every member survives the cap: chemistry signals and error
# families are what later pressure checks and incident recall look for.
KEPT_TAG_NAMESPACES = ("ops/", "err/")


@dataclass(frozen=True, slots=True)
class SummarySource:
    """The parts of one source memory a summary is built from."""

    memory_id: str
    text: str
    ts_ms: int
    keys: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()


def summary_id(source_ids: Iterable[str], ts_ms: int) -> str:
    """A time-ordered id that depends only on the set of sources: the same cluster
    planned twice (a crash, a replay) can never produce two summaries."""
    ordered = sorted(set(source_ids))
    return memory_id("compaction", "summary:" + ",".join(ordered), 0, ts_ms)


def safe_type_weight(key: str, weights: KeyWeights) -> float:
    """Type weight of a stored key; a malformed one (older data) weighs least."""
    try:
        return type_weight(key, weights)
    except ValueError:
        return 0.5


def rolled_up_keys(
    sources: Sequence[SummarySource],
    degrees: Mapping[str, int],
    *,
    centre: str,
    limit: int,
    weights: KeyWeights = DEFAULT_WEIGHTS,
) -> tuple[str, ...]:
    """Union of the sources' keys scored by frequency x type weight x inverse
    degree, capped at `limit`; the centre key always stays so the cluster's own
    hook survives. Ties break on the key so the choice is stable."""
    counts = Counter(key for source in sources for key in set(source.keys))
    scored = sorted(
        counts,
        key=lambda k: (
            -(counts[k] * safe_type_weight(k, weights) * commonness_penalty(degrees.get(k, 0))),
            k,
        ),
    )
    kept = [centre] if centre else []
    kept += [key for key in scored if key != centre]
    return tuple(sorted(kept[: max(limit, 1)]))


def rolled_up_tags(
    sources: Sequence[SummarySource], *, limit: int, weights: KeyWeights = DEFAULT_WEIGHTS
) -> tuple[str, ...]:
    """GC tags, every ops/err tag present, then the rest by frequency x type weight."""
    counts = Counter(tag for source in sources for tag in set(source.tags))
    kept = set(GC_TAGS)
    kept.update(t for t in counts if t.startswith(KEPT_TAG_NAMESPACES))
    rest = sorted(
        (t for t in counts if t not in kept),
        key=lambda t: (-counts[t] * safe_type_weight(f"tag:{t}", weights), t),
    )
    room = max(limit - len(kept), 0)
    return tuple(sorted(kept | set(rest[:room])))


def summary_text(
    sources: Sequence[SummarySource], *, centre: str, bucket_start_ms: int, max_tokens: int
) -> str:
    """An extractive digest: a header, then one line per distinct source gist in
    event-time order, cut at `max_tokens` with a count of what was left out."""
    day = datetime.fromtimestamp(bucket_start_ms / 1000, tz=UTC).date().isoformat()
    header = f"Summary of {len(sources)} memories on {centre} from {day}:"
    lines: list[str] = []
    seen: set[str] = set()
    for source in sorted(sources, key=lambda s: (s.ts_ms, s.memory_id)):
        line = gist(source.text)
        folded = normalize_text(line).casefold()
        if folded and folded not in seen:
            seen.add(folded)
            lines.append(f"- {line}")
    used = estimate_tokens(header)
    kept: list[str] = []
    for index, line in enumerate(lines):
        cost = estimate_tokens(line)
        if kept and used + cost > max_tokens:
            kept.append(f"- … and {len(lines) - index} more")
            break
        kept.append(line)
        used += cost
    return "\n".join([header, *kept])
