"""Recall: canonical KNN + BM25 full text, fused by RRF, answered on `reply_to`."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import orjson

from grimoire.agents.dead_letters import dead_letter
from grimoire.agents.messages import UNKNOWN_AGENT, InputMessage
from grimoire.agents.sinks import EventSink
from grimoire.infra.embedding import Embedder
from grimoire.streams.fields import InputLimits
from grimoire.streams.fusion import reciprocal_rank_fusion
from grimoire.streams.normalize import Rejection
from grimoire.streams.requests import RecallLimits, RecallQuery, parse_recall_request
from grimoire.streams.text import gist, search_terms
from grimoire.tables.memory_store import MemoryStore, StoredMemory
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import RecallItemV1, RecallResultV1

logger = logging.getLogger(__name__)

CANONICAL_LANE = "canonical"
BM25_LANE = "bm25"


@dataclass(frozen=True, slots=True)
class LaneSizes:
    canonical_k: int = 20
    bm25_k: int = 20
    rrf_k: int = 60


@dataclass
class RecallHandler:
    store: MemoryStore
    embedder: Embedder
    sink: EventSink
    topics: TopicNames
    limits: RecallLimits = field(default_factory=RecallLimits)
    input_limits: InputLimits = field(default_factory=InputLimits)
    lanes: LaneSizes = field(default_factory=LaneSizes)

    async def handle(self, message: InputMessage) -> None:
        parsed = parse_recall_request(message.value, self.limits, self.input_limits)
        if isinstance(parsed, Rejection):
            await dead_letter(self.sink, self.topics.dead_letters, message, parsed)
            await self._reply_error(message.value, parsed)
            return
        result = await self.recall(parsed)
        await self.sink.send(parsed.reply_to, parsed.agent_id, result.dumps_json())

    async def recall(self, query: RecallQuery) -> RecallResultV1:
        started = time.perf_counter()
        vectors = await self.embedder.embed([query.query])
        embedded = time.perf_counter()
        terms = search_terms(query.query)
        dense, lexical, watermark = await asyncio.gather(
            self.store.knn(query.agent_id, vectors[0].tolist(), self.lanes.canonical_k),
            self.store.full_text(query.agent_id, terms, self.lanes.bm25_k),
            self.store.watermark(query.agent_id),
        )
        searched = time.perf_counter()
        memories: dict[str, StoredMemory] = {}
        for hit in (*dense, *lexical):
            memories.setdefault(hit.memory.id, hit.memory)
        fused = reciprocal_rank_fusion(
            {
                CANONICAL_LANE: [hit.memory.id for hit in dense],
                BM25_LANE: [hit.memory.id for hit in lexical],
            },
            k=self.lanes.rrf_k,
        )
        items: list[RecallItemV1] = []
        seen_hashes: set[str] = set()
        for hit in fused:
            memory = memories[hit.id]
            # Repetitive streams store one text many times: keep the best-ranked copy.
            if memory.normalized_hash and memory.normalized_hash in seen_hashes:
                continue
            seen_hashes.add(memory.normalized_hash)
            items.append(_item(memory, round(hit.score, 9), list(hit.lanes)))
            if len(items) == query.k:
                break
        done = time.perf_counter()
        return RecallResultV1(
            correlation_id=query.correlation_id,
            agent_id=query.agent_id,
            items=items,
            watermark=watermark,
            timings_ms={
                "embed": round((embedded - started) * 1000, 3),
                "search": round((searched - embedded) * 1000, 3),
                "fuse": round((done - searched) * 1000, 3),
                "total": round((done - started) * 1000, 3),
            },
        )

    async def reply_failure(self, message: InputMessage, reason: str) -> None:
        """Tell the caller its request could not be served (not its fault)."""
        failure = Rejection(reason, "the recall could not be served", None, None)
        await self._reply_error(message.value, failure)

    async def _reply_error(self, raw: bytes, rejection: Rejection) -> None:
        """Answer a bad request when it names where to reply, so callers need not time out."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return
        if not isinstance(data, dict):
            return
        reply_to, correlation_id = data.get("reply_to"), data.get("correlation_id")
        if not (isinstance(reply_to, str) and isinstance(correlation_id, str) and reply_to):
            return
        if rejection.field == "reply_to":
            return
        error = RecallResultV1(
            correlation_id=correlation_id,
            agent_id=rejection.agent_id or "",
            items=[],
            error=f"{rejection.reason}: {rejection.detail}",
        )
        await self.sink.send(reply_to, rejection.agent_id or UNKNOWN_AGENT, error.dumps_json())


def _item(memory: StoredMemory, score: float, lanes: list[str]) -> RecallItemV1:
    return RecallItemV1(
        id=memory.id,
        agent_id=memory.agent_id,
        kind=memory.kind,
        layer=memory.layer,
        gist=gist(memory.text),
        text=memory.text,
        ts=memory.ts_ms,
        score=score,
        lanes=lanes,
        source_event_id=memory.source_event_id,
    )
