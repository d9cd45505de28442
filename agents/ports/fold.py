"""The apply loop's ports: the opened entries it hands to the rule registered for
their kind, and what a rule records (`WitnessPort`) and stores with its decisions
(`CommitEffects`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from grimoire.agents.ports.io import InputMessage
from grimoire.streams.journal.entry import JournalEntry
from grimoire.streams.journal.fold import Run
from grimoire.streams.journal.usage import RecallUsage
from grimoire.tables.ports.transaction import TransactionPart

__all__ = [
    "CommandApplier",
    "CommitEffects",
    "Decided",
    "EntryRule",
    "Opened",
    "Staged",
    "UsageApplier",
    "WitnessPort",
]


@dataclass(frozen=True, slots=True)
class Opened:
    """A journal entry with its payload opened, as a rule sees it: the input's bytes
    at its source coordinates (dead letters name where it came from)."""

    entry: JournalEntry
    message: InputMessage
    journal: tuple[int, int]  # (partition, offset) of the entry itself


class EntryRule(Protocol):
    """How one kind of journal entry changes an agent's state. The apply loop hands
    each run of entries of the kind to the rule the composition root registered
    for it; a run holds one agent's entries, or (ingest kinds) several free
    agents' side by side, in journal order."""

    async def apply(self, run: Run[Opened]) -> bool:
        """Apply `run` and witness what it changed; whether anything was sent
        straight to the producer (the loop flushes it before moving the marks)."""
        ...


class WitnessPort(Protocol):
    """Summarises one mutation in the agent's hash-chained witness log."""

    async def witnessed(self, agent_id: str, journal: tuple[int, int]) -> bool:
        """Whether the agent's chain already reaches the entry at `journal` (its
        entries are all on one journal partition, in order)."""
        ...

    async def record(
        self,
        agent_id: str,
        op: str,
        ids: Sequence[str],
        fields: Any,
        *,
        journal: tuple[int, int],
    ) -> None: ...


class UsageApplier(Protocol):
    async def apply_usage(
        self,
        agent_id: str,
        usage: RecallUsage,
        seq: int | None = None,
        request: str | None = None,
    ) -> bool:
        """Apply a usage entry's uses, once per entry `seq` and per recall
        `request`; whether it did now."""
        ...

    async def answered(self, agent_id: str, request: str, seq: int) -> bool:
        """Whether another entry than `seq` was applied for the recall `request`."""
        ...


class CommandApplier(Protocol):
    async def apply_command(
        self, message: InputMessage
    ) -> Sequence[tuple[str, Sequence[str], Any]]:
        """Apply a command (retract, forget, pin, unpin); a witness summary (op, ids,
        fields) of each mutation it made, in order (none: it changed nothing or was
        dead-lettered)."""
        ...


@dataclass(frozen=True, slots=True)
class Decided:
    """What the write path decided for one candidate, and what it wrote.

    `written` is the stored record's fields (transaction time left out) for a
    candidate written as a new memory, None for a fold or a reinforcement (whose
    write is the memory id and the action). The memory-event also carries the
    admission breakdown, which is *why* (a neighbour's confidence as it stood in
    the batch), not *what*: the witness summarises what."""

    agent_id: str
    candidate_id: str
    memory_id: str
    action: str
    event: bytes  # the GrimoireWrite/Merge/... memory-event
    written: dict[str, object] | None = None

    def summary(self) -> dict[str, object]:
        return {
            "candidate_id": self.candidate_id,
            "memory_id": self.memory_id,
            "action": self.action,
            "written": self.written,
        }


class Staged(Protocol):
    """A batch's effects, ready to ride in its commit."""

    @property
    def parts(self) -> Sequence[TransactionPart]: ...

    async def committed(self) -> None:
        """The transaction went through: publish what it stored."""
        ...

    def abandoned(self) -> None:
        """The transaction failed: forget what was staged (heads, queues)."""
        ...


class CommitEffects(Protocol):
    """Turns a batch's decisions (per input message, in order) into the writes
    that must be stored with them."""

    async def stage(self, decided: Sequence[Sequence[Decided]]) -> Staged: ...

    def sliced(self, start: int, stop: int) -> CommitEffects:
        """The effects of the batch's messages[start:stop] (a batch split in two)."""
        ...
