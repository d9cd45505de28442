"""Per-agent journal keys (crypto-shredding) and per-agent journal sequence numbers.

The sequencing stage seals every journal payload with its agent's own key; forgetting
an agent destroys the key, and with it every entry the journal still holds for that
agent, wherever the log has been copied. So the keys live outside the fold: a wipe
of the memory state (rebuild, replay) keeps them (`Keyspace.is_keystore_key`), and
they may sit in a Redis of their own (`GRIMOIRE_KEYSTORE_URL`). The per-agent
journal sequence counter lives here for the same reason: a replay that wiped it
would hand out positions the journal already holds.

Keys are not decisions: they are random, never part of the fold or of a digest.

Keys (built by `grimoire.tables.keyspace.Keyspace`):
  `{prefix}:keystore:agent:{agent}`  hash: `current` -> key id, `k:<key id>` -> 32-byte secret
  `{prefix}:keystore:journal-seq`    hash: agent -> last sequence number handed out

`KeyStore` is the protocol, `RedisKeyStore` the Redis implementation,
`grimoire.tables.testing.keystore.InMemoryKeyStore` the reference one, and
`CachedKeyStore` a bounded per-worker cache in front of either.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from grimoire.streams.journal.entry import journal_name
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.ports.journal import KeyStore
from grimoire.tables.transaction import key_transaction

__all__ = [
    "KEY_BYTES",
    "AgentKey",
    "CachedKeyStore",
    "RedisKeyStore",
    "new_key_id",
    "new_secret",
]

logger = logging.getLogger(__name__)

#: AES-256: the secret's length in bytes.
KEY_BYTES: Final = 32
# A secret's field in the agent's hash (the script below spells it too).
_SECRET_FIELD: Final = "k:"


@dataclass(frozen=True, slots=True)
class AgentKey:
    """One of an agent's journal keys. `key_id` names it in every entry it sealed;
    the secret never appears in a repr (logs, tracebacks, test reports)."""

    agent_id: str
    key_id: str
    secret: bytes = field(repr=False)


def new_key_id() -> str:
    """A fresh key id: random, so an agent id reused after a forget never meets an
    id its old entries carry (64 bits: ids only need to differ within one agent)."""
    return secrets.token_hex(8)


def new_secret() -> bytes:
    return os.urandom(KEY_BYTES)


def _check_count(count: int) -> None:
    if count < 1:
        raise ValueError(f"a sequence block holds at least one number, not {count}")


# Create the agent's key unless it has one, then read back whichever won: one round
# trip, atomic, so two workers never create two keys.
_KEY_FOR = """
local created = 0
if redis.call('HSETNX', KEYS[1], 'current', ARGV[1]) == 1 then
  redis.call('HSET', KEYS[1], 'k:' .. ARGV[1], ARGV[2])
  created = 1
