"""Where handlers send their output: a Protocol, so handlers run against Kafka in
the worker and against an in-memory list in unit tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class EventSink(Protocol):
    async def send(self, topic: str, key: str, value: bytes) -> None: ...


@dataclass
class MemorySink:
    sent: list[tuple[str, str, bytes]] = field(default_factory=list)

    async def send(self, topic: str, key: str, value: bytes) -> None:
        self.sent.append((topic, key, value))

    def on(self, topic: str) -> list[bytes]:
        return [value for name, _, value in self.sent if name == topic]
