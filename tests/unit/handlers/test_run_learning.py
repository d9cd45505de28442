"""Learning from a run's outcome through the handlers (OutcomeHandler and
IngestHandler over the in-memory memory, learning and configuration stores):

- a `run_ended` outcome journaled before its run's memories and one journaled after
  them leave the same memories (confidence, validated / contradicted, strength,
  causal uplift) and the same causal edges;
- with learning switched off (`learn_from_outcomes: false`) an outcome changes
  nothing but closes the run;
- a redelivered outcome changes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from grimoire.agents.handlers.ingest import IngestHandler
from grimoire.agents.handlers.outcomes import OutcomeHandler
from grimoire.agents.ports import MemorySink
from grimoire.streams.config.agent_config import AgentConfig
from grimoire.streams.learn.causal import CausalEdge
from grimoire.streams.learn.hedge import LEARNED_FACTORS, RANK
from grimoire.streams.model.records import EventType
from grimoire.tables.learn.store import LearningStore
from grimoire.tables.memory.store import MemoryStore
from grimoire.tables.testing.config_store import InMemoryConfigStore
from grimoire.tables.testing.learning_store import InMemoryLearningStore
from grimoire.tables.testing.memory_store import InMemoryMemoryStore
from tests.support.embedders import FakeEmbedder
from tests.support.handlers import TOPICS, episode, messages, mid, outcome

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


async def after(quality: float) -> Learner:
    """The run's memories journaled, then its outcome."""
    learner = Learner()
    await learner.write(SEEN)
    await learner.recalled()
    await learner.write(*MEMBERS, offset=1)
    assert await learner.end(quality) > 0
    return learner


async def before(quality: float, *, groups: tuple[slice, ...] = (slice(0, 4),)) -> Learner:
    """The outcome journaled first, its run's memories after (in `groups`)."""
    learner = Learner()
    await learner.write(SEEN)
    await learner.recalled()
    assert await learner.end(quality) >= 0  # only `seen` is there to credit
    for n, group in enumerate(groups):
        await learner.write(*MEMBERS[group], offset=1 + 10 * n)
    return learner


def as_floats(fields: dict[str, dict[str, Any]]) -> dict[str, float]:
    """`memory.field` -> value, flat (pytest.approx compares flat mappings)."""
    return {f"{m}.{f}": float(v) for m, held in fields.items() for f, v in held.items()}


@pytest.mark.parametrize("quality", [0.9, 0.1, 0.5])
@pytest.mark.parametrize(
    "groups",
    [
        (slice(0, 4),),  # all at once
        (slice(0, 2), slice(2, 4)),  # trigger and context, then action and report
        (slice(2, 3), slice(0, 2), slice(3, 4)),  # the action first, the report last
        (slice(3, 4), slice(0, 3)),  # the report before the action
    ],
)
async def test_an_outcome_before_its_members_equals_one_after_them(
    quality: float, groups: tuple[slice, ...]
) -> None:
    late = await before(quality, groups=groups)
    on_time = await after(quality)
    assert as_floats(late.fields()) == pytest.approx(as_floats(on_time.fields()), abs=1e-9)
    assert await late.edges() == await on_time.edges()
    assert await late.learning.learned_weights(AGENT) == await on_time.learning.learned_weights(
        AGENT
    )


