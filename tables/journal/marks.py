"""How far the fold got in each agent's inputs from each source partition
(`Keyspace.applied_sources`).

Part of the fold itself: a replay into an empty store rebuilds the marks as it goes,
and skips the same re-journaled inputs the live run skipped. Marks only move
forward (a script compares before it writes), so a stale writer cannot reopen a
source range.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from redis.asyncio import Redis

from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.keyspace import Keyspace, glob_escape

__all__ = ["FORWARD_ONLY_HSET", "RedisAppliedMarks", "mark_field"]

_SEPARATOR = "|"

# ARGV: field, offset pairs; each field is set only when the offset is higher.
FORWARD_ONLY_HSET = """
for i = 1, #ARGV, 2 do
  local current = redis.call('HGET', KEYS[1], ARGV[i])
  if not current or tonumber(current) < tonumber(ARGV[i + 1]) then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return 1
"""


def mark_field(source: tuple[str, str, int]) -> str:
    agent_id, topic, partition = source
    return f"{agent_id}{_SEPARATOR}{topic}{_SEPARATOR}{partition}"


class RedisAppliedMarks:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._key = Keyspace(prefix).applied_sources
        self._advance = redis.register_script(FORWARD_ONLY_HSET)

    async def load(
        self, sources: Sequence[tuple[str, str, int]]
    ) -> dict[tuple[str, str, int], int]:
        if not sources:
            return {}
        values = await self._redis.hmget(self._key, [mark_field(s) for s in sources])
        return {
            source: int(text_of(value))
            for source, value in zip(sources, values, strict=True)
            if value is not None
        }

    async def advance(self, marks: Mapping[tuple[str, str, int], int]) -> None:
        if not marks:
            return
        args: list[str | int] = []
        for source, offset in sorted(marks.items()):
            args += [mark_field(source), offset]
        await self._advance(keys=[self._key], args=args)

    async def forget(self, agent_id: str) -> int:
        fields = [
            field
            async for field, _ in self._redis.hscan_iter(
                self._key, match=f"{glob_escape(agent_id)}{_SEPARATOR}*", count=1000
            )
        ]
        # The pattern's `*` may cross a separator: keep the fields naming the agent.
        mine = [f for f in fields if text_of(f).split(_SEPARATOR, 1)[0] == agent_id]
        if mine:
            await self._redis.hdel(self._key, *mine)
        return len(mine)
