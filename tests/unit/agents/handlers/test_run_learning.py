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

from grimoire.streams.config.agent_config import AgentConfig
from grimoire.streams.learn.causal import CausalEdge
from grimoire.streams.model.records import EventType
from tests.support.handlers import messages, outcome
from tests.support.learning import AGENT, IDS, MEMBERS, RUN, SEEN, TS, Learner


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