async def test_what_a_successful_run_did_by_hand() -> None:
    learner = await after(0.9)
    fields = {m: {f: float(v) for f, v in held.items()} for m, held in learner.fields().items()}
    baseline = Learner()
    await baseline.write(SEEN)
    await baseline.write(*MEMBERS, offset=1)
    start = {m: {f: float(v) for f, v in held.items()} for m, held in baseline.fields().items()}
    # quality 0.9: signal 0.8; credit 0.10 · share · 0.8 by role, the recalled
    # memory 0.10 · 0.6 · 0.8 = 0.048 and one strength
    shares = {"alert": 0.024, "obs": 0.032, "act": 0.08, "report": 0.04, "seen": 0.048}
    for name, delta in shares.items():
        expected = min(1.0, start[name]["confidence"] + delta)
        assert fields[name]["confidence"] == pytest.approx(expected, abs=1e-9), name
        # a run record for the run's members; `seen` was only recalled: none
        record = (fields[name].get("validated_count", 0), fields[name].get("contradicted_count", 0))
        assert record == ((0, 0) if name == "seen" else (1, 0)), name
        gained = 1.0 if name == "seen" else 0.0
        assert fields[name]["strength"] == start[name]["strength"] + gained, name
    # the action → report edge, weight 0.8 and evidence 1; the action's uplift 0.4
    assert await learner.edges() == [CausalEdge(IDS["act"], IDS["report"], 0.8, 1, 0)]
    assert fields["act"]["causal_uplift"] == pytest.approx(0.4)
    weights = await learner.learning.learned_weights(AGENT)
    assert weights is not None and weights.updates == 1
    # the run's recalls are dropped once learned from; its end is kept
    assert await learner.learning.run_recalls(AGENT, RUN) == {}
    assert (await learner.learning.ended_runs(AGENT, [RUN]))[RUN].quality == 0.9


@pytest.mark.parametrize("order", [after, before])
async def test_with_learning_off_an_outcome_changes_nothing(order: Any) -> None:
    untouched = Learner()
    await untouched.write(SEEN)
    await untouched.write(*MEMBERS, offset=1)

    learner = Learner()
    await learner.configs.save(AGENT, AgentConfig(learn_from_outcomes=False))
    if order is after:
        await learner.write(SEEN)
        await learner.recalled()
        await learner.write(*MEMBERS, offset=1)
        assert await learner.end(0.9) == 0
    else:
        await learner.write(SEEN)
        await learner.recalled()
        assert await learner.end(0.9) == 0
        await learner.write(*MEMBERS, offset=1)
    assert learner.fields() == untouched.fields()
    assert await learner.edges() == []
    assert await learner.learning.learned_weights(AGENT) is None
    # the run is closed: its recalls dropped, no end kept for late members
    assert await learner.learning.run_recalls(AGENT, RUN) == {}
    assert await learner.learning.ended_runs(AGENT, [RUN]) == {}
    # ... and marked applied: a redelivery is recognised
    assert await learner.end(0.9) == -1


@pytest.mark.parametrize("quality", [0.9, 0.1])
async def test_a_redelivered_outcome_changes_nothing(quality: float) -> None:
    learner = await after(quality)
    snapshot = await learner.snapshot()
    assert await learner.end(quality) == -1
    assert await learner.snapshot() == snapshot
    # ... nor does a member written again (its event redelivered)
    await learner.ingest.handle(EventType.EPISODE, messages(*MEMBERS, first_offset=1))
    assert await learner.snapshot() == snapshot


async def test_a_redelivered_outcome_before_its_members_credits_them_once() -> None:
    learner = Learner()
    await learner.write(SEEN)
    await learner.recalled()
    await learner.end(0.9)
    assert await learner.end(0.9) == -1
    await learner.write(*MEMBERS, offset=1)
    on_time = await after(0.9)
    assert as_floats(learner.fields()) == pytest.approx(as_floats(on_time.fields()), abs=1e-9)
    assert await learner.edges() == await on_time.edges()


async def test_another_agents_run_of_the_same_id_moves_nothing_here() -> None:
    learner = await after(0.9)
    snapshot = await learner.snapshot()
    other = outcome("run_ended", [], TS + 30, run_id=RUN, quality=0.1, event_id="other")
    other = type(other)(
        other.value.replace(b'"agent-1"', b'"agent-2"'), other.topic, other.partition, 2
    )
    await learner.outcomes.handle(other)
    assert await learner.snapshot() == snapshot
