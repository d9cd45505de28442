"""The reference `KeyStore`: plain dicts with RedisKeyStore's semantics (one key per
agent created on first use, forget destroys them all and the next key gets a new id,
sequence blocks handed out by a counter that forget resets), for
tests without services. Run by the same contract suite as the Redis one
(tests/integration/test_keystore_contract.py)."""

from __future__ import annotations

from collections.abc import Mapping

from grimoire.streams.journal.entry import journal_name
from grimoire.tables.journal.keystore import AgentKey, new_key_id, new_secret

__all__ = ["InMemoryKeyStore"]


class InMemoryKeyStore:
    def __init__(self) -> None:
        # No await between a read and its write below: each call is atomic on the
        # event loop, as the Redis store's script and transactions are on the server.
        self._current: dict[str, str] = {}
        self._secrets: dict[str, dict[str, bytes]] = {}
        self._sequences: dict[str, int] = {}
        self._forgets = 0
        self._secret = new_secret()
        self._named: dict[str, str] = {}  # journal name -> agent

    async def key_for(self, agent_id: str) -> AgentKey:
        key_id = self._current.get(agent_id)
        if key_id is None:
            key_id = new_key_id()
            self._current[agent_id] = key_id
            self._secrets.setdefault(agent_id, {})[key_id] = new_secret()
        return AgentKey(agent_id, key_id, self._secrets[agent_id][key_id])

    async def key(self, agent_id: str, key_id: str) -> AgentKey | None:
        secret = self._secrets.get(agent_id, {}).get(key_id)
        return None if secret is None else AgentKey(agent_id, key_id, secret)

    async def forget(self, agent_id: str) -> int:
        self._current.pop(agent_id, None)
        self._sequences.pop(agent_id, None)
        self._forgets += 1
        self._named.pop(journal_name(self._secret, agent_id), None)
        return len(self._secrets.pop(agent_id, {}))

    async def forgets(self) -> int:
        return self._forgets

    async def journal_name(self, agent_id: str) -> str:
        name = journal_name(self._secret, agent_id)
        self._named[name] = agent_id
        return name

    async def agent_named(self, journal: str) -> str | None:
        return self._named.get(journal)

    async def has_key(self, agent_id: str) -> bool:
        return agent_id in self._current

    async def refresh(self) -> None:
        return None  # nothing cached here

    async def next_sequence(self, agent_id: str, count: int = 1) -> int:
        if count < 1:
            raise ValueError(f"a sequence block holds at least one number, not {count}")
        self._sequences[agent_id] = self._sequences.get(agent_id, 0) + count
        return self._sequences[agent_id]

    async def next_sequences(self, counts: Mapping[str, int]) -> dict[str, int]:
        if any(count < 1 for count in counts.values()):
            raise ValueError(f"a sequence block holds at least one number: {dict(counts)}")
        return {agent_id: await self.next_sequence(agent_id, n) for agent_id, n in counts.items()}
