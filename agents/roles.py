"""What a worker process serves: the journal's folds, the reads, or both.

A recall is a read whose side effects are journal entries, so the workers that
answer recalls need not be the ones that fold the journal. Split, a recall never
waits behind an ingest batch in the same event loop (one core's worth of Python):
on a busy machine the operating system schedules the two processes side by side.
Every role joins the same consumer group; the group's assignor hands a topic's
partitions only to the members subscribed to it, so any mix of roles answers
each request once.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

__all__ = ["ALL_ROLES", "WorkerRole", "parse_roles"]


class WorkerRole(StrEnum):
    # The inputs' sequencers, the journal's apply loop and the maintenance topic.
    INGEST = "ingest"
    # Recall requests and fact queries.
    RECALL = "recall"


ALL_ROLES: Final = frozenset(WorkerRole)


def parse_roles(text: str) -> frozenset[WorkerRole]:
    """`ingest`, `recall` or both, comma-separated (order and spaces around names
    ignored; an empty name, as in "ingest," or "", is refused)."""
    names = [part.strip() for part in text.split(",")]
    if not all(names):
        raise ValueError(f"a worker needs one or more roles (ingest, recall), not {text!r}")
    try:
        return frozenset(WorkerRole(name) for name in names)
    except ValueError:
        raise ValueError(f"worker roles are ingest and recall, not {text!r}") from None
