"""PLAYBOOK.md rendering: sections, order, and byte-for-byte determinism."""

from __future__ import annotations

import random
from dataclasses import replace

from grimoire.streams.learn.curator.distill import Polarity, Situation
from grimoire.streams.learn.curator.playbook import EMPTY_SECTION, render_playbook
from grimoire.streams.learn.curator.values import CuratedEntry, EntryStatus
from grimoire.streams.model.records import Kind

T0 = 1_790_000_000_000


def heuristic(
    memory_id: str,
    confidence: float,
    strategy: str = "",
    status: EntryStatus = EntryStatus.PLAYBOOK,
) -> CuratedEntry:
    return CuratedEntry(
        memory_id=memory_id,
        kind=Kind.HEURISTIC,
        text=f"Prefer {memory_id}:\nit tends to work.",
        confidence=confidence,
        last_accessed_ms=T0,
        ts_ms=T0,
        status=status,
        signature=memory_id,
        situation=Situation("swap", (), "", strategy),
        polarity=Polarity.WORKS,
    )


ENTRIES = [
    heuristic("h-b", 0.8),
    heuristic("h-a", 0.8),
    heuristic("h-c", 0.95),
    heuristic("h-lp", 0.71, "weth-usdc-lp"),
    heuristic("h-dca", 0.9, "eth-dca"),
    heuristic("h-demoted", 0.3, status=EntryStatus.DEMOTED),
    heuristic("h-proposed", 0.6, status=EntryStatus.PROPOSED),
    replace(heuristic("i-active", 0.9), kind=Kind.INSIGHT, status=EntryStatus.ACTIVE),
]


def test_sections_and_order() -> None:
    assert render_playbook("agent-7", ENTRIES) == "\n".join(
        [
            "# PLAYBOOK — agent-7",
            "",
            "## Global",
            "",
            "- Prefer h-c: it tends to work. _(confidence 0.95; id h-c)_",
            "- Prefer h-a: it tends to work. _(confidence 0.80; id h-a)_",
            "- Prefer h-b: it tends to work. _(confidence 0.80; id h-b)_",
            "",
            "## Strategy: eth-dca",
            "",
            "- Prefer h-dca: it tends to work. _(confidence 0.90; id h-dca)_",
            "",
            "## Strategy: weth-usdc-lp",
            "",
            "- Prefer h-lp: it tends to work. _(confidence 0.71; id h-lp)_",
            "",
        ]
    )


def test_deterministic_whatever_the_input_order() -> None:
    shuffled = list(ENTRIES)
    random.Random(7).shuffle(shuffled)
    assert render_playbook("agent-7", shuffled) == render_playbook("agent-7", ENTRIES)


def test_empty_playbook_keeps_the_global_section() -> None:
    text = render_playbook("agent-7", [heuristic("h-x", 0.9, status=EntryStatus.DEMOTED)])
    assert text == f"# PLAYBOOK — agent-7\n\n## Global\n\n{EMPTY_SECTION}\n"
