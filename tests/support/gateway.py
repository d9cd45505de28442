"""A recording stand-in for the SDK client where the HTTP API and the CLI send
through Kafka: what they sent is kept for assertions, and a recall answers the
items the test's subclass makes (`items`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grimoire.topics.client import RecallAnswer
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import CommandV1, RecallItemV1

T0 = 1_790_000_000_000


@dataclass
class RecordingGateway:
    topics: TopicNames = field(default_factory=lambda: TopicNames("gm"))
    recalls: list[dict[str, Any]] = field(default_factory=list)
    commands: list[CommandV1] = field(default_factory=list)
    maintenance: list[tuple[str, bool]] = field(default_factory=list)
    published: list[tuple[str, str, bytes]] = field(default_factory=list)
    # The key each publish went with (None: the gateway's own), by publish.
    published_keys: list[str | None] = field(default_factory=list)
    fail_with: Exception | None = None

    def items(self, agent_id: str, options: dict[str, Any]) -> tuple[RecallItemV1, ...]:
        raise NotImplementedError

    def answer(self, agent_id: str, items: tuple[RecallItemV1, ...]) -> RecallAnswer:
        return RecallAnswer(
            correlation_id="c-1",
            agent_id=agent_id,
            items=items,
            watermark=T0,
            timings_ms={"total": 12.5},
            budget={"items": len(items)},
        )

    async def recall(self, agent_id: str, query: str, **options: Any) -> RecallAnswer:
        self.recalls.append({"agent_id": agent_id, "query": query, **options})
        if self.fail_with is not None:
            raise self.fail_with
        return self.answer(agent_id, self.items(agent_id, options))

    async def send_command(self, command: CommandV1) -> None:
        self.commands.append(command)

    async def request_maintenance(self, agent_id: str, *, compact: bool = False) -> None:
        self.maintenance.append((agent_id, compact))

    async def publish_raw(
        self, topic: str, key: str, value: bytes, *, wait: bool = True, api_key: str | None = None
    ) -> None:
        self.published.append((topic, key, value))
        self.published_keys.append(api_key)
