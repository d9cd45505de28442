"""What the retraction tests share: a witness callback that records each step, and the
swap tool's episodes embedded by the fake embedder the handlers use."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grimoire.streams.model.records import MemoryRecord

from .builders import memory_candidate, memory_record
from .embedders import FakeEmbedder


@dataclass
class Witness:
    """The retraction handler's witness callback: every step it reports, in order."""

    seen: list[tuple[str, tuple[str, ...], dict[str, Any]]] = field(default_factory=list)

    async def __call__(self, op: str, ids: Sequence[str], details: Mapping[str, object]) -> None:
        self.seen.append((op, tuple(ids), dict(details)))

    def ops(self) -> list[tuple[str, tuple[str, ...]]]:
        """The steps seen since the last call, without their details."""
        found = [(op, ids) for op, ids, _ in self.seen]
        self.seen.clear()
        return found


def swap_record(
    fake: FakeEmbedder, agent: str, event: str, text: str, ts: int, **fields: Any
) -> MemoryRecord:
    """An episode observation of the swap tool from source event ``event``, on both lanes
    the fake embedder's vector of its text; ``fields`` are further candidate fields."""
    candidate = memory_candidate(
        agent,
        event,
        text,
        ts=ts,
        tool="swap",
        **fields,
    )
    return memory_record(candidate, fake.vector(text))
