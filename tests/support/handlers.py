"""The ingest, recall and outcome handlers (agents/handlers/) wired to one
``InMemoryMemoryStore``, a ``MemorySink`` and a counting ``FakeEmbedder``, with the
payloads and ``InputMessage``s they consume.

``seeded()`` is a rig after one ingest batch of five plain episodes: a1-a3 of agent-1
(``DISK``, ``CPU`` and a network partition) and b1-b2 of agent-2, all admitted, with
the sink emptied.
"""

from __future__ import annotations

from typing import Any

import orjson

from grimoire.agents.handlers.ingest import IngestHandler
from grimoire.agents.handlers.outcomes import OutcomeHandler
from grimoire.agents.handlers.recall import RecallHandler
from grimoire.agents.handlers.usage import StoreUsage
from grimoire.agents.ports import Embedder, InputMessage, MemorySink
from grimoire.streams.journal.entry import SourceRef
from grimoire.streams.journal.usage import RecallUsage
from grimoire.streams.model.ids import memory_id
from grimoire.streams.model.records import EventType
from grimoire.tables.ports.memory import MemoryStore
from grimoire.tables.testing.memory_store import InMemoryMemoryStore
from grimoire.topics.declarations import TopicNames

from .embedders import FakeEmbedder

TS = 1_767_225_600_000
TOPICS = TopicNames("grimoire")
REPLY_TO = "grimoire.replies.client-1"
DISK = "disk full on node seven"
CPU = "cpu load high on scheduler"


def episode(agent_id: str, text: str, ts: int, event_id: str | None = None, **extra: Any) -> bytes:
    """An episode payload; ``extra`` are further payload fields."""
    data: dict[str, Any] = {"agent_id": agent_id, "ts": ts, "text": text, **extra}
    if event_id is not None:
        data["event_id"] = event_id
    return orjson.dumps(data)


def messages(
    *values: bytes, topic: str = TOPICS.episodes, first_offset: int = 0
) -> list[InputMessage]:
    """The payloads as consecutive records of partition 2 of ``topic``."""
    return [
        InputMessage(value=v, topic=topic, partition=2, offset=first_offset + i)
        for i, v in enumerate(values)
    ]


def mid(agent: str, event: str, ts: int, part: int = 0) -> str:
    """The memory id of part ``part`` of an event."""
    return memory_id(agent, event, part, ts)


def recall_request(**fields: Any) -> InputMessage:
    """agent-1 asking "disk full node seven", replies on ``REPLY_TO``; ``fields`` override."""
    data: dict[str, Any] = {
        "agent_id": "agent-1",
        "query": "disk full node seven",
        "reply_to": REPLY_TO,
        "correlation_id": "corr-1",
        **fields,
    }
    return InputMessage(orjson.dumps(data), TOPICS.recall_requests, partition=0, offset=7)


def outcome(kind: str, memory_ids: list[str], ts: int, **extra: Any) -> InputMessage:
    """agent-1 reporting outcome ``kind`` for ``memory_ids``."""
    data = {"agent_id": "agent-1", "ts": ts, "outcome": kind, "memory_ids": memory_ids, **extra}
    return InputMessage(orjson.dumps(data), TOPICS.outcomes, partition=0, offset=1)


def command_message(payload: dict[str, Any], offset: int = 0) -> InputMessage:
    """A command ``payload`` as record ``offset`` of partition 0 of the commands topic."""
    return InputMessage(orjson.dumps(payload), TOPICS.commands, partition=0, offset=offset)


class RecordingUsage:
    """Applies a served recall's usage at once (as the journal's fold would, later)
    and keeps what was recorded, for assertions."""

    def __init__(self, rig: Rig) -> None:
        self._rig = rig

    async def record_usage(
        self, agent_id: str, usage: RecallUsage, source: SourceRef | None
    ) -> None:
        self._rig.recorded.append((agent_id, usage, source))
        await StoreUsage(self._rig.store).apply_usage(agent_id, usage)


class Rig:
    """The three handlers on one store and sink; ``fake`` embeds unless ``embedder`` is
    given (e.g. a ``CachingEmbedder`` around another ``FakeEmbedder``)."""

    def __init__(self, embedder: Embedder | None = None) -> None:
        self.store = InMemoryMemoryStore(dims=FakeEmbedder.dims)
        _as_protocol: MemoryStore = self.store  # must satisfy the Protocol
        self.fake = FakeEmbedder()
        self.embedder: Embedder = embedder if embedder is not None else self.fake
        self.sink = MemorySink()
        self.ingest = IngestHandler(self.store, self.embedder, self.sink, TOPICS)
        self.recorded: list[tuple[str, RecallUsage, SourceRef | None]] = []
        self.recall = RecallHandler(
            self.store, self.embedder, self.sink, TOPICS, usage=RecordingUsage(self)
        )
        self.outcomes = OutcomeHandler(self.store, self.sink, TOPICS)

    def on(self, topic: str) -> list[dict[str, Any]]:
        """What was sent to ``topic``, decoded."""
        return [orjson.loads(value) for value in self.sink.on(topic)]

    def events(self) -> list[dict[str, Any]]:
        """The memory events sent so far, decoded."""
        return self.on(TOPICS.memory_events)


async def seeded() -> Rig:
    """A rig holding a1-a3 (agent-1) and b1-b2 (agent-2), its sink emptied."""
    rig = Rig()
    await rig.ingest.handle(
        EventType.EPISODE,
        messages(
            episode("agent-1", DISK, TS, "a1"),
            episode("agent-1", CPU, TS + 1, "a2"),
            episode("agent-1", "network partition detected between zones", TS + 2, "a3"),
            episode("agent-2", DISK, TS + 3, "b1"),
            episode("agent-2", "backups exceeded quota limits", TS + 4, "b2"),
        ),
    )
    actions = [e["action"] for e in rig.events()]
    assert actions == ["admit"] * 5, actions  # a plain assert here: support is not rewritten
    rig.sink.sent.clear()
    return rig
