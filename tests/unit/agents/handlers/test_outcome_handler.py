"""OutcomeHandler (agents/handlers/outcomes.py) on the seeded in-memory rig of
tests/support/handlers.py: outcomes move the confidence, strength and decay origin of
the agent's own memories, once per outcome event. Bad outcomes are in
tests/unit/agents/test_dead_letters.py.
"""

from __future__ import annotations

import pytest

from tests.support.handlers import TS, Rig, mid, outcome, seeded


def _field(rig: Rig, memory_id: str, name: str) -> float:
    doc = rig.store.record(memory_id)
    assert doc is not None
    value = doc[name]
    return float(value.decode() if isinstance(value, bytes) else value)


async def test_positive_and_negative_outcomes_move_confidence_strength_and_decay_origin() -> None:
    rig = await seeded()
    a1, a2 = mid("agent-1", "a1", TS), mid("agent-1", "a2", TS + 1)
    before = _field(rig, a1, "confidence")
    assert await rig.outcomes.handle(outcome("positive", [a1], TS + 50, event_id="o1")) == 1
    assert _field(rig, a1, "confidence") == pytest.approx(before + 0.1)
    assert _field(rig, a1, "strength") == 2.0
    assert rig.store.usage(a1)["last_accessed"] == str(TS + 50)  # decay restarts here

    # A redelivered outcome changes nothing.
    assert await rig.outcomes.handle(outcome("positive", [a1], TS + 50, event_id="o1")) == -1
    assert _field(rig, a1, "confidence") == pytest.approx(before + 0.1)

    conf2 = _field(rig, a2, "confidence")
    assert await rig.outcomes.handle(outcome("negative", [a2], TS + 60, event_id="o2")) == 1
    assert _field(rig, a2, "confidence") == pytest.approx(conf2 - 0.15)
    assert _field(rig, a2, "strength") == 1.0

    await rig.outcomes.handle(outcome("validated", [a1, a2], TS + 70, event_id="o3"))
    await rig.outcomes.handle(outcome("contradicted", [a2], TS + 80, event_id="o4"))
    assert (_field(rig, a1, "validated_count"), _field(rig, a2, "validated_count")) == (1, 1)
    assert _field(rig, a2, "contradicted_count") == 1
    events = [e for e in rig.events() if e["type"] == "GrimoireOutcome"]
    assert [e["action"] for e in events] == ["positive", "negative", "validated", "contradicted"]


async def test_an_outcome_never_touches_another_agents_memory() -> None:
    rig = await seeded()
    b1 = mid("agent-2", "b1", TS + 3)
    before = _field(rig, b1, "confidence")
    assert await rig.outcomes.handle(outcome("positive", [b1, "missing"], TS + 9)) == 0
    assert _field(rig, b1, "confidence") == before
