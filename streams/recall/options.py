"""What a recall request may ask for beyond its query: filters, budgets, state, mode."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from grimoire.streams.model.field_state import Affect
from grimoire.streams.recall.walk.daimoi import WalkBudget


class RetrievalMode(StrEnum):
    """How much retrieval a request gets (Self-RAG style, decided deterministically)."""

    AUTO = "auto"  # decided from the request and the agent's state
    NONE = "none"  # nothing is retrieved
    LIGHT = "light"  # canonical + BM25 seeds only, no walk
    SEMANTIC = "semantic"  # both vector lanes, no BM25, no walk
    FULL = "full"  # every lane and the daimoi walk


@dataclass(frozen=True, slots=True)
class ProvenanceFilters:
    """Provenance filters; each one set narrows every lane and the walk alike."""

    since_ms: int | None = None
    until_ms: int | None = None
    session_id: str = ""
    run_id: str = ""
    actor_id: str = ""
    event_type_prefix: str = ""
    kinds: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return self == NO_FILTERS

    def admits(
        self,
        *,
        ts_ms: int,
        session_id: str,
        run_id: str,
        actor_id: str,
        event_type: str,
        kind: str,
        layer: str,
    ) -> bool:
        if self.since_ms is not None and ts_ms < self.since_ms:
            return False
        if self.until_ms is not None and ts_ms > self.until_ms:
            return False
        for wanted, actual in (
            (self.session_id, session_id),
            (self.run_id, run_id),
            (self.actor_id, actor_id),
        ):
            if wanted and wanted != actual:
                return False
        if self.event_type_prefix and not event_type.startswith(self.event_type_prefix):
            return False
        if self.kinds and kind not in self.kinds:
            return False
        return not (self.layers and layer not in self.layers)


NO_FILTERS = ProvenanceFilters()


@dataclass(frozen=True, slots=True)
class RetrievalBudgets:
    """Count and token budgets (docs/design.md §5 defaults)."""

    canonical_k: int = 20
    eidolon_k: int = 30
    bm25_k: int = 20
    walk: WalkBudget = field(default_factory=WalkBudget)
    max_items: int = 10
    token_budget: int = 2_000
    full_text_items: int = 3


@dataclass(frozen=True, slots=True)
class StateOverride:
    """The agent state a request brings; anything left out comes from the field state."""

    digest: tuple[str, ...] | None = None
    regime: str | None = None
    affect: Affect | None = None
    circuit: str = ""
