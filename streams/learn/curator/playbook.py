"""PLAYBOOK.md: an agent's promoted heuristics as a markdown document (docs/design.md §6),
and, when it is read, its evidence: which action works best in each situation.

The document is a pure function of the entries: no timestamps, sections and
lines in a fixed order, so regenerating it after a replay yields the same bytes
and an unchanged playbook is recognisable by equality.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from grimoire.streams.learn.curator.values import CuratedEntry, EntryStatus
from grimoire.streams.learn.evidence import EvidencePolicy, posterior_mean
from grimoire.streams.model.records import Kind

logger = logging.getLogger(__name__)

EMPTY_SECTION: Final = "_No heuristics yet._"


def in_playbook(entry: CuratedEntry) -> bool:
    return entry.kind is Kind.HEURISTIC and entry.status is EntryStatus.PLAYBOOK


def _line(entry: CuratedEntry) -> str:
    text = " ".join(entry.text.split())  # one entry, one line, whatever the text held
    return f"- {text} _(confidence {entry.confidence:.2f}; id {entry.memory_id})_"


def render_playbook(agent_id: str, entries: Iterable[CuratedEntry]) -> str:
    """`# PLAYBOOK — agent`, then `## Global`, then `## Strategy: name` sorted by
    name; inside a section by confidence (highest first), then id.

    Entries that are not playbook heuristics are ignored, so callers may pass
    everything the curator holds. `confidence` is shown as given: pass entries
    with their decayed confidence to show what the curator decided on.
    """
    sections: dict[str, list[CuratedEntry]] = {"": []}
    for entry in entries:
        if in_playbook(entry):
            sections.setdefault(entry.strategy, []).append(entry)
    lines = [f"# PLAYBOOK — {agent_id}", ""]
    for strategy in sorted(sections):
        lines.append(f"## Strategy: {strategy}" if strategy else "## Global")
        lines.append("")
        members = sorted(sections[strategy], key=lambda e: (-e.confidence, e.memory_id))
        lines.extend(_line(entry) for entry in members)
        if not members:
            lines.append(EMPTY_SECTION)
        lines.append("")
    return "\n".join(lines)


EVIDENCE_HEADING: Final = "## Evidence: what works where"


@dataclass(frozen=True, slots=True)
class EvidenceRow:
    """One evidence entry as the playbook shows it: its situation's keys, its
    action, its counts, and whether a clade sibling's (weighed by `weight`)."""

    situation: tuple[str, ...]
    action: str
    successes: int
    failures: int
    shared: bool = False
    weight: float = 1.0


def _label(situation: Sequence[str]) -> str:
    shown = [k.split(":", 1)[1] if k.startswith(("tag:", "regime:")) else k for k in situation]
    return ", ".join(shown) or "an unnamed situation"


def render_evidence(rows: Iterable[EvidenceRow], policy: EvidencePolicy) -> str:
    """The section listing, per situation (sorted), its actions best first by the
    posterior mean of their pooled counts (the agent's own plus its clade's,
    weighed), each with its evidence: `- prune-wal: 7 of 8 runs (0.80)`."""
    pooled: dict[tuple[str, ...], dict[str, list[float]]] = {}
    for row in rows:
        counts = pooled.setdefault(row.situation, {}).setdefault(row.action, [0.0, 0.0])
        weight = row.weight if row.shared else 1.0
        counts[0] += weight * row.successes
        counts[1] += weight * row.failures
    lines = [EVIDENCE_HEADING, ""]
    if not pooled:
        lines.extend(["_No evidence yet._", ""])
        return "\n".join(lines)
    for situation in sorted(pooled):
        actions = pooled[situation]

        def mean(action: str, actions: dict[str, list[float]] = actions) -> float:
            return posterior_mean(actions[action][0], actions[action][1], policy)

        lines.append(f"### {_label(situation)}")
        lines.append("")
        for rank, action in enumerate(sorted(actions, key=lambda a: (-mean(a), a))):
            wins, losses = actions[action]
            runs = wins + losses
            lead = "works best: " if rank == 0 else ""
            lines.append(
                f"- {lead}{action}: {_count(wins)} of {_count(runs)} runs succeeded "
                f"_(posterior mean {mean(action):.2f})_"
            )
        lines.append("")
    return "\n".join(lines)


def _count(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def with_evidence(playbook: str | None, agent_id: str, section: str) -> str:
    """The stored playbook (or an empty one) followed by the evidence section."""
    head = playbook if playbook is not None else render_playbook(agent_id, ())
    return f"{head.rstrip()}\n\n{section}"
