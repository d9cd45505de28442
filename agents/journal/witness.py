"""The apply loop's witness: each mutation summarised in the agent's hash-chained
log, and published on memory-events so a consumer can keep its own copy of the
chain and check the store's against it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from grimoire.agents.ports import EventSink
from grimoire.streams.trust.witness import WitnessRecord
from grimoire.tables.trust.witness_store import Witness
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import WitnessEventV1

__all__ = ["PublishedWitness", "witness_event"]


@dataclass
class PublishedWitness:
    witness: Witness
    sink: EventSink
    topics: TopicNames
    # Journal partitions fold side by side, and the deployment's own chain (where
    # forgetting is recorded) is shared by all of them: appends take turns.
    _in_turn: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    async def witnessed(self, agent_id: str, journal: tuple[int, int]) -> bool:
        head = await self.witness.head(agent_id)
        return head is not None and (head.journal_partition, head.journal_offset) >= journal

    async def record(
        self,
        agent_id: str,
        op: str,
        ids: Sequence[str],
        fields: Any,
        *,
        journal: tuple[int, int],
    ) -> None:
        async with self._in_turn:
            record = await self.witness.append(
                agent_id,
                journal_partition=journal[0],
                journal_offset=journal[1],
                op=op,
                ids=ids,
                fields=fields,
            )
        await self.sink.send(self.topics.memory_events, agent_id, witness_event(record))


def witness_event(record: WitnessRecord) -> bytes:
    """The memory-event that publishes a witness record."""
    return WitnessEventV1(
        agent_id=record.agent_id,
        seq=record.seq,
        journal_partition=record.journal_partition,
        journal_offset=record.journal_offset,
        op=record.op,
        ids=list(record.ids),
        fields_digest=record.fields_digest,
        prev_hash=record.prev_hash,
        hash=record.hash,
    ).dumps_json()
