"""The ports of trust: tenant API keys, refusal counts, derivations, the witness log.

Authentication reads tenant keys through `ApiKeyStore` and counts refusals
through `AuthMetrics`; retraction and pinning walk and rewrite the derivation
index through `DerivationStore`; an audit reads each agent's hash-chained
records through `WitnessLog`. The values they carry are `grimoire.streams.trust`'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from grimoire.streams.trust.retraction import DerivedNode, Edge, RetractionPlan
from grimoire.streams.trust.tenancy import ApiKeyRecord, AuthDecision, TenantScope
from grimoire.streams.trust.witness import WitnessRecord

__all__ = ["ApiKeyStore", "AuthMetrics", "DerivationStore", "WitnessLog"]


class ApiKeyStore(Protocol):
    async def create(
        self, scope: TenantScope, label: str, *, now_ms: int
    ) -> tuple[ApiKeyRecord, str]:
        """Store a new key; returns its record and the token (shown once, never stored)."""
        ...

    async def get(self, key_id: str) -> ApiKeyRecord | None:
        """A key by id, revoked ones included; None for an id never created."""
        ...

    async def revoke(self, key_id: str) -> bool:
        """Mark a key revoked (kept, so listings still show it); False for an unknown
        id. Revoking twice is harmless and answers True again."""
        ...

    async def list(self) -> list[ApiKeyRecord]:
        """Every key, revoked ones included, oldest first (then by id)."""
        ...


class AuthMetrics(Protocol):
    async def refused(self, decision: AuthDecision, surface: str) -> None:
        """Count one refused request."""
        ...


class DerivationStore(Protocol):
    """The derivation index of each agent, and the writes a retraction or a pin
    makes. Every read and write is scoped to `agent_id`: another agent's memory
    is never read as a node, never retracted and never pinned."""

    async def derived_from(self, agent_id: str, source_ids: Sequence[str]) -> list[Edge]:
        """The edges out of these sources, sorted."""
        ...

    async def sources_of(self, agent_id: str, derived_ids: Sequence[str]) -> list[Edge]:
        """The edges into these memories, sorted."""
        ...

    async def add(self, agent_id: str, edges: Sequence[Edge]) -> None:
        """Record edges outside a writer's own step (share roles add up)."""
        ...

    async def nodes(self, agent_id: str, memory_ids: Sequence[str]) -> dict[str, DerivedNode]:
        """The agent's memories among these ids, as the retraction planner reads them
        (a curated entry with its bookkeeping); other ids are left out."""
        ...

    async def degrees(self, agent_id: str, keys: Sequence[str]) -> dict[str, int]:
        """How many memories of the agent carry each nexus key."""
        ...

    async def apply(
        self,
        agent_id: str,
        plan: RetractionPlan,
        vectors: Mapping[str, bytes],
        *,
        at_ms: int,
        playbook: str | None = None,
    ) -> None:
        """Apply a planned retraction in one step: each retracted memory marked
        (`retracted`, `deleted`, no summary link) and taken out of the nexus index,
        its hyperedges, the walk's node table, the term counts (when the write
        path counted it) and the curator's bookkeeping; aggregate counts and
        reinforcement counters lowered; summaries rewritten with `vectors`
        (summary id -> float32 bytes) and re-linked; curated entries demoted;
        the plan's dropped edges removed; PLAYBOOK.md replaced when given.
        Raises ValueError, writing nothing, when a rebuilt summary has no vector."""
        ...

    async def set_pinned(self, agent_id: str, memory_id: str, pinned: bool) -> bool:
        """Pin or unpin one of the agent's memories; False when it has none by that id."""
        ...


class WitnessLog(Protocol):
    """Each agent's witness records, oldest first; append-only."""

    async def append(self, record: WitnessRecord) -> None:
        """Store `record` after the agent's head. ChainConflict when it does not
        continue the stored chain; nothing happens when it is already stored."""
        ...

    async def last(self, agent_id: str) -> WitnessRecord | None:
        """The agent's head (None before its first record)."""
        ...

    async def records(
        self, agent_id: str, start_seq: int = 1, limit: int | None = None
    ) -> list[WitnessRecord]:
        """Records from `start_seq` on, in order, at most `limit` of them.
        CorruptWitness (with its `seq`) when stored bytes are no record."""
        ...

    async def length(self, agent_id: str) -> int:
        """How many records the agent has."""
        ...
