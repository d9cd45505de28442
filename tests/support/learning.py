"""One agent's run through the ingest and outcome handlers over in-memory memory,
learning and configuration stores (``Learner``), with the run's payloads: ``SEEN``,
what the agent knew before the run (the run recalls it before acting), and
``MEMBERS``, the run's trigger, context, action and report; ``IDS`` are their
memory ids. Shared by the handler tests of learning (tests/unit/agents/handlers/)."""

from __future__ import annotations

from typing import Any

from grimoire.agents.handlers.ingest import IngestHandler
from grimoire.agents.handlers.outcomes import OutcomeHandler
from grimoire.agents.ports import MemorySink
from grimoire.streams.learn.causal import CausalEdge
from grimoire.streams.learn.hedge import LEARNED_FACTORS, RANK
from grimoire.streams.model.records import EventType
from grimoire.tables.ports.learn import LearningStore
from grimoire.tables.ports.memory import MemoryStore
from grimoire.tables.testing.config_store import InMemoryConfigStore
from grimoire.tables.testing.learning_store import InMemoryLearningStore
from grimoire.tables.testing.memory_store import InMemoryMemoryStore

from .embedders import FakeEmbedder
from .handlers import TOPICS, episode, messages, mid, outcome

AGENT = "agent-1"
TS = 1_767_225_600_000
RUN = "run-7"
FIELDS = ("confidence", "validated_count", "contradicted_count", "strength", "causal_uplift")

# What the agent knew before the run: the run recalls `seen` before acting.
SEEN = episode(AGENT, "disk full on node seven last winter", TS, "seen")
# The run: an alert (trigger), an observation (context), the action, its report
# (outcome). Words apart, so none folds into another.
MEMBERS = (
    episode(AGENT, "alert backups lagging on cluster west", TS + 10, "alert",
            run_id=RUN, episode_type="alert"),
    episode(AGENT, "observed queue depth rising steadily", TS + 11, "obs",
            run_id=RUN, episode_type="observation"),
    episode(AGENT, "restarted the replication daemon twice", TS + 12, "act",
            run_id=RUN, episode_type="action"),
    episode(AGENT, "error rate back to normal after fix", TS + 13, "report",
            run_id=RUN, episode_type="report", outcome="success"),
)  # fmt: skip
IDS = {
    "seen": mid(AGENT, "seen", TS),
    "alert": mid(AGENT, "alert", TS + 10),
    "obs": mid(AGENT, "obs", TS + 11),
    "act": mid(AGENT, "act", TS + 12),
    "report": mid(AGENT, "report", TS + 13),
}


class Learner:
    """The ingest and outcome handlers over one set of in-memory stores."""

    def __init__(self) -> None:
        self.store = InMemoryMemoryStore(dims=FakeEmbedder.dims)
        self.learning = InMemoryLearningStore()
        self.configs = InMemoryConfigStore()
        _store: MemoryStore = self.store  # both must satisfy their protocols
        _learning: LearningStore = self.learning
        sink = MemorySink()
        self.ingest = IngestHandler(
            self.store, FakeEmbedder(), sink, TOPICS, learning=self.learning
        )
        self.outcomes = OutcomeHandler(
            self.store, sink, TOPICS, learning=self.learning, configs=self.configs
        )

    async def write(self, *payloads: bytes, offset: int = 0) -> None:
        report = await self.ingest.handle(
            EventType.EPISODE, messages(*payloads, first_offset=offset)
        )
        assert report.written == len(payloads), report

    async def recalled(self) -> None:
        """The run's recall returned `seen` at the top (what the usage entry leaves)."""
        factors = {n: 0.6 for n in LEARNED_FACTORS} | {RANK: 0.0}
        await self.learning.record_recalls(AGENT, RUN, {IDS["seen"]: factors})

    async def end(self, quality: float, event_id: str = "ended") -> int:
        message = outcome("run_ended", [], TS + 20, run_id=RUN, quality=quality,
                          event_id=event_id)  # fmt: skip
        return await self.outcomes.handle(message)

    def fields(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for name, memory_id in IDS.items():
            doc = self.store.record(memory_id)
            assert doc is not None, name
            found[name] = {
                f: (v.decode() if isinstance(v, bytes) else v)
                for f, v in doc.items()
                if f in FIELDS
            }
        return found

    async def edges(self) -> list[CausalEdge]:
        return await self.learning.all_edges(AGENT)

    async def snapshot(self) -> tuple[object, ...]:
        return (
            self.fields(),
            await self.edges(),
            await self.learning.learned_weights(AGENT),
            await self.learning.run_recalls(AGENT, RUN),
            await self.learning.ended_runs(AGENT, [RUN]),
        )