end
local current = redis.call('HGET', KEYS[1], 'current')
return {current, redis.call('HGET', KEYS[1], 'k:' .. current), created}
"""
# How long a new key waits for the append-only file to hold it (ms).
_KEY_FSYNC_WAIT_MS: Final = 2_000


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _secret(value: bytes | str) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError("the key store needs a Redis client without decode_responses")
    return value


class RedisKeyStore:
    """`KeyStore` in Redis: a hash per agent for its keys, one hash of sequence
    counters (HINCRBY). Give it the key-store Redis (`GRIMOIRE_KEYSTORE_URL`, by
    default the memory Redis), created without `decode_responses`: secrets are bytes."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._keys = Keyspace(prefix)
        self._key_for = redis.register_script(_KEY_FOR)
        self._secret: bytes | None = None

    async def _journal_secret(self) -> bytes:
        if self._secret is None:
            name = self._keys.journal_secret
            if await self._redis.set(name, new_secret(), nx=True):
                await self._wait_fsynced(name)
            self._secret = _secret(await self._redis.get(name))
        return self._secret

    async def journal_name(self, agent_id: str) -> str:
        name = journal_name(await self._journal_secret(), agent_id)
        # Recorded each time (idempotent): the mapping is what lets the fold read
        # the agent's entries back, and it must exist before the first of them.
        await self._redis.hset(self._keys.journal_names, name, agent_id)  # type: ignore[misc]
        return name

    async def agent_named(self, journal: str) -> str | None:
        raw = await self._redis.hget(self._keys.journal_names, journal)  # type: ignore[misc]
        return None if raw is None else _text(raw)

    async def has_key(self, agent_id: str) -> bool:
        return bool(await self._redis.hexists(self._keys.agent_keys(agent_id), "current"))  # type: ignore[misc]

    async def key_for(self, agent_id: str) -> AgentKey:
        name = self._keys.agent_keys(agent_id)
        key_id, secret, created = await self._key_for(
            keys=[name], args=[new_key_id(), new_secret()]
        )
        if created:
            await self._wait_fsynced(name)
        return AgentKey(agent_id, _text(key_id), _secret(secret))

    async def _wait_fsynced(self, name: str) -> None:
        """A new key is on disk before anything is sealed with it: a Redis that
        lost its last second of writes (fsync every second, then a machine crash)
        would otherwise have shredded the entries sealed in that second. Rare (once
        per agent), so the wait (up to the next fsync) costs nothing that counts.
        Without an append-only file there is nothing to wait for."""
        try:
            await self._redis.execute_command("WAITAOF", 1, 0, _KEY_FSYNC_WAIT_MS)
        except ResponseError as exc:
            logger.debug("no append-only file to wait for (%s): key %s", exc, name)

    async def key(self, agent_id: str, key_id: str) -> AgentKey | None:
        secret = await self._redis.hget(self._keys.agent_keys(agent_id), _SECRET_FIELD + key_id)
        return None if secret is None else AgentKey(agent_id, key_id, _secret(secret))

    async def forget(self, agent_id: str) -> int:
        # One transaction: a key created between the count and the delete would
        # otherwise survive uncounted, or be destroyed uncounted. The sequence
        # counter is another key (another slot on a cluster), reset after: a crash
        # in between leaves it counting on, which costs nothing (numbers only
        # have to grow), while the keys are gone either way.
        name = self._keys.agent_keys(agent_id)
        async with key_transaction(self._redis, name) as pipe:
            pipe.hkeys(name)
            pipe.delete(name)
            fields, _ = await pipe.execute()
        await self._redis.hdel(self._keys.journal_sequences, agent_id)
        await self._redis.hdel(  # type: ignore[misc]
            self._keys.journal_names, journal_name(await self._journal_secret(), agent_id)
        )
        # After the keys are gone: a cache that sees the count move and fetches again
        # finds them gone. A crash before this runs the forget again (its command is
        # not marked applied), and the count moves then.
        await self._redis.incr(self._keys.keystore_forgets)
        destroyed = sum(1 for f in fields if _text(f).startswith(_SECRET_FIELD))
        logger.info("forgot agent %s: %d journal key(s) destroyed", agent_id, destroyed)
        return destroyed

    async def forgets(self) -> int:
        raw = await self._redis.get(self._keys.keystore_forgets)
        return 0 if raw is None else int(raw)

    async def refresh(self) -> None:
        return None  # nothing cached here

    async def next_sequence(self, agent_id: str, count: int = 1) -> int:
        _check_count(count)
        return int(await self._redis.hincrby(self._keys.journal_sequences, agent_id, count))

    async def next_sequences(self, counts: Mapping[str, int]) -> dict[str, int]:
        for count in counts.values():
            _check_count(count)
        if not counts:
            return {}
        # Each HINCRBY is atomic on its own: the blocks never overlap, and a
        # pipeline is one round trip for a batch holding many agents' inputs.
        async with self._redis.pipeline(transaction=False) as pipe:
            for agent_id, count in counts.items():
                pipe.hincrby(self._keys.journal_sequences, agent_id, count)
            lasts = await pipe.execute()
        return {agent_id: int(last) for agent_id, last in zip(counts, lasts, strict=True)}


