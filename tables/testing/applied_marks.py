"""The reference `AppliedMarks`: a dict with RedisAppliedMarks' forward-only rule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["InMemoryAppliedMarks"]


class InMemoryAppliedMarks:
    def __init__(self) -> None:
        self.marks: dict[tuple[str, str, int], int] = {}

    async def load(
        self, sources: Sequence[tuple[str, str, int]]
    ) -> dict[tuple[str, str, int], int]:
        return {s: self.marks[s] for s in sources if s in self.marks}

    async def advance(self, marks: Mapping[tuple[str, str, int], int]) -> None:
        for source, offset in marks.items():
            if offset > self.marks.get(source, -1):
                self.marks[source] = offset

    async def forget(self, agent_id: str) -> int:
        mine = [source for source in self.marks if source[0] == agent_id]
        for source in mine:
            del self.marks[source]
        return len(mine)
