"""The apply loop's witness: each mutation summarised in the agent's hash-chained
log, and published on memory-events so a consumer can keep its own copy of the
chain and check the store's against it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grimoire.agents.ports import EventSink
from grimoire.tables.trust.witness_store import Witness
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import WitnessEventV1

__all__ = ["PublishedWitness"]


@dataclass
class PublishedWitness:
    witness: Witness
    sink: EventSink
    topics: TopicNames

    async def record(
        self,
        agent_id: str,
        op: str,
        ids: Sequence[str],
        fields: Any,
        *,
        journal: tuple[int, int],
    ) -> None:
        record = await self.witness.append(
            agent_id,
            journal_partition=journal[0],
            journal_offset=journal[1],
            op=op,
            ids=ids,
            fields=fields,
        )
        event = WitnessEventV1(
            agent_id=agent_id,
            seq=record.seq,
            journal_partition=record.journal_partition,
            journal_offset=record.journal_offset,
            op=record.op,
            ids=list(record.ids),
            fields_digest=record.fields_digest,
            prev_hash=record.prev_hash,
            hash=record.hash,
        )
        await self.sink.send(self.topics.memory_events, agent_id, event.dumps_json())