class CachedKeyStore:
    """A bounded, per-worker cache in front of a `KeyStore`: sealing and opening
    need a key per entry, the store a round trip per key.

    Only keys are cached (never an absence, never sequence numbers), least recently
    used first out. `forget` through this cache drops the agent's keys from it, and
    a key fetched while any invalidation was under way is not cached (an epoch
    guards the await). A forget run by another worker is seen at the next `refresh`
    (the sequencer's and the apply loop's batches, each recall's usage begin with
    one): the store's count of forgets has moved, and the whole cache is dropped
    (forgets are rare; a key of a forgotten agent must not seal or open anything)."""

    def __init__(self, store: KeyStore, *, max_keys: int = 10_000) -> None:
        if max_keys < 1:
            raise ValueError("the key cache holds at least one key")
        self._store = store
        self._max_keys = max_keys
        self._keys: OrderedDict[tuple[str, str], AgentKey] = OrderedDict()
        self._current: dict[str, str] = {}  # agent -> key id of its current key
        self._epoch = 0
        self._forgets: int | None = None  # the store's count when last refreshed
        self._names: dict[str, str] = {}  # agent -> journal name
        self._agents: dict[str, str] = {}  # journal name -> agent

    def __len__(self) -> int:
        return len(self._keys)

    async def key_for(self, agent_id: str) -> AgentKey:
        key_id = self._current.get(agent_id)
        if key_id is not None:
            return self._hit((agent_id, key_id))
        epoch = self._epoch
        key = await self._store.key_for(agent_id)
        if self._epoch == epoch:
            self._remember(key)
            self._current[agent_id] = key.key_id
        return key

    async def key(self, agent_id: str, key_id: str) -> AgentKey | None:
        if (agent_id, key_id) in self._keys:
            return self._hit((agent_id, key_id))
        epoch = self._epoch
        key = await self._store.key(agent_id, key_id)
        if key is not None and self._epoch == epoch:
            self._remember(key)
        return key

    async def forget(self, agent_id: str) -> int:
        self.invalidate(agent_id)
        try:
            return await self._store.forget(agent_id)
        finally:
            # Again: a lookup may have cached the key while the forget was awaited.
            self.invalidate(agent_id)

    async def journal_name(self, agent_id: str) -> str:
        name = self._names.get(agent_id)
        if name is None:
            epoch = self._epoch
            name = await self._store.journal_name(agent_id)
            if self._epoch == epoch:
                self._remember_name(agent_id, name)
        return name

    async def agent_named(self, journal: str) -> str | None:
        agent_id = self._agents.get(journal)
        if agent_id is None:
            epoch = self._epoch
            agent_id = await self._store.agent_named(journal)
            if agent_id is not None and self._epoch == epoch:
                self._remember_name(agent_id, journal)
        return agent_id

    async def has_key(self, agent_id: str) -> bool:
        return agent_id in self._current or await self._store.has_key(agent_id)

    def _remember_name(self, agent_id: str, journal: str) -> None:
        if len(self._names) >= self._max_keys:
            self._names.clear()
            self._agents.clear()
        self._names[agent_id] = journal
        self._agents[journal] = agent_id

    async def forgets(self) -> int:
        return await self._store.forgets()

    async def refresh(self) -> None:
        seen = await self._store.forgets()
        if seen != self._forgets:
            if self._forgets is not None:
                logger.info("a forget ran elsewhere (%d so far): key cache dropped", seen)
            self._epoch += 1
            self._keys.clear()
            self._current.clear()
            self._names.clear()
            self._agents.clear()
            self._forgets = seen

    async def next_sequence(self, agent_id: str, count: int = 1) -> int:
        return await self._store.next_sequence(agent_id, count)

    async def next_sequences(self, counts: Mapping[str, int]) -> dict[str, int]:
        return await self._store.next_sequences(counts)

    def invalidate(self, agent_id: str) -> None:
        """Drop every cached key of the agent (it was forgotten, here or elsewhere)."""
        self._epoch += 1
        self._current.pop(agent_id, None)
        for cached in [k for k in self._keys if k[0] == agent_id]:
            del self._keys[cached]
        name = self._names.pop(agent_id, None)
        if name is not None:
            self._agents.pop(name, None)

    def _hit(self, name: tuple[str, str]) -> AgentKey:
        self._keys.move_to_end(name)
        return self._keys[name]

    def _remember(self, key: AgentKey) -> None:
        self._keys[(key.agent_id, key.key_id)] = key
        self._keys.move_to_end((key.agent_id, key.key_id))
        while len(self._keys) > self._max_keys:
            (agent_id, key_id), _ = self._keys.popitem(last=False)
            if self._current.get(agent_id) == key_id:
                del self._current[agent_id]
