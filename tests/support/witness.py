"""Witness records as the log holds them: a chain of one agent's records, each
linked to the one before by its hash."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from grimoire.streams.trust.witness import WitnessRecord, next_record

__all__ = ["witness_chain"]


def witness_chain(
    agent: str, n: int, record: Callable[[int], Mapping[str, Any]]
) -> list[WitnessRecord]:
    """`n` records of `agent` chained from the genesis hash; `record(i)` gives the i-th
    one's journal place, op, ids and fields (`next_record`'s keywords)."""
    records: list[WitnessRecord] = []
    for i in range(n):
        records.append(next_record(records[-1] if records else None, agent_id=agent, **record(i)))
    return records
