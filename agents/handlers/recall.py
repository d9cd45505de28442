"""Recall: decode the request, resolve it against the agent's state, run the flow,
answer on `reply_to`."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from itertools import accumulate

import numpy as np
import numpy.typing as npt
import orjson

from grimoire.agents.handlers.replies import admitted, reply_error
from grimoire.agents.ports import (
    Embedder,
    EventSink,
    InputMessage,
    UsageRecorder,
    source_of,
)
from grimoire.streams.clade.copies import CLADE_PROVENANCE, origin_of
from grimoire.streams.config.agent_config import AgentConfig
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.inbound.recall_request import (
    RecallLimits,
    RecallQuery,
    parse_recall_request,
)
from grimoire.streams.inbound.validators import Fields, InputLimits
from grimoire.streams.journal.usage import RecallUsage
from grimoire.streams.learn.hedge import LEARNED_FACTORS, LearnedWeights, rerank_weights
from grimoire.streams.model.eidolon import (
    DEFAULT_STATE_WEIGHT,
    eidolon_vector,
    state_key,
    state_vector,
)
from grimoire.streams.model.field_state import Affect, FieldState
from grimoire.streams.model.lexicon import query_terms
from grimoire.streams.recall.anti_rumination import is_due, window_of
from grimoire.streams.recall.entity_lane import query_entity_keys
from grimoire.streams.recall.evidence_first import evidence_summary
from grimoire.streams.recall.flow import (
    QueryVectors,
    RankingPolicy,
    RecallContext,
    RecalledItem,
    run_recall,
)
from grimoire.streams.recall.mode_decision import decide_mode
from grimoire.streams.recall.named import actor_candidates, query_names, without_actors
from grimoire.streams.recall.options import RetrievalMode
from grimoire.streams.recall.rerank import RerankWeights
from grimoire.streams.recall.temporal import TimeIntent
from grimoire.streams.recall.view import RecallView
from grimoire.streams.recall.walk.circuits import circuits_for
from grimoire.streams.write.changes import StateVector
from grimoire.tables.memory.recall_view import PortRecallViews
from grimoire.tables.ports.config import ConfigStore
from grimoire.tables.ports.learn import LearningStore
from grimoire.tables.ports.memory import RecallReads, RecallViews
from grimoire.tables.ports.trust import AuthMetrics
from grimoire.tables.trust.api_keys import Authenticator
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import RecallItemV1, RecallResultV1

logger = logging.getLogger(__name__)


@dataclass
class RecallHandler:
    store: RecallReads
    embedder: Embedder
    sink: EventSink
    topics: TopicNames
    limits: RecallLimits = field(default_factory=RecallLimits)
    input_limits: InputLimits = field(default_factory=InputLimits)
    policy: RankingPolicy = field(default_factory=RankingPolicy)
    eidolon_weight: float = DEFAULT_STATE_WEIGHT
    # Where a served answer's uses go: the agent's journal (the sequencer) in a
    # worker; applied at once where there is no journal (tests, benchmarks).
    usage: UsageRecorder = field(kw_only=True)
    # Tenant keys: a request must present a key that reaches its agent and name one
    # of that key's reply topics (None, or an authenticator that is switched off,
    # answers everyone: local development).
    authenticator: Authenticator | None = field(default=None, kw_only=True)
    auth_metrics: AuthMetrics | None = field(default=None, kw_only=True)
    # Agents' runtime configurations (None: every agent has the defaults).
    configs: ConfigStore | None = field(default=None, kw_only=True)
    # What the agents learned (None: static rerank weights, no causal edges).
    learning: LearningStore | None = field(default=None, kw_only=True)
    # The agent's state a recall reads first, in one read (None: asked of
    # `store`, `configs` and `learning` in turn).
    views: RecallViews | None = field(default=None, kw_only=True)
    _recently_served: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    def _served_windows(self, agent_id: str, window: int | None) -> None:
        if window is not None:
            self._recently_served[agent_id] = max(
                window, self._recently_served.get(agent_id, window)
            )

    async def handle(self, message: InputMessage) -> None:
        decoded = parse_recall_request(
            message.value,
            self.limits,
            self.input_limits,
            reply_namespace=self.topics.reply_namespace,
        )
        parsed = await admitted(self, decoded, message)
        if parsed is None:
            return
        view = await self._view(parsed.agent_id, parsed.query)
        config = view.config
        if config.top_k is not None:
            # The agent's default item count, for a request that names none.
            parsed = self._parse_with_default_k(message.value, config.top_k) or parsed
        result, usage = await self.answer(parsed, config, view)
        reply = bounded_reply(result, self.limits.max_reply_bytes)
        await self.sink.send(parsed.reply_to, parsed.agent_id, reply.payload)
        # Only what reached the caller counts as used, and only once it has: a
        # retried request whose reply failed counts nothing.
        delivered = set(reply.item_ids)
        usage = replace(
            usage,
            memory_ids=tuple(i for i in usage.memory_ids if i in delivered),
            factors=tuple(f for f in usage.factors if f[0] in delivered),
        )
        if usage.contrarian_window is not None and not delivered:
            usage = replace(usage, contrarian_window=None)
        if not usage.empty:
            self._served_windows(parsed.agent_id, usage.contrarian_window)
            await self.usage.record_usage(parsed.agent_id, usage, source_of(message))

    async def recall(self, query: RecallQuery) -> RecallResultV1:
        """The answer alone: a read that records no use (a probe)."""
        result, _ = await self.answer(query)
        return result

    async def _view(self, agent_id: str, query: str) -> RecallView:
        views = self.views or PortRecallViews(self.store, self.configs, self.learning)
        candidates = actor_candidates(query) if self.policy.actor_free_query else ()
        return await views.recall_view(agent_id, candidates)

    def _parse_with_default_k(self, raw: bytes, top_k: int) -> RecallQuery | None:
        defaults = replace(self.limits.defaults, max_items=min(top_k, self.limits.max_k))
        again = parse_recall_request(
            raw,
            replace(self.limits, defaults=defaults),
            self.input_limits,
            reply_namespace=self.topics.reply_namespace,
        )
        return None if isinstance(again, Rejection) else again

    async def answer(
        self, query: RecallQuery, config: AgentConfig | None = None, view: RecallView | None = None
    ) -> tuple[RecallResultV1, RecallUsage]:
        """The answer and what serving it would use (recorded by `handle` once the
        answer is out: recall itself writes nothing). `config`: the agent's runtime
        configuration (retrieval off answers nothing; its time window, layers and
        lane weights narrow and weigh the lanes). `view`: the agent's state, read
        here when not given."""
        started = time.perf_counter()
        if view is None:
            view = await self._view(query.agent_id, query.query)
        state, watermark, kept_state = view.fields, view.watermark, view.state_vector
        use_learned = self.learning is not None and (config or AgentConfig()).use_learned_weights
        learned = view.learned if use_learned else None
        # Recency and decay run on the request's event time, never the wall clock.
        now_ms = query.as_of_ms if query.as_of_ms is not None else (watermark or 0)
        policy = self.policy
        if config is not None:
            if not config.retrieves:
                empty = _empty(query, watermark, state, now_ms, DISABLED_MODE)
                return empty, RecallUsage((), now_ms, None)
            configured = _configured(query, policy, config, now_ms)
            if configured is None:
                empty = _empty(query, watermark, state, now_ms, RetrievalMode.NONE.value)
                return empty, RecallUsage((), now_ms, None)
            query, policy = configured
        policy, learning = _learning_policy(policy, config or AgentConfig(), learned)
        state = _with_overrides(state, query)
        terms = query_terms(query.query)
        mode = decide_mode(query.mode, search_terms=terms, has_memories=watermark is not None)
        ctx = RecallContext(
            now_ms=now_ms,
            mode=mode,
            terms=terms,
            regime=state.regime,
            digest=state.digest(),
            affect=state.affect if state.affect != Affect() else None,
            circuits=circuits_for(query.state.circuit),
            time=TimeIntent.of(query.query, now_ms),
            named=query_names(query.query),
            entity_keys=query_entity_keys(query.query),
        )
        embed_ms: list[float] = []

        # The vector lanes search for what the query asks of the actors it names;
        # the actor match (`names_actor`) prefers those actors' memories.
        topic = without_actors(query.query, view.actors) if policy.actor_free_query else query.query

        async def vectors() -> QueryVectors:
            began = time.perf_counter()
            found = await self._vectors(topic, state, kept_state)
            embed_ms.append(round((time.perf_counter() - began) * 1000, 3))
            return found

        if mode is not RetrievalMode.NONE:
            ctx = replace(ctx, pending_vectors=vectors)
        # Anti-rumination: the first recall of each window of ticks carries
        # memories against the mood; which window was served is the agent's state.
        window = window_of(state.tick, ctx.affect, policy.contrarian)
        if window is not None:
            served = view.contrarian_served
            # A window served moments ago may not be applied yet (it is a journal
            # entry): this worker remembers what it served until it is.
            local = self._recently_served.get(query.agent_id)
            if local is not None and (served is None or local > served):
                served = local
            ctx = replace(ctx, contrarian_due=is_due(window, served))
        prepared = time.perf_counter()
        source = self.store.recall_source(query.agent_id)
        outcome = await run_recall(query, ctx, source, policy=policy, stopwatch=time.perf_counter)
        served_window = (
            window
            if window is not None and ctx.contrarian_due and query.record_usage and outcome.items
            else None
        )
        # `lanes` includes the query embedding, which overlaps the BM25 lane.
        timings = {
            "state": round((prepared - started) * 1000, 3),
            "embed": embed_ms[0] if embed_ms else 0.0,
            **dict(outcome.timings_ms),
        }
        timings["total"] = round((time.perf_counter() - started) * 1000, 3)
        usage = RecallUsage(
            outcome.used_ids,
            now_ms,
            served_window,
            run_id=query.serving_run_id,
            factors=outcome.used_factors if query.serving_run_id else (),
        )
        items = [_item(query, item) for item in outcome.items]
        if query.include_causal and items and self.learning is not None:
            items = await self._with_causal(query.agent_id, items)
        return RecallResultV1(
            correlation_id=query.correlation_id,
            agent_id=query.agent_id,
            items=items,
            learning=learning if query.explain else None,
            embedded_query=topic if query.explain and mode is not RetrievalMode.NONE else None,
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
        ), usage

    async def _with_causal(self, agent_id: str, items: list[RecallItemV1]) -> list[RecallItemV1]:
        """Each item with its strongest causal edges, in and out."""
        assert self.learning is not None
        edges = await self.learning.edges_of(agent_id, [item.id for item in items])
        attached = []
        for item in items:
            mine = sorted(
                edges.get(item.id, ()),
                key=lambda e: (-abs(e.weight) * e.evidence, e.cause, e.effect),
            )[:MAX_CAUSAL_EDGES]
            attached.append(replace(item, causal=[e.to_wire() for e in mine]))
        return attached

    async def _vectors(
        self, text: str, state: FieldState, kept: StateVector | None = None
    ) -> QueryVectors:
        """The query and the state's parts in one model call (the parts are nearly
        always cached); the eidolon query is conditioned on the state exactly as
        memories are at ingest. The state vector the write path kept is used when
        it is this very state's (the request did not override the state, no later
        write changed it)."""
        parts = state.digest_parts()
        conditioning: npt.NDArray[np.float32] | None = None
        if parts and kept is not None and kept.key == state_key(parts):
            stored = np.frombuffer(kept.vector, dtype=np.float32)
            if stored.shape == (self.embedder.dims,):
                conditioning = stored
        missing = parts if conditioning is None else ()
        texts = list(dict.fromkeys([text, *missing]))
        vectors = await self.embedder.embed_query(texts)
        canonical = vectors[0]
        if missing:
            by_text = {each: vectors[row] for row, each in enumerate(texts)}
            conditioning = state_vector(missing, by_text)
        eidolon = eidolon_vector(canonical, conditioning, state_weight=self.eidolon_weight)
        return canonical, eidolon

    async def reply_failure(self, message: InputMessage, reason: str) -> None:
        """Tell the caller its request could not be served (not its fault)."""
        failure = Rejection(reason, "the recall could not be served", None, None)
        await self.reply_rejection(message, failure)

    async def reply_rejection(self, message: InputMessage, rejection: Rejection) -> None:
        """Answer a rejected request with an error `RecallResultV1` (`replies.reply_error`)."""

        def payload(_data: Fields, correlation_id: str, error: str) -> bytes:
            return RecallResultV1(
                correlation_id=correlation_id,
                agent_id=rejection.agent_id or "",
                items=[],
                error=error,
            ).dumps_json()

        await reply_error(self, message, rejection, self.input_limits, payload)


DISABLED_MODE = "disabled"
MAX_CAUSAL_EDGES = 8


def _learning_policy(
    policy: RankingPolicy, config: AgentConfig, learned: LearnedWeights | None
) -> tuple[RankingPolicy, dict[str, object]]:
    """The rerank weights this agent's recall uses, and what `explain` says of them:
    the learned ones once it learned any (and has them switched on), else the
    static ones; causal utility's alpha, beta, gamma from its configuration."""
    base = replace(
        policy.weights,
        causal_alpha=config.causal_alpha,
        causal_beta=config.causal_beta,
        causal_gamma=config.causal_gamma,
    )
    if config.use_learned_weights:
        base = replace(base, outcome_bias=config.outcome_bias)
    if learned is not None and config.use_learned_weights:
        weights = rerank_weights(base, learned, causal=config.use_causal_scoring)
        source, updates = "learned", learned.updates
    else:
        weights, source, updates = base, "static", 0
    shown = {
        "relevance": 1.0 - weights.prior_share,
        **{
            name: getattr(weights, name) * weights.prior_share / _prior_total(weights)
            for name in LEARNED_FACTORS[1:]
        },
    }
    explained: dict[str, object] = {
        "source": source,
        "updates": updates,
        "weights": {name: round(value, 9) for name, value in shown.items()},
        "causal_scoring": config.use_causal_scoring,
        "outcome_bias": weights.outcome_bias,
    }
    evidence = replace(
        policy.evidence_first,
        evidence=replace(
            policy.evidence_first.evidence, exploration_bonus=config.exploration_bonus
        ),
    )
    return replace(policy, weights=weights, evidence_first=evidence), explained


