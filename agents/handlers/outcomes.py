"""Outcomes: decode, apply once to the agent's memories, report on memory-events.

An outcome may name a memory whose event is later in the journal: that part of the
outcome is held for the memory and applied when the write path writes it (see
IngestHandler), so what an outcome does never depends on which arrived first.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from grimoire.agents.handlers.dead_letters import dead_letter
from grimoire.agents.ports import EventSink, InputMessage
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.inbound.outcome import parse_outcome
from grimoire.streams.inbound.validators import InputLimits
from grimoire.tables.memory.store import MemoryStore
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import MemoryEventV1

logger = logging.getLogger(__name__)


@dataclass
class OutcomeHandler:
    store: MemoryStore
    sink: EventSink
    topics: TopicNames
    limits: InputLimits = field(default_factory=InputLimits)

    async def handle(self, message: InputMessage) -> int:
        """How many memories changed; -1 for an outcome applied before (redelivery)."""
        outcome = parse_outcome(message.value, self.limits)
        if isinstance(outcome, Rejection):
            await dead_letter(self.sink, self.topics.dead_letters, message, outcome)
            return 0
        changed = await self.store.apply_outcome(outcome)
        held: list[str] = []
        if changed >= 0 and outcome.effect.touches_memories:
            held = await self.store.missing_memories(outcome.agent_id, outcome.memory_ids)
            if held:
                await self.store.hold_outcome(outcome, held)
        if changed > 0 or (changed == 0 and outcome.memory_ids):
            effect = outcome.effect
            event = MemoryEventV1(
                type="GrimoireOutcome",
                agent_id=outcome.agent_id,
                memory_id=",".join(outcome.memory_ids),
                source_event_id=outcome.outcome_id,
                kind="outcome",
                layer="",
                ts=outcome.ts_ms,
                action=outcome.kind.value,
                reason=f"applied to {changed} of {len(outcome.memory_ids)} memories"
                + (f", held for {len(held)} not written yet" if held else ""),
                admission={
                    "confidence_delta": effect.confidence_delta,
                    "strength_delta": effect.strength_delta,
                },
            )
            await self.sink.send(self.topics.memory_events, outcome.agent_id, event.dumps_json())
        return changed
