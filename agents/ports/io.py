"""What comes in and goes out of a handler: the consumed record (`InputMessage`), where
output goes (`EventSink`, `MemorySink` for tests and benchmarks), what turns text into
vectors (`Embedder`) and what records a served recall's uses (`UsageRecorder`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from grimoire.streams.journal.entry import SourceRef
from grimoire.streams.journal.usage import RecallUsage

__all__ = [
    "UNKNOWN_AGENT",
    "EmbedUsage",
    "Embedder",
    "EventSink",
    "InputMessage",
    "MemorySink",
    "UsageRecorder",
    "Vectors",
    "embed_with_usage",
    "payload_preview",
    "source_of",
]

UNKNOWN_AGENT = "_unknown"
_PAYLOAD_PREVIEW_CHARS = 4_096

Vectors = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class InputMessage:
    """One consumed record as a handler sees it, independent of Faust."""

    value: bytes
    topic: str
    partition: int | None = None
    offset: int | None = None
    # The record's Kafka headers (a tenant key may come as `grimoire-api-key`).
    headers: tuple[tuple[str, bytes], ...] = ()


def payload_preview(raw: bytes) -> str:
    return raw[: _PAYLOAD_PREVIEW_CHARS * 4].decode("utf-8", "replace")[:_PAYLOAD_PREVIEW_CHARS]


def source_of(message: InputMessage) -> SourceRef | None:
    """Where `message` was read from, when it was read from a topic."""
    if message.partition is None or message.offset is None:
        return None
    return SourceRef(message.topic, message.partition, message.offset)


class UsageRecorder(Protocol):
    """Records what a served recall used (a journal entry, applied by the fold)."""

    async def record_usage(
        self, agent_id: str, usage: RecallUsage, source: SourceRef | None
    ) -> None: ...


class EventSink(Protocol):
    async def send(
        self, topic: str, key: str, value: bytes, *, partition: int | None = None
    ) -> None:
        """Hand a message to the producer (it may still be buffered); to
        `partition` when given, else to the partition of `key`."""
        ...

    async def flush(self) -> None:
        """Return once everything sent so far is acknowledged by the broker."""
        ...


@dataclass
class MemorySink:
    """The in-memory `EventSink`: records what was sent, for tests and benchmarks."""

    sent: list[tuple[str, str, bytes]] = field(default_factory=list)
    # The partition each record of `sent` was sent to (None: left to its key).
    partitions: list[int | None] = field(default_factory=list)
    flushes: int = 0

    async def send(
        self, topic: str, key: str, value: bytes, *, partition: int | None = None
    ) -> None:
        self.sent.append((topic, key, value))
        self.partitions.append(partition)

    async def flush(self) -> None:
        self.flushes += 1

    def on(self, topic: str) -> list[bytes]:
        return [value for name, _, value in self.sent if name == topic]

    def as_consumed(self, topic: str) -> list[InputMessage]:
        """What was sent to `topic` as a consumer reads it back: each record at its
        partition, offsets in send order (the journal's apply loop, in process). A
        record sent without a partition has no place to be read from."""
        offsets: dict[int, int] = {}
        out: list[InputMessage] = []
        for (name, _, value), partition in zip(self.sent, self.partitions, strict=True):
            if name != topic:
                continue
            if partition is None:
                raise ValueError(f"a record sent to {topic} without its partition")
            offset = offsets.get(partition, 0)
            offsets[partition] = offset + 1
            out.append(InputMessage(value=value, topic=topic, partition=partition, offset=offset))
        return out


class Embedder(Protocol):
    dims: int
    # Names the space its vectors live in (model weights and precision): an
    # index holds one space, see `tables.schema.vector_space`.
    vector_space: str

    async def embed(self, texts: Sequence[str]) -> Vectors: ...

    async def embed_query(self, texts: Sequence[str]) -> Vectors:
        """`embed` for a caller waiting on the answer (a recall query): never
        queued behind bulk batches, so it may run beside one."""
        ...


@dataclass(frozen=True, slots=True)
class EmbedUsage:
    """What one embedding call cost. Ingest agents share one embedder concurrently,
    so usage is reported per call rather than read off shared counters."""

    hits: int = 0
    misses: int = 0
    model_calls: int = 0
    model_seconds: float = 0.0


async def embed_with_usage(embedder: Embedder, texts: Sequence[str]) -> tuple[Vectors, EmbedUsage]:
    measured = getattr(embedder, "embed_with_usage", None)
    if measured is not None:
        result: tuple[Vectors, EmbedUsage] = await measured(texts)
        return result
    vectors = await embedder.embed(texts)
    return vectors, EmbedUsage(misses=len(set(texts)), model_calls=1 if texts else 0)
