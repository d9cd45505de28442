"""Facts: asserts and retractions applied by the journal's fold, and queries
answered on the caller's reply topic.

`FactHandler` is called by the apply loop for a `fact` entry (an assert) and by
the command handler for a `retract` naming a fact's source event. Both read the
relation's versions, ask the pure timeline what changes, write it, and report a
`GrimoireFact` event on memory-events; the witness summary they return is
recorded by the apply loop. One fact change at a time: journal partitions fold
side by side, and two asserts of one relation would read the same versions (one
agent's entries are on one partition, so this only serialises the rare case
where two partitions' facts land at once).

`FactQueryHandler` is a read: nothing it does is journaled. With tenant keys on,
a query must present a key that reaches its agent and name one of that key's reply
topics, as a recall must (`replies.admitted`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grimoire.agents.dead_letters import dead_letter
from grimoire.agents.handlers.replies import admitted, reply_error
from grimoire.agents.ports import EventSink, InputMessage
from grimoire.streams.facts.queries import (
    as_known_at,
    neighbours,
    reachable_entities,
    valid_at,
)
from grimoire.streams.facts.timeline import assert_fact, retract
from grimoire.streams.facts.values import Fact, FactChanges, entity_name, fact_id_for
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.inbound.fact import FactQuery, FactQueryKind, parse_fact, parse_fact_query
from grimoire.streams.inbound.validators import Fields, InputLimits
from grimoire.tables.journal.witness_due import WitnessDue
from grimoire.tables.ports.facts import FactStore
from grimoire.tables.ports.trust import AuthMetrics
from grimoire.tables.trust.api_keys import Authenticator
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import FactResultV1, MemoryEventV1

__all__ = ["FACT_OP", "FACT_RETRACT_OP", "FactHandler", "FactQueryHandler", "fact_wire"]

logger = logging.getLogger(__name__)

FACT_OP = "fact"
FACT_RETRACT_OP = "retract.fact"
# A query names at most this many facts in its answer (the newest asserts kept).
MAX_FACTS_PER_REPLY = 1_000


def fact_wire(fact: Fact) -> dict[str, Any]:
    """A version as a reply carries it."""
    return {
        "fact_id": fact.fact_id,
        "subject": fact.subject,
        "predicate": fact.predicate,
        "object": fact.object,
        "object_is_entity": fact.object_is_entity,
        "valid_from": fact.valid_from,
        "valid_until": fact.valid_until,
        "known_from": fact.known_from_ms,
        "superseded_at": fact.superseded_at_ms,
        "source_event_id": fact.source_event_id,
        "confidence": fact.confidence,  # < 1.0: inherited from a predecessor
    }


def _summary(changes: FactChanges) -> dict[str, Any]:
    """What a change did, for the witness: ids and intervals, in a stable order."""
    return {
        "written": [
            {
                "fact_id": f.fact_id,
                "valid_from": f.valid_from,
                "valid_until": f.valid_until,
                "superseded_at": f.superseded_at_ms,
            }
            for f in sorted(changes.upserts, key=lambda f: f.fact_id)
        ],
        "removed": sorted(changes.removed),
    }


@dataclass
class FactHandler:
    store: FactStore
    sink: EventSink
    topics: TopicNames
    limits: InputLimits = field(default_factory=InputLimits)
    _one_at_a_time: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    async def handle(
        self, message: InputMessage, journal: tuple[int, int] | None = None
    ) -> tuple[Sequence[str], Mapping[str, Any]] | None:
        """Apply an assert; the witness summary (ids, fields), or None when it
        changed nothing (dead-lettered, or asserted before). With the `journal`
        entry applying it, the summary is stored due with the changes."""
        fact = parse_fact(message.value, self.limits)
        if isinstance(fact, Rejection):
            await dead_letter(self.sink, self.topics.dead_letters, message, fact)
            return None
        async with self._one_at_a_time:
            versions = await self.store.versions(fact.agent_id, fact.subject, fact.predicate)
            changes = assert_fact(versions, fact)
            if changes.empty:
                return None
            closed = sorted(f.fact_id for f in changes.upserts if f.fact_id != fact.fact_id)
            ids = sorted([fact.fact_id, *closed])
            fields = {
                "subject": fact.subject,
                "predicate": fact.predicate,
                "object": fact.object,
                "valid_from": fact.valid_from,
                "known_from": fact.known_from_ms,
                **_summary(changes),
            }
            due = None if journal is None else WitnessDue(journal, tuple(ids), fields)
            await self.store.apply(fact.agent_id, changes, due)
        await self._event(fact, "assert", fact.known_from_ms, closed)
        return ids, fields

    async def retract(
        self, agent_id: str, source_event_id: str, *, at_ms: int
    ) -> list[tuple[str, tuple[str, ...], dict[str, object]]]:
        """Retract the fact asserted by `source_event_id`, if there is one: it is
        removed, and what it superseded is restored. The witness steps it made."""
        fact_id = fact_id_for(agent_id, source_event_id)
        async with self._one_at_a_time:
            fact = await self.store.fact(agent_id, fact_id)
            if fact is None:
                return []
            versions = await self.store.versions(agent_id, fact.subject, fact.predicate)
            changes = retract(versions, fact_id)
            await self.store.apply(agent_id, changes)
        restored = sorted(f.fact_id for f in changes.upserts)
        await self._event(fact, "retract", at_ms, restored)
        details: dict[str, object] = {
            "source_event_id": source_event_id,
            "at": at_ms,
            **_summary(changes),
        }
        return [(FACT_RETRACT_OP, (fact_id, *restored), details)]

    async def _event(self, fact: Fact, action: str, ts_ms: int, others: Sequence[str]) -> None:
        verb = "closed" if action == "assert" else "restored"
        event = MemoryEventV1(
            type="GrimoireFact",
            agent_id=fact.agent_id,
            memory_id=fact.fact_id,
            source_event_id=fact.source_event_id,
            kind="fact",
            layer="",
            ts=ts_ms,
            action=action,
            reason=f"{fact.subject} {fact.predicate} {fact.object} from block "
            f"{fact.valid_from}; {verb} {len(others)}",
            target_id=",".join(others) or None,
            nexus_keys=[f"entity:{name}" for name in fact.entities],
        )
        await self.sink.send(self.topics.memory_events, fact.agent_id, event.dumps_json())


@dataclass
class FactQueryHandler:
    store: FactStore
    sink: EventSink
    topics: TopicNames
    limits: InputLimits = field(default_factory=InputLimits)
    authenticator: Authenticator | None = field(default=None, kw_only=True)
    auth_metrics: AuthMetrics | None = field(default=None, kw_only=True)

    async def handle(self, message: InputMessage) -> None:
        parsed = parse_fact_query(
            message.value, self.limits, reply_namespace=self.topics.reply_namespace
        )
        query = await admitted(self, parsed, message)
        if query is None:
            return
        result = await self.answer(query)
        await self.sink.send(query.reply_to, query.agent_id, result.dumps_json())

    async def answer(self, query: FactQuery) -> FactResultV1:
        agent = query.agent_id
        if query.kind is FactQueryKind.NEIGHBOURS:
            assert query.entity is not None
            facts = await self._within(agent, query.entity, query.hops)
            found = neighbours(facts, query.entity, hops=query.hops, at_block=query.block)
            return FactResultV1(
                correlation_id=query.correlation_id,
                agent_id=agent,
                query=query.kind.value,
                neighbours=[
                    {"entity": n.entity, "hops": n.hops, "via": list(n.via)} for n in found
                ],
            )
        if query.subject is not None and query.predicate is not None:
            versions = await self.store.versions(agent, query.subject, query.predicate)
        elif query.subject is not None:
            versions = await self.store.of_entities(agent, [query.subject])
        else:
            versions = await self.store.all_versions(agent)
        versions = [
            f
            for f in versions
            if (query.subject is None or f.subject == query.subject)
            and (query.predicate is None or f.predicate == query.predicate)
        ]
        if query.kind is FactQueryKind.VALID_AT:
            assert query.block is not None
            chosen = valid_at(versions, query.block)
        else:
            assert query.ts_ms is not None
            chosen = as_known_at(versions, query.ts_ms, query.block)
        return FactResultV1(
            correlation_id=query.correlation_id,
            agent_id=agent,
            query=query.kind.value,
            facts=[fact_wire(f) for f in chosen[:MAX_FACTS_PER_REPLY]],
        )

    async def _within(self, agent_id: str, entity: str, hops: int) -> list[Fact]:
        """Every version touching an entity fewer than `hops` links from `entity`
        (one indexed read per hop): all a `hops`-deep breadth-first walk reads."""
        seen = {entity_name(entity)}
        frontier = sorted(seen)
        gathered: dict[str, Fact] = {}
        for _ in range(hops):
            if not frontier:
                break
            for fact in await self.store.of_entities(agent_id, frontier):
                gathered[fact.fact_id] = fact
            frontier = sorted(reachable_entities(list(gathered.values()), seen))
            seen.update(frontier)
        return list(gathered.values())

    async def reply_failure(self, message: InputMessage, reason: str) -> None:
        failure = Rejection(reason, "the fact query could not be served", None, None)
        await self.reply_rejection(message, failure)

    async def reply_rejection(self, message: InputMessage, rejection: Rejection) -> None:
        """Answer a rejected request with an error `FactResultV1` (`replies.reply_error`)."""

        def payload(data: Fields, correlation_id: str, error: str) -> bytes:
            return FactResultV1(
                correlation_id=correlation_id,
                agent_id=rejection.agent_id or "",
                query=data.identifier("query"),
                error=error,
            ).dumps_json()

        await reply_error(self, message, rejection, self.limits, payload)
