"""The reference `WitnessLog`: per agent, records under the seq they were stored
at (as RedisWitnessLog's stream entry ids), with its semantics: an append must
continue the stored chain, and the stored record appended again is a no-op. For
tests without services; run by the same contract suite as the Redis one
(tests/integration/test_witness_contract.py)."""

from __future__ import annotations

from collections.abc import Sequence

from grimoire.streams.trust.witness import GENESIS_HASH, WitnessRecord
from grimoire.tables.trust.witness_store import ChainConflict

__all__ = ["InMemoryWitnessLog"]


class InMemoryWitnessLog:
    def __init__(self) -> None:
        # Per agent: (seq stored at, record), in stored order.
        self._entries: dict[str, list[tuple[int, WitnessRecord]]] = {}

    async def append(self, record: WitnessRecord) -> None:
        entries = self._entries.setdefault(record.agent_id, [])
        head_seq = entries[-1][0] if entries else 0
        head_hash = entries[-1][1].hash if entries else GENESIS_HASH
        if record.seq <= head_seq:
            if any(seq == record.seq and stored.hash == record.hash for seq, stored in entries):
                return
            raise ChainConflict(f"seq {record.seq} is taken (head {head_seq})")
        if record.seq != head_seq + 1:
            raise ChainConflict(f"seq {record.seq} does not follow {head_seq}")
        if record.prev_hash != head_hash:
            raise ChainConflict(f"seq {record.seq} does not chain to the stored head")
        entries.append((record.seq, record))

    async def last(self, agent_id: str) -> WitnessRecord | None:
        entries = self._entries.get(agent_id)
        return entries[-1][1] if entries else None

    async def records(
        self, agent_id: str, start_seq: int = 1, limit: int | None = None
    ) -> list[WitnessRecord]:
        if limit is not None and limit <= 0:
            return []
        found = [record for seq, record in self._entries.get(agent_id, []) if seq >= start_seq]
        return found if limit is None else found[:limit]

    async def length(self, agent_id: str) -> int:
        return len(self._entries.get(agent_id, []))

    def tamper(self, agent_id: str, entries: Sequence[tuple[int, WitnessRecord]]) -> None:
        """Replace the agent's stored log with `entries` ((seq stored at, record),
        in stored order), as someone with write access could. For audit tests."""
        self._entries[agent_id] = list(entries)
