"""The reference `AppliedMarks`: a dict with RedisAppliedMarks' forward-only rule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["InMemoryAppliedMarks"]


class InMemoryAppliedMarks:
    def __init__(self) -> None:
        self.marks: dict[tuple[int, str, int], int] = {}

    async def load(
        self, sources: Sequence[tuple[int, str, int]]
    ) -> dict[tuple[int, str, int], int]:
        return {s: self.marks[s] for s in sources if s in self.marks}

    async def advance(self, marks: Mapping[tuple[int, str, int], int]) -> None:
        for source, offset in marks.items():
            if offset > self.marks.get(source, -1):
                self.marks[source] = offset
