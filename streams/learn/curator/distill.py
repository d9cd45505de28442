"""ExpeL-style distillation inputs (docs/design.md §6 "Curator"): episodes grouped into
recurring clusters, and the pluggable step that turns a cluster into text.

A cluster is "the same situation seen again": same tool, same top nexus keys,
same regime and strategy. Its signature is a digest of those parts only, so an
insight distilled from it keeps one identity across cycles and replays.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from grimoire.streams.model.ids import stable_digest
from grimoire.streams.model.nexus_keys import type_weight

logger = logging.getLogger(__name__)

# Keys that describe *this* occurrence (ids) or its result (errors), not the
# situation; tool and regime are signature parts of their own.
_NON_SITUATION_PREFIXES: Final = ("run:", "session:", "tool:", "regime:", "err:")
STRATEGY_TAG: Final = "tag:strategy/"

_SUCCESS_WORDS: Final = frozenset(
    {"success", "succeeded", "successful", "ok", "pass", "passed", "win", "won", "profit",
     "positive", "done", "completed", "filled", "confirmed"}
)  # fmt: skip
_FAILURE_WORDS: Final = frozenset(
    {"failure", "fail", "failed", "error", "errored", "loss", "lost", "negative", "timeout",
     "rejected", "reverted", "aborted", "crashed", "denied"}
)  # fmt: skip


class Polarity(StrEnum):
    """What an insight claims about its situation: it tends to work, or to fail."""

    WORKS = "works"
    FAILS = "fails"


def outcome_success(outcome: str, nexus_keys: Iterable[str] = ()) -> bool | None:
    """Success flag of an episode from its free-text outcome; None = no verdict.

    Only the first word counts ("failed: timeout", "success (2 fills)"), and an
    `err:` key means failure whatever the outcome says, since the key was
    extracted from error evidence.
    """
    if any(key.startswith("err:") for key in nexus_keys):
        return False
    words = outcome.strip().casefold().replace(":", " ").replace("(", " ").split()
    if not words:
        return None
    if words[0] in _SUCCESS_WORDS:
        return True
    if words[0] in _FAILURE_WORDS:
        return False
    return None


@dataclass(frozen=True, slots=True)
class EpisodeView:
    """What the curator needs of one stored episode."""

    memory_id: str
    text: str
    tool: str
    nexus_keys: tuple[str, ...]
    regime: str
    success: bool | None
    ts_ms: int
    tick: int | None = None


def _weight(key: str) -> float:
    try:
        return type_weight(key)
    except ValueError:  # a key written by another producer: plain weight
        return 1.0


def strategy_of(nexus_keys: Iterable[str]) -> str:
    """The strategy an episode belongs to (`tag:strategy/<name>`); "" = global."""
    names = sorted(key[len(STRATEGY_TAG) :] for key in nexus_keys if key.startswith(STRATEGY_TAG))
    return names[0] if names else ""


def situation_keys(nexus_keys: Iterable[str], top: int) -> tuple[str, ...]:
    """The `top` heaviest situation keys (type weight, then name), sorted by name."""
    keys = {
        key
        for key in nexus_keys
        if not key.startswith(_NON_SITUATION_PREFIXES) and not key.startswith(STRATEGY_TAG)
    }
    ranked = sorted(keys, key=lambda key: (-_weight(key), key))[:top]
    return tuple(sorted(ranked))


@dataclass(frozen=True, slots=True)
class Situation:
    tool: str
    keys: tuple[str, ...]
    regime: str
    strategy: str

    @property
    def signature(self) -> str:
        digest = stable_digest("situation/1", self.tool, "|".join(self.keys), self.regime)
        return stable_digest(digest.hex(), self.strategy).hex()[:24]

    def describe(self) -> str:
        parts = [f"tool {self.tool}" if self.tool else "no tool"]
        if self.keys:
            parts.append("on " + ", ".join(self.keys))
        if self.regime:
            parts.append(f"in regime {self.regime}")
        return " ".join(parts)


def situation_of(episode: EpisodeView, top_keys: int) -> Situation:
    return Situation(
        tool=episode.tool,
        keys=situation_keys(episode.nexus_keys, top_keys),
        regime=episode.regime,
        strategy=strategy_of(episode.nexus_keys),
    )


@dataclass(frozen=True, slots=True)
class EpisodeCluster:
    situation: Situation
    episodes: tuple[EpisodeView, ...]  # sorted by (ts, id)

    @property
    def signature(self) -> str:
        return self.situation.signature

    @property
    def successes(self) -> int:
        return sum(1 for ep in self.episodes if ep.success is True)

    @property
    def failures(self) -> int:
        return sum(1 for ep in self.episodes if ep.success is False)

    @property
    def majority(self) -> Polarity | None:
        """The cluster's verdict; None when it has no verdict or a tie."""
        if self.successes > self.failures:
            return Polarity.WORKS
        if self.failures > self.successes:
            return Polarity.FAILS
        return None

    @property
    def source_ids(self) -> tuple[str, ...]:
        return tuple(ep.memory_id for ep in self.episodes)


def cluster_episodes(episodes: Sequence[EpisodeView], top_keys: int) -> list[EpisodeCluster]:
    """Group episodes by situation; clusters come back ordered by signature."""
    groups: dict[Situation, list[EpisodeView]] = {}
    for episode in episodes:
        groups.setdefault(situation_of(episode, top_keys), []).append(episode)
    clusters = [
        EpisodeCluster(situation, tuple(sorted(members, key=lambda ep: (ep.ts_ms, ep.memory_id))))
        for situation, members in groups.items()
    ]
    clusters.sort(key=lambda cluster: cluster.signature)
    return clusters


def _tokens(text: str) -> set[str]:
    return {token for token in text.casefold().split() if len(token) > 2}


def representative(episodes: Sequence[EpisodeView], polarity: Polarity) -> EpisodeView | None:
    """The episode sharing most words with the others among those agreeing with
    `polarity` (ties: earliest, then id) — an extractive medoid."""
    wanted = polarity is Polarity.WORKS
    pool = [ep for ep in episodes if ep.success is wanted] or list(episodes)
    if not pool:
        return None
    token_sets = [_tokens(ep.text) for ep in pool]

    def overlap(index: int) -> int:
        mine = token_sets[index]
        return sum(len(mine & other) for j, other in enumerate(token_sets) if j != index)

    best = min(range(len(pool)), key=lambda i: (-overlap(i), pool[i].ts_ms, pool[i].memory_id))
    return pool[best]


@dataclass(frozen=True, slots=True)
class ExtractiveDistiller:
    """The zero-cost default: a fixed sentence plus the cluster's medoid episode."""

    max_example_chars: int = 240

    def distil(self, cluster: EpisodeCluster, polarity: Polarity) -> str:
        verdict = "tends to work" if polarity is Polarity.WORKS else "tends to fail"
        text = f"{cluster.situation.describe().capitalize()} {verdict}."
        example = representative(cluster.episodes, polarity)
        if example is not None and example.text.strip():
            snippet = " ".join(example.text.split())[: self.max_example_chars]
            text += f" Example: {snippet}"
        return text
