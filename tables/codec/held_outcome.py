"""An outcome held for a memory not written yet (`Keyspace.pending_outcomes`).

Outcomes name memories by id, and an agent may report an outcome before the event
that creates the memory reaches the journal: the part of the outcome that names the
missing memory waits, keyed by that memory's id, and is applied when the memory is
written, in journal order.
"""

from __future__ import annotations

from typing import Any

import orjson

from grimoire.streams.learn.outcomes import Outcome, OutcomeKind

__all__ = ["held_for", "outcomes_from_json", "outcomes_to_json"]


def held_for(outcome: Outcome, memory_id: str) -> Outcome:
    """The part of `outcome` that applies to `memory_id`, with an id of its own so
    the once-only rule counts it apart from the part applied on arrival."""
    return Outcome(
        outcome_id=f"{outcome.outcome_id}>{memory_id}",
        agent_id=outcome.agent_id,
        ts_ms=outcome.ts_ms,
        kind=outcome.kind,
        memory_ids=(memory_id,),
        run_id=outcome.run_id,
    )


def outcomes_to_json(outcomes: list[Outcome]) -> bytes:
    return orjson.dumps(
        [[o.outcome_id, o.agent_id, o.ts_ms, o.kind.value, list(o.memory_ids), o.run_id]
         for o in outcomes]
    )  # fmt: skip


def outcomes_from_json(raw: Any) -> list[Outcome]:
    if not raw:
        return []
    return [
        Outcome(
            outcome_id=str(oid),
            agent_id=str(agent),
            ts_ms=int(ts),
            kind=OutcomeKind(kind),
            memory_ids=tuple(str(m) for m in ids),
            run_id=str(run),
        )
        for oid, agent, ts, kind, ids, run in orjson.loads(raw)
    ]
