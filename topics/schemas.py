"""Versioned wire schemas. Producers (the SDK) build these; the worker validates raw
JSON with `grimoire.streams.inbound.events`, so a bad payload is dead-lettered instead of
crashing a deserializer. Field names here and there are pinned by a contract test.

Plain frozen dataclasses serialized with orjson: the SDK must install without Faust
(`pip install 'grimoire[client]'`), and nothing ever decoded through a Faust codec.

Tenant keys travel beside the records, as the `grimoire-api-key` Kafka header, on
every input (`grimoire.topics.client.API_KEY_HEADER`); the `api_key` field that a
recall request, a fact query and a command still accept is for producers that
cannot set headers (the field wins when both are there), and the worker strips it
from whatever it journals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Self

import orjson

__all__ = [
    "CladeMessageV1",
    "CommandV1",
    "DeadLetterV1",
    "EpisodeV1",
    "FactQueryV1",
    "FactResultV1",
    "FactV1",
    "MaintenanceCommandV1",
    "MaintenanceEventV1",
    "MemoryEventV1",
    "OutcomeV1",
    "RecallItemV1",
    "RecallRequestV1",
    "RecallResultV1",
    "ToolEventV1",
    "TranscriptV1",
    "WitnessEventV1",
]


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    # Declaration order is the JSON key order; cached because `fields()` is slow on
    # the ingest benchmark's hot path.
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


class _Wire:
    """Shared behaviour of the wire records (each subclass is a frozen dataclass)."""

    __slots__ = ()

    def asdict(self) -> dict[str, Any]:
        """Every field in declaration order, None included (as `faust.Record.asdict`)."""
        return {name: getattr(self, name) for name in _field_names(type(self))}

    def dumps_json(self) -> bytes:
        """The wire bytes: top-level None fields omitted, so an absent option means the
        worker's default. Nested records (a result's items) keep their None fields,
        byte for byte what the Faust records produced."""
        payload = {k: v for k, v in self.asdict().items() if v is not None}
        return orjson.dumps(payload)

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Self:
        """Build from a decoded JSON object; keys this version does not know are ignored
        so a newer worker can add fields. A missing required field raises TypeError."""
        names = _field_names(cls)
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeV1(_Wire):
    agent_id: str
    ts: int  # event time, epoch milliseconds
    text: str
    event_id: str | None = None
    episode_type: str = "observation"
    tick: int | None = None
    block: int | None = None
    outcome: str | None = None
    importance: float | None = None
    regime: str | None = None
    tags: list[str] | None = None
    run_id: str | None = None
    session_id: str | None = None
    actor_id: str | None = None
    kind: str | None = None  # episode (default) | warning | insight | heuristic | ...
    error: str | None = None
    paths: list[str] | None = None
    urls: list[str] | None = None
    channel: str | None = None
    entities: list[str] | None = None
    affect: dict[str, float] | None = None  # PAD in [-1, 1] and/or named drives in [0, 1]
    # Lineage (all optional): where the knowledge came from (self | clade |
    # predecessor | bloodstain | death_reflection | dream | dream_validated), how
    # time-sensitive it is (structural | regime_conditional | tactical | ephemeral;
    # absent: the kind's half-life), and a pin (never compacted or archived).
    provenance: str | None = None
    decay_class: str | None = None
    pinned: bool | None = None
    schema: str = "grimoire.episode/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolEventV1(_Wire):
    agent_id: str
    ts: int
    tool: str
    event_id: str | None = None
    args: dict[str, Any] | None = None
    args_digest: str | None = None
    result: str | None = None
    error: str | None = None
    paths: list[str] | None = None
    urls: list[str] | None = None
    latency_ms: float | None = None
    tick: int | None = None
    run_id: str | None = None
    session_id: str | None = None
    tags: list[str] | None = None
    actor_id: str | None = None
    channel: str | None = None
    entities: list[str] | None = None
    affect: dict[str, float] | None = None  # PAD in [-1, 1] and/or named drives in [0, 1]
    # Lineage (all optional): as on EpisodeV1.
    provenance: str | None = None
    decay_class: str | None = None
    pinned: bool | None = None
    schema: str = "grimoire.tool_event/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class TranscriptV1(_Wire):
    agent_id: str
    ts: int
    line: dict[str, Any]  # one JSONL message: {"role", "content": str | [blocks]}
    event_id: str | None = None
    session_id: str | None = None
    run_id: str | None = None
    tick: int | None = None
    turn_id: str | None = None  # groups the lines of one turn into one hyperedge
    actor_id: str | None = None
    tags: list[str] | None = None
    channel: str | None = None
    entities: list[str] | None = None
    affect: dict[str, float] | None = None  # PAD in [-1, 1] and/or named drives in [0, 1]
    # Lineage (all optional): as on EpisodeV1.
    provenance: str | None = None
    decay_class: str | None = None
    pinned: bool | None = None
    schema: str = "grimoire.transcript/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class OutcomeV1(_Wire):
    agent_id: str
    ts: int
    outcome: str  # positive | negative | validated | contradicted | run_ended
    memory_ids: list[str] | None = None
    run_id: str | None = None
    quality: float | None = None
    event_id: str | None = None
    schema: str = "grimoire.outcome/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class FactV1(_Wire):
    """A bi-temporal fact, keyed by agent id on `{prefix}.facts`: journaled like
    any input. It closes the agent's active fact with the same subject and
    predicate (its `valid_until` becomes this one's `valid_from`). `ts` is when the
    agent learned it (transaction time); `valid_from` the block it holds from.
    The object is an entity unless `object_is_entity` is false."""

    agent_id: str
    ts: int
    subject: str
    predicate: str
    object: str
    valid_from: int
    object_is_entity: bool | None = None
    event_id: str | None = None  # retract it with a `retract` command naming this id
    schema: str = "grimoire.fact/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class FactQueryV1(_Wire):
    """A read of an agent's facts on `{prefix}.fact-queries`, answered with a
    `FactResultV1` on `reply_to`. `query`: valid_at (`block`), as_known_at (`ts`,
    optionally `block`), neighbours (`entity`, `hops`, optionally `block`);
    `subject` and `predicate` narrow the first two."""

    agent_id: str
    query: str
    reply_to: str
    correlation_id: str
    block: int | None = None
    ts: int | None = None
    subject: str | None = None
    predicate: str | None = None
    entity: str | None = None
    hops: int | None = None
    api_key: str | None = None  # the tenant key; the SDK sends it as a header instead
    schema: str = "grimoire.fact_query/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class FactResultV1(_Wire):
    """The answer to a fact query: `facts` (each subject, predicate, object,
    object_is_entity, valid_from, valid_until, known_from, superseded_at, fact_id,
    source_event_id) or `neighbours` (entity, hops, via fact ids); `error` instead
    when the query was refused."""

    correlation_id: str
    agent_id: str
    query: str
    facts: list[dict[str, Any]] | None = None
    neighbours: list[dict[str, Any]] | None = None
    error: str | None = None
    schema: str = "grimoire.fact_result/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class MaintenanceCommandV1(_Wire):
    """Sent by the leader's block timer (or an operator) keyed by agent id, so the
    worker owning the agent's partition runs its maintenance. What runs is decided
    from the agent's tick counter on arrival, not from anything in the command but
    `force_compaction` (the "compact now" trigger)."""

    agent_id: str
    reason: str = "block"  # block | manual
    force_compaction: bool | None = None
    issued_by: str | None = None  # the emitting worker (informational)
    # The issuing worker's load when it sent the command (normal | throttled |
    # paused): part of the command, so what runs is decided from the journal alone.
    pressure: str | None = None
    schema: str = "grimoire.maintenance_command/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandV1(_Wire):
    """An operator's command, keyed by agent id on `{prefix}.commands`: journaled
    like any input and applied at its place in the agent's journal.

    retract: `source_event_id` and everything derived from it; forget: the whole
    agent (its memory, and its journal entries become unreadable); pin / unpin:
    `memory_id` (a pinned memory is never compacted or archived); configure:
    `config`, the agent's runtime settings, effective from its next event."""

    agent_id: str
    command: str  # retract | forget | pin | unpin | configure | import | publish | unpublish
    source_event_id: str | None = None
    memory_id: str | None = None
    # configure: the settings to change (memory_enabled, ingest_enabled,
    # retrieval_enabled, top_k, time_window_ms, layers, lane_weights; null resets one)
    config: dict[str, Any] | None = None
    # import: one chunk of an export (`grimoire import`; docs/export-format.md)
    import_chunk: dict[str, Any] | None = None
    # publish / unpublish: `memory_id` to (or from) this clade; none: every clade
    # the agent belongs to
    clade: str | None = None
    ts: int | None = None
    event_id: str | None = None
    # The tenant key (`gmk_…`) the command is sent with; checked, then stripped
    # before the command is journaled. The SDK moves it to the `grimoire-api-key`
    # header, which every input may carry.
    api_key: str | None = None
    schema: str = "grimoire.command/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class CladeMessageV1(_Wire):
    """What a worker sends an agent on behalf of its clade, keyed by the recipient
    on `{prefix}.clade` (the workers' topic) and journaled into its journal.

    share: a copy of the origin's memory `origin_memory_id` (`entry`: kind, text,
    confidence, counts, keys, situation edge, event type, ts), written or updated
    at the recipient with provenance `clade`; withdraw: the copy is removed;
    credit: the recipient is the origin, and a sibling's run that used the copy
    ended (`success`): clade evidence for the entry."""

    agent_id: str  # the recipient
    op: str  # share | withdraw | credit
    origin_agent_id: str
    origin_memory_id: str
    clade: str
    ts: int
    event_id: str
    entry: dict[str, Any] | None = None
    success: bool | None = None
    issued_by: str | None = None  # the worker that sent it
    schema: str = "grimoire.clade/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class MaintenanceEventV1(_Wire):
    """What a maintenance task did, on memory-events: GrimoireDecay,
    CuratorCycleComplete, GrimoireCompaction, GrimoireMaintenance (the run)."""

    type: str
    agent_id: str
    tick: int
    ts: int  # the event time the task ran "as of" (the agent's watermark)
    worker: str
    tasks: list[str] | None = None
    postponed: list[str] | None = None
    pressure: str | None = None
    report: dict[str, Any] | None = None
    schema: str = "grimoire.maintenance_event/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallRequestV1(_Wire):
    """A recall request; everything but the four first fields is optional.

    The SDK fills `filters`, `budgets` and `state` from the typed options in
    `grimoire.topics.options` (their `to_wire()`); here they stay the JSON objects
    the worker parses, so the wire format is spelled out in one place.

    `filters`: since / until (event time, ms or ISO-8601), session_id, run_id,
    actor_id, event_type_prefix, kinds [..], layers [..].
    `budgets`: canonical_k, eidolon_k, bm25_k, num_walkers, max_hops,
    max_keys_per_node, max_neighbors_per_key, max_total_candidates, max_items,
    token_budget, full_text_items (absent → configured defaults).
    `state`: digest [keys], regime, affect {pleasure, arousal, dominance, …},
    circuit (absent → the agent's current field state).
    `mode`: auto | none | light | semantic | full (Self-RAG style decision).
    """

    agent_id: str
    query: str
    reply_to: str
    correlation_id: str
    k: int | None = None  # shorthand for budgets.max_items
    as_of: int | None = None  # the request's event time; default: the agent's watermark
    filters: dict[str, Any] | None = None
    budgets: dict[str, Any] | None = None
    state: dict[str, Any] | None = None
    mode: str | None = None
    explain: bool | None = None
    expand_episodes: bool | None = None  # attach hyperedge siblings (with roles)
    record_usage: bool | None = None  # false: a read that leaves usage counters alone
    # the run the caller acts in: its run_ended outcome credits what this returned
    serving_run_id: str | None = None
    include_causal: bool | None = None  # attach each item's causal edges
    # The tenant key (`gmk_…`); the SDK sends it as the `grimoire-api-key` header.
    api_key: str | None = None
    schema: str = "grimoire.recall_request/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallItemV1(_Wire):
    id: str
    agent_id: str
    kind: str
    layer: str
    gist: str
    ts: int
    score: float
    lanes: list[str]  # the lanes and walk that brought it: canonical, eidolon, bm25, walk
    source_event_id: str
    text: str | None = None  # only the top `full_text_items` carry their full text
    reasons: list[str] | None = None  # the nexus keys that linked it (walk), then lanes
    scores: dict[str, float] | None = None  # per-factor breakdown when `explain`
    tokens: int | None = None
    session_id: str | None = None
    hyperedge_ids: list[str] | None = None
    episode: list[dict[str, str]] | None = None  # siblings {id, role, gist} on request
    # its causal edges on request: {cause, effect, weight, evidence, last_block}
    causal: list[dict[str, Any]] | None = None
    # an evidence entry's {situation, action, successes, failures, posterior_mean}
    evidence: dict[str, Any] | None = None
    # a copy shared by a clade sibling: {agent_id, memory_id} of the original
    origin: dict[str, str] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallResultV1(_Wire):
    correlation_id: str
    agent_id: str
    items: list[RecallItemV1]
    watermark: int | None = None  # latest event time ingested for the agent
    watermark_tick: int | None = None
    watermark_block: int | None = None
    as_of: int | None = None
    mode: str | None = None
    budget: dict[str, int] | None = None  # tokens_used, token_budget, items, max_items
    timings_ms: dict[str, float] | None = None
    error: str | None = None
    # with `explain`: the rerank weights used, {"source": learned | static,
    # "updates": runs learned from, "weights": {factor: weight}}
    learning: dict[str, Any] | None = None
    # with `explain`: the text the vector lanes embedded, the query without the
    # agent's actors it names (docs/recall.md, "The query without its actors")
    embedded_query: str | None = None
    schema: str = "grimoire.recall_result/1"

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Self:
        items = [RecallItemV1.from_wire(item) for item in data.get("items") or ()]
        names = _field_names(cls)
        return cls(**{k: v for k, v in data.items() if k in names and k != "items"}, items=items)


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryEventV1(_Wire):
    # GrimoireWrite | GrimoireQuarantine | GrimoireReject | GrimoireMerge | GrimoireAggregate
    type: str
    agent_id: str
    memory_id: str  # the record written, merged or aggregated into; the candidate's id if rejected
    source_event_id: str
    kind: str
    layer: str
    ts: int
    candidate_id: str | None = None
    action: str | None = None
    reason: str | None = None
    confidence: float | None = None
    quality: float | None = None
    admission: dict[str, float] | None = None  # composite and the five factors
    off_topic: bool | None = None
    target_id: str | None = None
    nexus_keys: list[str] | None = None
    hyperedge_id: str | None = None
    schema: str = "grimoire.memory_event/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class WitnessEventV1(_Wire):
    """One link of an agent's witness chain, on memory-events: what the apply loop
    changed for which journal entry, chained by hash to the link before (a
    consumer can keep its own copy of the chain and compare)."""

    agent_id: str
    seq: int
    journal_partition: int
    journal_offset: int
    op: str
    ids: list[str]
    fields_digest: str
    prev_hash: str
    hash: str
    type: str = "GrimoireWitness"
    schema: str = "grimoire.witness/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterV1(_Wire):
    reason: str  # machine-readable code, e.g. invalid_json, missing_field, oversize
    detail: str
    source_topic: str
    field: str | None = None
    agent_id: str | None = None
    partition: int | None = None
    offset: int | None = None
    payload: str | None = None  # the offending bytes, decoded leniently and truncated
    schema: str = "grimoire.dead_letter/1"
