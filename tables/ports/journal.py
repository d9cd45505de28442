"""The ports of the journal's storage: keys, marks, progress, outbox, witness due.

The journal's key store (each agent's keys and sequence counters, outside the
fold), the applied-input marks and the fold's progress per partition, the
publication outbox and the witness record an apply leaves due are each used
through one of these Protocols, so the apply loop and the sequencer run the same
over Redis and over the in-memory stores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from grimoire.tables.codec.outbox_entry import OutboxEntry
from grimoire.tables.ports.transaction import TransactionPart

if TYPE_CHECKING:
    # Type-only: both modules import this one at import time.
    from grimoire.tables.journal.keystore import AgentKey
    from grimoire.tables.journal.witness_due import WitnessDue

__all__ = ["AppliedMarks", "JournalProgress", "KeyStore", "Outbox", "WitnessDueReader"]


class KeyStore(Protocol):
    """The agents' journal keys and sequence counters, kept apart from memory state."""

    async def key_for(self, agent_id: str) -> AgentKey:
        """The agent's current key, created on first use. Creation is atomic: workers
        racing on a new agent all get the one key that won."""
        ...

    async def key(self, agent_id: str, key_id: str) -> AgentKey | None:
        """A key by id; None once the agent was forgotten (or for an id it never had)."""
        ...

    async def forget(self, agent_id: str) -> int:
        """Destroy every key of the agent and its sequence counter (nothing naming
        the agent is left); returns how many keys. The next `key_for` creates a new
        key with a new id, so entries sealed before stay unreadable and a reused id
        starting again at 1 never repeats a binding (it names the key id)."""
        ...

    async def has_key(self, agent_id: str) -> bool:
        """Whether the agent has a key now (seen, and not forgotten since), without
        creating one."""
        ...

    async def journal_name(self, agent_id: str) -> str:
        """The agent's name in the journal (`streams.journal.entry.journal_name`
        under the deployment's secret, created on first use)."""
        ...

    async def agent_named(self, journal: str) -> str | None:
        """Whose journal name `journal` is; None once that agent was forgotten (or
        for a name that was never handed out)."""
        ...

    async def forgets(self) -> int:
        """How many forgets this store has seen: it grows by one with each, so a
        cache of its keys can tell that one ran anywhere since it last looked."""
        ...

    async def refresh(self) -> None:
        """Drop whatever was cached from before a forget that ran anywhere (a cache
        does one round trip; a store without a cache does nothing)."""
        ...

    async def next_sequence(self, agent_id: str, count: int = 1) -> int:
        """Reserve `count` consecutive journal sequence numbers for the agent; returns
        the last of the block (the first block of an agent ends at `count`, so
        numbers start at 1). Blocks never overlap, whatever the concurrency."""
        ...

    async def next_sequences(self, counts: Mapping[str, int]) -> dict[str, int]:
        """`next_sequence` for several agents at once (agent -> block size), in one
        round trip: the last number of each agent's block."""
        ...


class AppliedMarks(Protocol):
    async def load(
        self, sources: Sequence[tuple[str, str, int]]
    ) -> dict[tuple[str, str, int], int]:
        """The marks of `sources` that exist."""
        ...

    async def advance(self, marks: Mapping[tuple[str, str, int], int]) -> None:
        """Move each mark forward to its offset (never back)."""
        ...

    async def forget(self, agent_id: str) -> int:
        """Drop every mark of the agent (it is being forgotten); how many."""
        ...


class JournalProgress(Protocol):
    async def load(self, partition: int) -> int | None:
        """The last journal offset of `partition` the fold finished, if any."""
        ...

    async def advance(self, offsets: Mapping[int, int]) -> None:
        """Move each partition's mark forward to its offset (never back)."""
        ...


class Outbox(Protocol):
    def part(self, journal_partition: int, entries: Sequence[OutboxEntry]) -> TransactionPart:
        """`entries` queued behind their agents' others (an entry's key is its
        agent), inside a store's transaction."""
        ...

    async def pending(self, journal_partition: int) -> list[OutboxEntry]:
        """Everything queued for the partition's agents: agent by agent (sorted),
        each agent's oldest first."""
        ...

    async def remove(self, journal_partition: int, counts: Mapping[str, int]) -> None:
        """Drop each agent's oldest `counts[agent]` entries (published and
        acknowledged)."""
        ...


class WitnessDueReader(Protocol):
    async def due(self, agent_id: str) -> WitnessDue | None:
        """The agent's last record written with effects, if any."""
        ...
