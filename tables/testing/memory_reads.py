"""The in-memory read path (`InMemoryRecallReads`), as `RedisRecallReads` reads: what
recall reads beside its `RecallSource` (the `RecallReads` port), and the reads by
id, by lane and counts the rest of `MemoryStore` asks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from grimoire.streams.model.lexicon import LexicalForm
from grimoire.streams.write.changes import StateVector
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.memory_hash import RETURN_FIELDS, StoredMemory, stored_memory
from grimoire.tables.memory.reads import ScoredHit
from grimoire.tables.testing.memory_core import Hash, InMemoryMemoryConcern

__all__ = ["LANES", "InMemoryRecallReads"]

LANES = ("canonical", "eidolon")


class InMemoryRecallReads(InMemoryMemoryConcern):
    """Reads only: state vectors, watermarks and windows from the core's per-agent
    state, records from its hashes, searches by a scan of the agent's live ones."""

    async def state_vectors(self, agent_ids: Sequence[str]) -> dict[str, StateVector]:
        vectors = self.core.state_vectors
        return {a: vectors[a] for a in agent_ids if a in vectors}

    async def get_many(self, agent_id: str, ids: Sequence[str]) -> list[StoredMemory | None]:
        found: list[StoredMemory | None] = []
        for memory_id in ids:
            doc = self.core.records.get(memory_id)
            ok = doc is not None and text_of(doc.get("agent_id", "")) == agent_id
            found.append(_stored(doc) if doc is not None and ok else None)
        return found

    def _search(
        self, agent_id: str, vector: np.ndarray[Any, Any], lane: str, k: int
    ) -> list[tuple[float, Hash]]:
        if lane not in LANES:
            raise ValueError(f"unknown vector lane {lane!r}")
        scored = [
            (_cosine(vector, np.frombuffer(stored, dtype=np.float32)), doc)
            for doc in self.core.live(agent_id)
            if isinstance(stored := doc.get(lane), bytes) and stored  # absent: not in the lane
        ]
        scored.sort(key=lambda item: (-item[0], text_of(item[1]["memory_id"])))
        return scored[:k]

    async def knn(
        self, agent_id: str, vector: Sequence[float], k: int, *, lane: str = "canonical"
    ) -> list[ScoredHit]:
        query = np.asarray(vector, dtype=np.float32)
        return [ScoredHit(_stored(doc), s) for s, doc in self._search(agent_id, query, lane, k)]

    async def full_text(self, agent_id: str, terms: Sequence[str], k: int) -> list[ScoredHit]:
        """Any term may match; the score counts the distinct query terms a text contains."""
        wanted = set(terms)
        hits = []
        for doc in self.core.live(agent_id):
            matches = len(wanted & set(LexicalForm.parse(text_of(doc.get("lexical", ""))).words))
            if matches:
                hits.append(ScoredHit(_stored(doc), float(matches)))
        hits.sort(key=lambda hit: (-hit.score, hit.memory.id))
        return hits[:k]

    async def count(self, agent_id: str) -> int:
        """Every record of the agent, quarantined and deleted ones included (tenant filter)."""
        return sum(text_of(d.get("agent_id", "")) == agent_id for d in self.core.records.values())

    async def watermark(self, agent_id: str) -> int | None:
        return self.core.watermarks.get(agent_id)

    async def contrarian_served(self, agent_id: str) -> int | None:
        return self.core.contrarian.get(agent_id)

    async def actors_named(self, agent_id: str, candidates: Sequence[str]) -> frozenset[str]:
        return frozenset(self.core.actors.get(agent_id, set()).intersection(candidates))


def _cosine(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> float:
    norms = float(np.linalg.norm(a)) * float(np.linalg.norm(b))
    return float(np.dot(a.astype(np.float64), b.astype(np.float64))) / norms if norms else 0.0


def _stored(doc: Hash) -> StoredMemory:
    return stored_memory({name: doc[name] for name in RETURN_FIELDS if name in doc})
