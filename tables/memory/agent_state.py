"""Small per-agent state in Redis: field state, decision markers, stats.

Each agent's state is written only by the worker that owns the agent's
partition, so read-modify-write within one batch is safe.

{prefix}:field:{agent}     STRING field state (JSON)
{prefix}:decided:{agent}   HASH candidate id → admission action (makes redelivery a no-op)
{prefix}:stats:{agent}     HASH counter → value
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from grimoire.streams.model.field_state import FieldState
from grimoire.streams.write.changes import StateVector
from grimoire.tables.codec.field_state import field_from_json, field_to_json
from grimoire.tables.codec.state_vector import state_vector_fields, state_vector_from_hash
from grimoire.tables.keyspace import Keyspace


@dataclass(frozen=True, slots=True)
class AgentStats:
    """An agent's write-path counters and what the control surface derives from them."""

    candidates: int = 0
    admitted: int = 0
    quarantined: int = 0
    rejected: int = 0
    merged: int = 0
    aggregated: int = 0
    off_topic: int = 0
    quality_sum: float = 0.0

    @classmethod
    def from_counters(cls, counters: Mapping[str, float]) -> AgentStats:
        return cls(
            candidates=int(counters.get("candidates", 0)),
            admitted=int(counters.get("admit", 0)),
            quarantined=int(counters.get("quarantine", 0)),
            rejected=int(counters.get("reject", 0)),
            merged=int(counters.get("merge", 0)),
            aggregated=int(counters.get("aggregate", 0)),
            off_topic=int(counters.get("off_topic", 0)),
            quality_sum=float(counters.get("quality_sum", 0.0)),
        )

    @property
    def stored(self) -> int:
        return self.admitted + self.quarantined

    @property
    def admission_rate(self) -> float:
        return self.stored / self.candidates if self.candidates else 0.0

    @property
    def average_quality(self) -> float:
        return self.quality_sum / self.stored if self.stored else 0.0


class AgentStateStore:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._keys = Keyspace(prefix)

    def decided_key(self, agent_id: str) -> str:
        return self._keys.decided(agent_id)

    def stats_key(self, agent_id: str) -> str:
        return self._keys.stats(agent_id)

    async def load_fields(self, agent_ids: Sequence[str]) -> dict[str, FieldState]:
        raws = await self._read_each(
            agent_ids, lambda pipe, agent_id: pipe.get(self._keys.field_state(agent_id))
        )
        return {
            agent_id: field_from_json(agent_id, raw)
            for agent_id, raw in zip(agent_ids, raws, strict=True)
        }

    async def _read_each(
        self, agent_ids: Sequence[str], read: Callable[[Any, str], object]
    ) -> list[Any]:
        """One read per agent, `read(pipe, agent_id)` queued on one pipeline; the
        replies in the order of `agent_ids`."""
        if not agent_ids:
            return []
        # One key per agent (its own slot on a cluster): a pipeline, split by master.
        async with self._redis.pipeline(transaction=False) as pipe:
            for agent_id in agent_ids:
                read(pipe, agent_id)
            return list(await pipe.execute())

    async def field(self, agent_id: str) -> FieldState:
        return (await self.load_fields([agent_id]))[agent_id]

    def save_field(self, pipe: Any, state: FieldState) -> None:
        pipe.set(self._keys.field_state(state.agent_id), field_to_json(state))

    def save_state_vector(self, pipe: Any, state: StateVector) -> None:
        # Replaced whole: a hash written by older code keeps no field of its own
        # (the state vectors of before 2026-11-27 named their state in `digest`).
        key = self._keys.state_vector(state.agent_id)
        pipe.delete(key)
        pipe.hset(key, mapping=state_vector_fields(state))

    async def state_vectors(self, agent_ids: Sequence[str]) -> dict[str, StateVector]:
        """The agents' stored state vectors (an agent without one is left out)."""
        raws = await self._read_each(
            agent_ids, lambda pipe, agent_id: pipe.hgetall(self._keys.state_vector(agent_id))
        )
        found = {}
        for agent_id, raw in zip(agent_ids, raws, strict=True):
            state = state_vector_from_hash(agent_id, raw)
            if state is not None:
                found[agent_id] = state
        return found

    def record_decisions(self, pipe: Any, agent_id: str, actions: Mapping[str, str]) -> None:
        """The batch's decisions of one agent (candidate id -> action), one command."""
        if actions:
            pipe.hset(self.decided_key(agent_id), mapping=dict(actions))

    def count(self, pipe: Any, agent_id: str, counters: Sequence[tuple[str, float]]) -> None:
        """Each increment in order (a name may repeat: fractional amounts are added
        one by one, so the total does not depend on how they were batched)."""
        key = self.stats_key(agent_id)
        for name, amount in counters:
            if isinstance(amount, int):
                pipe.hincrby(key, name, amount)
            else:
                pipe.hincrbyfloat(key, name, amount)

    async def stats(self, agent_id: str) -> dict[str, float]:
        raw = await self._redis.hgetall(self.stats_key(agent_id))
        return {_s(k): float(_s(v)) for k, v in raw.items()}


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
