"""What an entry's witness record will say, stored with the entry's effects.

The apply loop witnesses an outcome or a fact after the store committed its
effects. A worker killed (or a Redis connection dropped) in between leaves the
effects applied and the chain without their record; the retry finds the outcome
or the fact applied before and, without this, would witness nothing, so the chain
would differ from a run without the crash. The store therefore writes the record's
content (`WitnessDue`) in the same transaction as the effects, naming the journal
entry it belongs to; the retry of that very entry, finding its chain short of it,
records what is due. One value per agent: the agent's entries are applied one
after another, so only the last can be due.

The in-memory stores write none: they lose their state with the process, so
there is no crash after which a record could be due.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis

from grimoire.tables.keyspace import Keyspace

__all__ = [
    "NoWitnessDue",
    "RedisWitnessDue",
    "WitnessDue",
    "changed_count_template",
]


@dataclass(frozen=True, slots=True)
class WitnessDue:
    """The witness record (ids, fields) of the entry at `journal`."""

    journal: tuple[int, int]
    ids: tuple[str, ...]
    fields: Any

    def encode(self) -> bytes:
        return orjson.dumps(
            {"journal": list(self.journal), "ids": list(self.ids), "fields": self.fields},
            option=orjson.OPT_SORT_KEYS,
        )

    @classmethod
    def decode(cls, raw: bytes | str) -> WitnessDue | None:
        """None for bytes that are no record (a store left something else)."""
        try:
            data = orjson.loads(raw)
            partition, offset = data["journal"]
            return cls((int(partition), int(offset)), tuple(data["ids"]), data["fields"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None


def changed_count_template(journal: tuple[int, int]) -> tuple[str, str]:
    """The text of an outcome's record around its count of changed memories, which
    only the script applying it knows: prefix + count + suffix is a `WitnessDue`
    with fields {"changed": count}."""
    partition, offset = journal
    return '{"fields":{"changed":', f'}},"ids":[],"journal":[{partition},{offset}]}}'


class RedisWitnessDue:
    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._keys = Keyspace(prefix)

    async def due(self, agent_id: str) -> WitnessDue | None:
        raw = await self._redis.get(self._keys.witness_due(agent_id))
        return None if raw is None else WitnessDue.decode(raw)


class NoWitnessDue:
    """For stores without transactions (see the module docstring)."""

    async def due(self, agent_id: str) -> WitnessDue | None:
        return None
