"""Applying one journal usage entry to a store the way the apply loop does: its view,
`fold_usage`, then the commit, so a test that only needs uses counted once writes no
journal."""

from __future__ import annotations

from collections.abc import Sequence

from grimoire.streams.journal.usage import RecallUsage, fold_usage
from grimoire.tables.ports.memory import UsageLedger


async def apply_usage_entry(
    store: UsageLedger,
    agent_id: str,
    seq: int,
    memory_ids: Sequence[str],
    as_of_ms: int,
    contrarian_window: int | None = None,
    request: str | None = None,
) -> bool:
    """Whether the entry was applied (False: it, or its recall request, was before)."""
    usage = RecallUsage(tuple(memory_ids), as_of_ms, contrarian_window)
    changes = fold_usage(
        await store.usage_view(agent_id, seq, request), agent_id, usage, seq, request
    )
    if changes is None:
        return False
    await store.commit_usage(changes)
    return True
