"""PLAYBOOK.md: an agent's promoted heuristics as a markdown document (docs/design.md §6).

The document is a pure function of the entries: no timestamps, sections and
lines in a fixed order, so regenerating it after a replay yields the same bytes
and an unchanged playbook is recognisable by equality.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Final

from grimoire.streams.learn.curator.values import CuratedEntry, EntryStatus
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
