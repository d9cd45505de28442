"""A ``Fact`` as an agent's assertion event makes it: its id the real ``fact_id_for``."""

from __future__ import annotations

from grimoire.streams.facts.values import Fact, fact_id_for


def agent_fact(
    agent: str,
    event: str,
    subject: str,
    obj: str,
    *,
    valid_from: int,
    known_ms: int,
    predicate: str = "works_at",
    entity: bool = True,
    order: int = 0,
) -> Fact:
    """``subject predicate obj`` asserted by ``agent`` in event ``event``: valid from block
    ``valid_from``, known from ``known_ms``; ``obj`` an entity unless ``entity`` is false."""
    return Fact(
        fact_id=fact_id_for(agent, event),
        agent_id=agent,
        subject=subject,
        predicate=predicate,
        object=obj,
        object_is_entity=entity,
        valid_from=valid_from,
        known_from_ms=known_ms,
        source_event_id=event,
        order=order,
    )
