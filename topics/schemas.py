"""Versioned wire schemas. Producers (the SDK) build these; the worker validates raw
JSON with `grimoire.streams.normalize`, so a bad payload is dead-lettered instead of
crashing a deserializer. Field names here and there are pinned by a contract test.
"""

from __future__ import annotations

from typing import Any, Optional

import faust


class _Wire(faust.Record, abstract=True, serializer="json", include_metadata=False):
    def dumps_json(self) -> bytes:
        payload = {k: v for k, v in self.asdict().items() if v is not None}
        return faust.serializers.codecs.dumps("json", payload)


class EpisodeV1(_Wire, namespace="grimoire.episode.v1"):
    agent_id: str
    ts: int  # event time, epoch milliseconds
    text: str
    event_id: Optional[str] = None
    episode_type: str = "observation"
    tick: Optional[int] = None
    block: Optional[int] = None
    outcome: Optional[str] = None
    importance: Optional[float] = None
    regime: Optional[str] = None
    tags: Optional[list[str]] = None
    run_id: Optional[str] = None
    session_id: Optional[str] = None
    actor_id: Optional[str] = None
    schema: str = "grimoire.episode/1"


class ToolEventV1(_Wire, namespace="grimoire.tool_event.v1"):
    agent_id: str
    ts: int
    tool: str
    event_id: Optional[str] = None
    args: Optional[dict[str, Any]] = None
    args_digest: Optional[str] = None
    result: Optional[str] = None
    error: Optional[str] = None
    paths: Optional[list[str]] = None
    urls: Optional[list[str]] = None
    latency_ms: Optional[float] = None
    tick: Optional[int] = None
    run_id: Optional[str] = None
    session_id: Optional[str] = None
    tags: Optional[list[str]] = None
    schema: str = "grimoire.tool_event/1"


class TranscriptV1(_Wire, namespace="grimoire.transcript.v1"):
    agent_id: str
    ts: int
    line: dict[str, Any]  # one JSONL message: {"role", "content": str | [blocks]}
    event_id: Optional[str] = None
    session_id: Optional[str] = None
    run_id: Optional[str] = None
    tick: Optional[int] = None
    schema: str = "grimoire.transcript/1"


class OutcomeV1(_Wire, namespace="grimoire.outcome.v1"):
    agent_id: str
    ts: int
    outcome: str  # positive | negative | validated | contradicted | run_ended
    memory_ids: Optional[list[str]] = None
    run_id: Optional[str] = None
    quality: Optional[float] = None
    event_id: Optional[str] = None
    schema: str = "grimoire.outcome/1"


class RecallRequestV1(_Wire, namespace="grimoire.recall_request.v1"):
    agent_id: str
    query: str
    reply_to: str
    correlation_id: str
    k: Optional[int] = None
    as_of: Optional[int] = None
    schema: str = "grimoire.recall_request/1"


class RecallItemV1(_Wire, namespace="grimoire.recall_item.v1"):
    id: str
    agent_id: str
    kind: str
    layer: str
    text: str
    ts: int
    score: float
    lanes: list[str]
    source_event_id: str


class RecallResultV1(_Wire, namespace="grimoire.recall_result.v1"):
    correlation_id: str
    agent_id: str
    items: list[RecallItemV1]
    watermark: Optional[int] = None
    timings_ms: Optional[dict[str, float]] = None
    error: Optional[str] = None
    schema: str = "grimoire.recall_result/1"


class MemoryEventV1(_Wire, namespace="grimoire.memory_event.v1"):
    type: str  # GrimoireWrite | GrimoireDuplicate
    agent_id: str
    memory_id: str
    source_event_id: str
    kind: str
    layer: str
    ts: int
    schema: str = "grimoire.memory_event/1"


class DeadLetterV1(_Wire, namespace="grimoire.dead_letter.v1"):
    reason: str  # machine-readable code, e.g. invalid_json, missing_field, oversize
    detail: str
    source_topic: str
    field: Optional[str] = None
    agent_id: Optional[str] = None
    partition: Optional[int] = None
    offset: Optional[int] = None
    payload: Optional[str] = None  # the offending bytes, decoded leniently and truncated
    schema: str = "grimoire.dead_letter/1"
