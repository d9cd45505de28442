"""Recall: decode the request, resolve it against the agent's state, run the flow,
answer on `reply_to`."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace

import orjson

from grimoire.agents.handlers.dead_letters import dead_letter
from grimoire.agents.ports import UNKNOWN_AGENT, Embedder, EventSink, InputMessage
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.inbound.recall_request import RecallLimits, RecallQuery, parse_recall_request
from grimoire.streams.inbound.validators import InputLimits
from grimoire.streams.model.eidolon import DEFAULT_STATE_WEIGHT, eidolon_vector
from grimoire.streams.model.field_state import Affect, FieldState
from grimoire.streams.model.text import search_terms
from grimoire.streams.recall.anti_rumination import is_due, window_of
from grimoire.streams.recall.flow import (
    QueryVectors,
    RankingPolicy,
    RecallContext,
    RecalledItem,
    run_recall,
)
from grimoire.streams.recall.mode_decision import decide_mode
from grimoire.streams.recall.options import RetrievalMode
from grimoire.streams.recall.walk.circuits import circuits_for
from grimoire.tables.memory.store import MemoryStore
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import RecallItemV1, RecallResultV1

logger = logging.getLogger(__name__)


@dataclass
class RecallHandler:
    store: MemoryStore
    embedder: Embedder
    sink: EventSink
    topics: TopicNames
    limits: RecallLimits = field(default_factory=RecallLimits)
    input_limits: InputLimits = field(default_factory=InputLimits)
    policy: RankingPolicy = field(default_factory=RankingPolicy)
    eidolon_weight: float = DEFAULT_STATE_WEIGHT

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
        fields, watermark = await asyncio.gather(
            self.store.load_fields([query.agent_id]), self.store.watermark(query.agent_id)
        )
        state = fields[query.agent_id]
        # Recency and decay run on the request's event time, never the wall clock.
        now_ms = query.as_of_ms if query.as_of_ms is not None else (watermark or 0)
        state = _with_overrides(state, query)
        terms = search_terms(query.query)
        mode = decide_mode(query.mode, search_terms=terms, has_memories=watermark is not None)
        ctx = RecallContext(
            now_ms=now_ms,
            mode=mode,
            terms=terms,
            regime=state.regime,
            digest=state.digest(),
            affect=state.affect if state.affect != Affect() else None,
            circuits=circuits_for(query.state.circuit),
        )
        embed_ms: list[float] = []

        async def vectors() -> QueryVectors:
            began = time.perf_counter()
            found = await self._vectors(query.query, state)
            embed_ms.append(round((time.perf_counter() - began) * 1000, 3))
            return found

        if mode is not RetrievalMode.NONE:
            ctx = replace(ctx, pending_vectors=vectors)
        # Anti-rumination: the first recall of each window of ticks carries
        # memories against the mood; which window was served is the agent's state.
        window = window_of(state.tick, ctx.affect, self.policy.contrarian)
        if window is not None:
            served = await self.store.contrarian_served(query.agent_id)
            ctx = replace(ctx, contrarian_due=is_due(window, served))
        prepared = time.perf_counter()
        source = self.store.recall_source(query.agent_id)
        outcome = await run_recall(
            query, ctx, source, policy=self.policy, stopwatch=time.perf_counter
        )
        if window is not None and ctx.contrarian_due and query.record_usage and outcome.items:
            # Before the reply, like usage: the caller's next request sees it served.
            await self.store.serve_contrarian(query.agent_id, window)
        # `lanes` includes the query embedding, which overlaps the BM25 lane.
        timings = {
            "state": round((prepared - started) * 1000, 3),
            "embed": embed_ms[0] if embed_ms else 0.0,
            **dict(outcome.timings_ms),
        }
        timings["total"] = round((time.perf_counter() - started) * 1000, 3)
        return RecallResultV1(
            correlation_id=query.correlation_id,
            agent_id=query.agent_id,
            items=[_item(query, item) for item in outcome.items],
            watermark=watermark,
            watermark_tick=state.tick,
            watermark_block=state.block,
            as_of=now_ms,
            mode=mode.value,
            budget={
                "tokens_used": outcome.tokens_used,
                "token_budget": query.budgets.token_budget,
                "items": len(outcome.items),
                "max_items": query.budgets.max_items,
            },
            timings_ms=timings,
        )

    async def _vectors(self, text: str, state: FieldState) -> QueryVectors:
        """The query and the state digest in one model call; the eidolon query is
        conditioned on the state exactly as memories are at ingest."""
        digest_text = state.digest_text()
        texts = [text, digest_text] if digest_text else [text]
        vectors = await self.embedder.embed_query(texts)
        canonical = vectors[0]
        digest_vector = vectors[1] if digest_text else None
        eidolon = eidolon_vector(canonical, digest_vector, state_weight=self.eidolon_weight)
        return canonical, eidolon

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


def _with_overrides(state: FieldState, query: RecallQuery) -> FieldState:
    """The agent's field state with whatever the request brought in its place."""
    override = query.state
    if override.digest is not None:
        focus = tuple(sorted((key, 1.0) for key in set(override.digest)))
        state = replace(state, focus=focus)
    if override.regime is not None:
        state = replace(state, regime=override.regime)
    if override.affect is not None:
        state = replace(state, affect=override.affect)
    return state


def _item(query: RecallQuery, item: RecalledItem) -> RecallItemV1:
    record = item.record
    return RecallItemV1(
        id=record.memory_id,
        agent_id=query.agent_id,
        kind=record.kind,
        layer=record.layer,
        gist=item.gist,
        ts=record.ts_ms,
        score=item.score,
        lanes=list(item.lanes),
        source_event_id=record.source_event_id,
        text=item.text,
        reasons=list(item.reasons),
        scores=dict(item.factors) if query.explain else None,
        tokens=item.tokens,
        session_id=record.session_id or None,
        hyperedge_ids=list(record.hyperedge_ids) or None,
        episode=[
            {"id": s.memory_id, "role": s.role, "gist": s.gist, "edge": s.edge_id}
            for s in item.episode
        ]
        or None,
    )