def _prior_total(weights: RerankWeights) -> float:
    total = sum(getattr(weights, name) for name in LEARNED_FACTORS[1:]) + weights.affect
    return total if total > 0 else 1.0


def _empty(
    query: RecallQuery, watermark: int | None, state: FieldState, now_ms: int, mode: str
) -> RecallResultV1:
    """An answer with nothing in it: retrieval turned off (`disabled`), or a request
    for nothing the configuration lets it see (`none`)."""
    return RecallResultV1(
        correlation_id=query.correlation_id,
        agent_id=query.agent_id,
        items=[],
        watermark=watermark,
        watermark_tick=state.tick,
        watermark_block=state.block,
        as_of=now_ms,
        mode=mode,
        budget={"tokens_used": 0, "token_budget": query.budgets.token_budget, "items": 0,
                "max_items": query.budgets.max_items},
    )  # fmt: skip


def _configured(
    query: RecallQuery, policy: RankingPolicy, config: AgentConfig, now_ms: int
) -> tuple[RecallQuery, RankingPolicy] | None:
    """The request narrowed by the agent's configuration (never widened: a request
    may ask for less than the configuration allows, not more); None when it asks
    only for layers the configuration hides."""
    filters = query.filters
    if config.time_window_ms is not None:
        earliest = now_ms - config.time_window_ms
        if filters.since_ms is None or filters.since_ms < earliest:
            filters = replace(filters, since_ms=earliest)
    if config.layers is not None:
        allowed = set(config.layers)
        kept = (
            tuple(layer for layer in filters.layers if layer in allowed)
            if filters.layers
            else config.layers
        )
        if not kept:
            return None
        filters = replace(filters, layers=kept)
    if config.lane_weights is not None:
        weights = dict(policy.lane_weights) | dict(config.lane_weights)
        policy = replace(policy, lane_weights=tuple(sorted(weights.items())))
    return replace(query, filters=filters), policy


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
        evidence=evidence_summary(record, item.pooled),
        origin=_origin(record.provenance, record.source_event_id),
    )


