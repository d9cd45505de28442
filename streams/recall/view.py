"""What a recall reads of an agent before it searches: its configuration, its field
state and watermark, the state vector its last write kept, what it learned, the
anti-rumination window last served and which of the actors the query may name it
knows. Loaded once per request, in one read, by the
storage's `RecallViews` (grimoire.tables.ports.memory)."""

from __future__ import annotations

from dataclasses import dataclass, field

from grimoire.streams.config.agent_config import AgentConfig
from grimoire.streams.learn.hedge import LearnedWeights
from grimoire.streams.model.field_state import FieldState
from grimoire.streams.write.changes import StateVector

__all__ = ["RecallView"]


@dataclass(frozen=True, slots=True)
class RecallView:
    fields: FieldState
    config: AgentConfig = field(default_factory=AgentConfig)
    watermark: int | None = None
    state_vector: StateVector | None = None
    # None: nothing learned yet, or no learning store composed.
    learned: LearnedWeights | None = None
    contrarian_served: int | None = None
    # The actors a query names, of those the agent's memories name
    # (`grimoire.streams.recall.named`): read with the view, before the query is
    # embedded without them.
    actors: frozenset[str] = frozenset()
