"""The curator's own state, apart from the memory hashes it curates: each entry's
bookkeeping (status, signature, situation, polarity, low-cycle counter, sources:
one JSON value per entry in `Keyspace.curator_entries`, outside the indexed hash
so status churn never re-indexes vectors) and the last cycle's report.

A curated entry is a memory hash (`memory_hash.curated_entry` reads the two
together) plus this bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from grimoire.streams.learn.curator.distill import Polarity, Situation
from grimoire.streams.learn.curator.values import CuratedEntry, CuratorReport, EntryStatus

__all__ = [
    "Bookkeeping",
    "bookkeeping_from_json",
    "bookkeeping_json",
    "report_from_json",
    "report_json",
]


@dataclass(frozen=True, slots=True)
class Bookkeeping:
    status: EntryStatus = EntryStatus.PROPOSED
    signature: str = ""
    situation: Situation | None = None
    polarity: Polarity | None = None
    consecutive_low: int = 0
    source_ids: tuple[str, ...] = ()


def bookkeeping_json(entry: CuratedEntry) -> bytes:
    situation = entry.situation
    return orjson.dumps(
        {
            "status": entry.status.value,
            "signature": entry.signature,
            "polarity": entry.polarity.value if entry.polarity else "",
            "situation": None
            if situation is None
            else [situation.tool, list(situation.keys), situation.regime, situation.strategy],
            "consecutive_low": entry.consecutive_low,
            "source_ids": list(entry.source_ids),
        }
    )


def bookkeeping_from_json(raw: Any) -> Bookkeeping:
    """An entry's bookkeeping; absent (an entry written before it) reads as the defaults."""
    book = orjson.loads(raw) if raw else {}
    situation = book.get("situation")
    return Bookkeeping(
        status=EntryStatus(book.get("status", EntryStatus.PROPOSED.value)),
        signature=str(book.get("signature", "")),
        situation=None
        if situation is None
        else Situation(situation[0], tuple(situation[1]), situation[2], situation[3]),
        polarity=Polarity(book["polarity"]) if book.get("polarity") else None,
        consecutive_low=int(book.get("consecutive_low", 0)),
        source_ids=tuple(book.get("source_ids", ())),
    )


def report_json(report: CuratorReport) -> bytes:
    return orjson.dumps(report)


def report_from_json(raw: Any) -> CuratorReport:
    return CuratorReport(**orjson.loads(raw))