def _origin(provenance: str, source_event_id: str) -> dict[str, str] | None:
    """Where a clade copy came from: the original's agent and memory id."""
    found = origin_of(source_event_id) if provenance == CLADE_PROVENANCE else None
    return {"agent_id": found[0], "memory_id": found[1]} if found else None


@dataclass(frozen=True, slots=True)
class BoundedReply:
    """A reply's wire bytes, at most the limit, and the ids of the items it carries."""

    payload: bytes
    item_ids: tuple[str, ...]
    truncated: bool


def bounded_reply(result: RecallResultV1, max_bytes: int) -> BoundedReply:
    """`result` as at most `max_bytes` of JSON, cut deterministically when over.

    A reply is one Kafka record and the producer refuses records over 1 MiB, so a
    reply that would not fit would fail the recall (and its retries) although the
    request is within every documented ceiling. Items are ranked, so the cut keeps
    a prefix: items are dropped from the tail while more than one is left; if the
    top item alone is still too big, every full `text` is dropped and as many items
    as then fit are kept. A cut reply says so in `budget`: `truncated` (1),
    `max_reply_bytes`, `dropped_items` and `dropped_texts`, with `items` the count
    sent. The cut depends only on the reply's bytes, so it is reproducible.
    """
    payload = result.dumps_json()
    if len(payload) <= max_bytes:
        return BoundedReply(payload, tuple(item.id for item in result.items), truncated=False)
    whole = list(result.items)
    stripped = [replace(item, text=None) for item in whole]
    for candidates, fewest, texts_dropped in ((whole, 1, False), (stripped, 0, True)):
        # orjson writes an item the same alone as in the list, so a prefix's size is
        # the envelope's plus its items' plus the commas between them.
        sizes = [0, *accumulate(len(orjson.dumps(item)) for item in candidates)]
        for kept in range(len(candidates), fewest - 1, -1):
            cut = _cut(result, candidates[:kept], max_bytes, texts_dropped=texts_dropped)
            envelope = len(replace(cut, items=[]).dumps_json())
            if envelope + sizes[kept] + max(kept - 1, 0) <= max_bytes:
                return BoundedReply(
                    cut.dumps_json(), tuple(item.id for item in cut.items), truncated=True
                )
    # Not even the envelope fits (a limit below a reply's own few hundred bytes):
    # send it without items rather than nothing.
    cut = _cut(result, [], max_bytes, texts_dropped=True)
    return BoundedReply(cut.dumps_json(), (), truncated=True)


def _cut(
    result: RecallResultV1, items: list[RecallItemV1], max_bytes: int, *, texts_dropped: bool
) -> RecallResultV1:
    kept = len(items)
    budget = dict(result.budget or {})
    budget.update(
        items=kept,
        truncated=1,
        max_reply_bytes=max_bytes,
        dropped_items=len(result.items) - kept,
        dropped_texts=(
            sum(1 for item in result.items[:kept] if item.text is not None) if texts_dropped else 0
        ),
    )
    return replace(result, items=items, budget=budget)
