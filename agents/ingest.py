"""Ingest: validate → dead-letter → embed new texts once → store → memory events."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from grimoire.agents.dead_letters import dead_letter
from grimoire.agents.messages import InputMessage
from grimoire.agents.sinks import EventSink
from grimoire.infra.embedding import Embedder
from grimoire.streams.fields import InputLimits
from grimoire.streams.normalize import Accepted, Rejection, normalize_event
from grimoire.streams.records import EventType, MemoryCandidate, MemoryRecord
from grimoire.tables.memory_store import MemoryStore
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import MemoryEventV1

logger = logging.getLogger(__name__)

INTERNAL_ERROR = "internal_error"


@dataclass(frozen=True, slots=True)
class IngestReport:
    written: int
    duplicates: int
    dead_lettered: int


@dataclass
class IngestHandler:
    store: MemoryStore
    embedder: Embedder
    sink: EventSink
    topics: TopicNames
    limits: InputLimits = field(default_factory=InputLimits)

    def _normalize(self, event_type: EventType, message: InputMessage) -> Accepted | Rejection:
        try:
            return normalize_event(event_type, message.value, self.limits)
        except Exception as exc:  # a bug must dead-letter the event, not stop the partition
            logger.exception("normalizer failed on %s@%s", message.topic, message.offset)
            return Rejection(INTERNAL_ERROR, repr(exc)[:500], None, None)

    async def handle(self, event_type: EventType, messages: Sequence[InputMessage]) -> IngestReport:
        candidates: list[MemoryCandidate] = []
        watermarks: dict[str, int] = {}
        dead = 0
        for message in messages:
            outcome = self._normalize(event_type, message)
            if isinstance(outcome, Rejection):
                await dead_letter(self.sink, self.topics.dead_letters, message, outcome)
                dead += 1
                continue
            candidates.extend(outcome.candidates)
            watermarks[outcome.agent_id] = max(watermarks.get(outcome.agent_id, 0), outcome.ts_ms)

        existing = await self.store.existing_ids([c.id for c in candidates])
        fresh = _unique([c for c in candidates if c.id not in existing])
        records = await self._embed(fresh)
        written = await self.store.put_many(records)
        for record, was_written in zip(records, written, strict=True):
            if was_written:
                await self.sink.send(
                    self.topics.memory_events, record.agent_id, _write_event(record.candidate)
                )
        await self.store.advance_watermark(watermarks)
        stored = sum(written)
        return IngestReport(stored, len(candidates) - stored, dead)

    async def _embed(self, candidates: Sequence[MemoryCandidate]) -> list[MemoryRecord]:
        distinct = list(dict.fromkeys(c.text for c in candidates))
        vectors = await self.embedder.embed(distinct)
        by_text = {text: tuple(float(x) for x in vectors[i]) for i, text in enumerate(distinct)}
        return [MemoryRecord(c, by_text[c.text]) for c in candidates]


def _unique(candidates: Sequence[MemoryCandidate]) -> list[MemoryCandidate]:
    return list({c.id: c for c in candidates}.values())


def _write_event(candidate: MemoryCandidate) -> bytes:
    return MemoryEventV1(
        type="GrimoireWrite",
        agent_id=candidate.agent_id,
        memory_id=candidate.id,
        source_event_id=candidate.provenance.source_event_id,
        kind=candidate.kind.value,
        layer=candidate.layer.value,
        ts=candidate.ts_ms,
    ).dumps_json()
