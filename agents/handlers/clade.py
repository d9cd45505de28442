"""Clades (docs/clades.md): what an agent shares with its siblings, and what a
sibling's fold does with it.

The origin's side (`Sharing`) runs inside the fold of the origin's journal: its
`publish` and `unpublish` commands, the retraction and forgetting that withdraw
what it published, and (with `share_policy` auto) the evidence it counts. Each
sends the recipients one `grimoire.clade/1` message apiece on the workers' clade
topic, which the sequencer journals into the recipient's journal: every agent's
state stays a fold of its own journal, so a replay rebuilds each one alone.
Messages are sent (and flushed) before the origin records what it published: a
worker killed in between sends them again when the command is applied again,
and a recipient writes the same copy twice to the same effect.

The recipient's side (`CladeReceiver`) is the fold of those entries: a share
writes (or updates) the copy, with provenance `clade` and the origin's confidence
times the clade discount; a withdrawal retracts the copy's source event, so the
retraction cascade takes the copy and whatever the sibling derived from it; a
credit (at the origin) counts a sibling's run that used the copy as clade
evidence for the entry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import orjson

from grimoire.agents.dead_letters import dead_letter
from grimoire.agents.ports import Embedder, EventSink, InputMessage
from grimoire.agents.ports.commands import Retractor
from grimoire.streams.clade.copies import (
    CLADE_PROVENANCE,
    ROUTE_FIELD,
    CladeMessage,
    CladeOp,
    CladeRoute,
    SharedEntry,
    origin_of,
    parse_clade_message,
    parse_route,
)
from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.inbound.validators import InputLimits
from grimoire.streams.learn.curator.values import EntryStatus
from grimoire.streams.learn.evidence import EVIDENCE_EVENT_TYPE, SITUATION_EDGE_PREFIX
from grimoire.streams.model.records import (
    HyperedgeRef,
    Kind,
    Layer,
    MemoryCandidate,
    MemoryRecord,
    Provenance,
    Role,
)
from grimoire.streams.model.text import normalized_hash
from grimoire.streams.ports.recall import RecallSource
from grimoire.streams.recall.ports import RecallRecord
from grimoire.streams.write.changes import WriteBatch
from grimoire.tables.ports.clade import CladeCopies, CladeRegistry, Published, PublishedStore
from grimoire.tables.ports.config import ConfigStore
from grimoire.tables.ports.maintenance import CuratorStore
from grimoire.tables.ports.memory import MemoryWrites
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import CladeMessageV1

__all__ = [
    "CLADE_CREDIT_OP",
    "CLADE_SHARE_OP",
    "CLADE_WITHDRAW_OP",
    "DEFAULT_CLADE_DISCOUNT",
    "PUBLISH_OP",
    "UNPUBLISH_OP",
    "AutoShare",
    "CladeReceiver",
    "CladeSender",
    "Sharing",
    "copies_used",
    "journaled_route",
    "shared_entry",
]

logger = logging.getLogger(__name__)

PUBLISH_OP: Final = "publish"
UNPUBLISH_OP: Final = "unpublish"
CLADE_SHARE_OP: Final = "clade_share"
CLADE_WITHDRAW_OP: Final = "clade_withdraw"
CLADE_CREDIT_OP: Final = "clade_credit"
# What a sibling's knowledge weighs against the agent's own (seed 001: Vault 1.0,
# Clade 0.8, Lethe 0.5).
DEFAULT_CLADE_DISCOUNT: Final = 0.8

Sources = Callable[[str], RecallSource]
"""Agent id -> a read view of its memories (`recall_source` of the memory store)."""

Step = tuple[str, Sequence[str], Mapping[str, Any]]


def _deliveries(route: CladeRoute) -> list[tuple[str, str]]:
    """(clade, recipient) once per recipient: through the first clade reaching it."""
    seen: dict[str, str] = {}
    for clade, members in route:
        for member in members:
            seen.setdefault(member, clade)
    return sorted((clade, member) for member, clade in seen.items())


def shared_entry(record: RecallRecord) -> SharedEntry:
    """What a share carries of a memory as it is stored now."""
    situation = next((e for e in record.hyperedge_ids if e.startswith(SITUATION_EDGE_PREFIX)), "")
    return SharedEntry(
        kind=record.kind,
        text=record.text,
        confidence=record.confidence,
        validated=record.validated_count,
        contradicted=record.contradicted_count,
        keys=tuple(sorted(record.nexus_keys)),
        event_type=record.event_type,
        situation_edge=situation,
        ts_ms=record.ts_ms,
    )


@dataclass(frozen=True, slots=True)
class CladeSender:
    sink: EventSink
    topics: TopicNames
    worker: str = ""

    async def send(self, messages: Sequence[CladeMessageV1]) -> None:
        for message in messages:
            await self.sink.send(self.topics.clade, message.agent_id, message.dumps_json())
        if messages:
            await self.sink.flush()


def _message(
    op: CladeOp,
    recipient: str,
    origin: str,
    memory_id: str,
    clade: str,
    ts_ms: int,
    *,
    entry: SharedEntry | None = None,
    success: bool | None = None,
    cause: str = "",
    issued_by: str = "",
) -> CladeMessageV1:
    # The same cause (a command, a run's end) sends the same ids: a recipient's
    # journal may hold a message twice, never two different ones under one id.
    event_id = f"{op.value}:{origin}:{memory_id}:{recipient}:{cause or ts_ms}"
    return CladeMessageV1(
        agent_id=recipient,
        op=op.value,
        origin_agent_id=origin,
        origin_memory_id=memory_id,
        clade=clade,
        ts=ts_ms,
        event_id=event_id,
        entry=entry.to_wire() if entry is not None else None,
        success=success,
        issued_by=issued_by or None,
    )


@dataclass
class Sharing:
    """The origin's side: publish, unpublish, withdraw, share again."""

    registry: CladeRegistry
    published: PublishedStore
    sources: Sources
    sender: CladeSender

    async def publish(
        self, agent_id: str, memory_id: str, route: CladeRoute, ts_ms: int, cause: str
    ) -> Step:
        """Share the memory along `route` (journaled with the command: the clades
        and their members but the agent, as the registry had them then)."""
        records = await self.sources(agent_id).records([memory_id])
        record = records.get(memory_id)
        if record is None or not record.live or record.provenance == CLADE_PROVENANCE:
            # Another agent's knowledge is its origin's to share; a gone memory, nobody's.
            why = "not found" if record is None or not record.live else "a clade copy"
            return PUBLISH_OP, (memory_id,), {"published": False, "reason": why}
        if not route:
            return PUBLISH_OP, (memory_id,), {"published": False, "reason": "no clade"}
        messages = self._shares(agent_id, record, route, ts_ms, cause)
        await self.sender.send(messages)
        held = (await self.published.published(agent_id, [memory_id])).get(memory_id)
        routes = dict(held.routes) if held is not None else {}
        for clade, members in route:
            routes[clade] = tuple(sorted({*routes.get(clade, ()), *members}))
        merged = Published(memory_id, tuple(sorted(routes.items())))
        await self.published.mark(agent_id, merged)
        return (
            PUBLISH_OP,
            (memory_id,),
            {"published": True, "clades": list(merged.clades), "recipients": len(messages)},
        )

    def _shares(
        self, agent_id: str, record: RecallRecord, route: CladeRoute, ts_ms: int, cause: str
    ) -> list[CladeMessageV1]:
        """One share of the memory as it is now to each recipient of `route`."""
        entry = shared_entry(record)
        return [
            _message(
                CladeOp.SHARE,
                member,
                agent_id,
                record.memory_id,
                clade,
                ts_ms,
                entry=entry,
                cause=cause,
                issued_by=self.sender.worker,
            )
            for clade, member in _deliveries(route)
        ]

    async def unpublish(
        self, agent_id: str, memory_id: str, clade: str, ts_ms: int, cause: str
    ) -> Step:
        """Withdraw the copies that went through `clade` (every clade when ""), from
        the agents no remaining clade of the memory reaches."""
        held = (await self.published.published(agent_id, [memory_id])).get(memory_id)
        if held is None or (clade and clade not in held.clades):
            return UNPUBLISH_OP, (memory_id,), {"withdrawn": 0}
        kept = tuple((c, agents) for c, agents in held.routes if clade and c != clade)
        still = {agent for _, agents in kept for agent in agents}
        gone = [r for r in held.recipients if r not in still]
        await self._withdraw(agent_id, memory_id, held, gone, ts_ms, cause)
        if kept:
            await self.published.mark(agent_id, Published(memory_id, kept))
        else:
            await self.published.unmark(agent_id, [memory_id])
        return (
            UNPUBLISH_OP,
            (memory_id,),
            {"withdrawn": len(gone), "clades": [c for c, _ in kept]},
        )

    async def withdraw_all(
        self, agent_id: str, memory_ids: Sequence[str], ts_ms: int, cause: str
    ) -> list[Step]:
        """Withdraw every copy of these memories (a retraction or forgetting at the
        origin); a step per published one."""
        held = await self.published.published(agent_id, memory_ids) if memory_ids else {}
        if not memory_ids:
            held = await self.published.published(agent_id)
        steps: list[Step] = []
        for memory_id, published in sorted(held.items()):
            await self._withdraw(agent_id, memory_id, published, published.recipients, ts_ms, cause)
            steps.append(
                (
                    UNPUBLISH_OP,
                    (memory_id,),
                    {"withdrawn": len(published.recipients), "cause": cause},
                )
            )
        await self.published.unmark(agent_id, sorted(held))
        return steps

    async def publish_new(
        self, agent_id: str, memory_ids: Sequence[str], route: CladeRoute, ts_ms: int, cause: str
    ) -> list[Step]:
        """Publish those of the memories not published yet; the steps that did."""
        held = await self.published.published(agent_id, memory_ids) if memory_ids else {}
        steps: list[Step] = []
        for memory_id in sorted(set(memory_ids) - set(held)):
            step = await self.publish(agent_id, memory_id, route, ts_ms, cause)
            if step[2].get("published"):
                steps.append(step)
        return steps

    async def leave_all(self, agent_id: str) -> list[str]:
        """Take a forgotten agent out of every clade it was in; the clades."""
        clades = await self.registry.clades_of(agent_id)
        for clade in clades:
            await self.registry.leave(clade, agent_id)
        return clades

    async def _withdraw(
        self,
        agent_id: str,
        memory_id: str,
        held: Published,
        recipients: Sequence[str],
        ts_ms: int,
        cause: str,
    ) -> None:
        clade = held.clades[0] if held.clades else "none"
        await self.sender.send(
            [
                _message(
                    CladeOp.WITHDRAW,
                    recipient,
                    agent_id,
                    memory_id,
                    clade,
                    ts_ms,
                    cause=cause,
                    issued_by=self.sender.worker,
                )
                for recipient in recipients
            ]
        )

    async def share_changed(
        self,
        agent_id: str,
        memory_ids: Sequence[str],
        route: CladeRoute,
        ts_ms: int,
        cause: str,
        *,
        auto: bool,
    ) -> list[Step]:
        """Memories that changed (an evidence entry counted a run): a published one
        goes again to its recipients, with its new state; with `auto`, one not
        published yet is published along `route` (the run's end's)."""
        if not memory_ids:
            return []
        held = await self.published.published(agent_id, memory_ids)
        steps: list[Step] = []
        if auto and route:
            for memory_id in sorted(set(memory_ids) - set(held)):
                step = await self.publish(agent_id, memory_id, route, ts_ms, cause)
                if step[2].get("published"):
                    steps.append(step)
        todo = sorted(m for m in memory_ids if m in held)
        if not todo:
            return steps
        records = await self.sources(agent_id).records(todo)
        messages: list[CladeMessageV1] = []
        for memory_id in todo:
            record = records.get(memory_id)
            if record is None or not record.live:
                continue
            messages.extend(self._shares(agent_id, record, held[memory_id].routes, ts_ms, cause))
        await self.sender.send(messages)
        return steps

    async def credit_origins(
        self, agent_id: str, copies: Sequence[RecallRecord], success: bool, ts_ms: int, cause: str
    ) -> None:
        """A run of `agent_id` that used these copies ended: tell each origin."""
        messages: list[CladeMessageV1] = []
        for record in sorted(copies, key=lambda r: r.memory_id):
            origin = origin_of(record.source_event_id)
            if origin is None:
                continue
            messages.append(
                _message(
                    CladeOp.CREDIT,
                    origin[0],
                    origin[0],
                    origin[1],
                    "credit",
                    ts_ms,
                    success=success,
                    cause=f"{cause}:{agent_id}",
                    issued_by=self.sender.worker,
                )
            )
        await self.sender.send(messages)


@dataclass
class CladeReceiver:
    """The fold of a clade entry in the recipient's journal."""

    writes: MemoryWrites
    copies: CladeCopies
    sources: Sources
    embedder: Embedder
    retractor: Retractor
    sink: EventSink
    topics: TopicNames
    limits: InputLimits = field(default_factory=InputLimits)
    discount: float = DEFAULT_CLADE_DISCOUNT

    async def handle(self, message: InputMessage) -> Step | None:
        """What the entry changed (None: nothing, e.g. a malformed message, which is
        dead-lettered)."""
        parsed = parse_clade_message(message.value, self.limits)
        if isinstance(parsed, Rejection):
            await dead_letter(self.sink, self.topics.dead_letters, message, parsed)
            return None
        if parsed.op is CladeOp.SHARE:
            return await self._share(parsed)
        if parsed.op is CladeOp.WITHDRAW:
            report = await self.retractor.retract(
                parsed.recipient, parsed.copy_source, at_ms=parsed.ts_ms
            )
            return (
                CLADE_WITHDRAW_OP,
                report.memory_ids,
                {"origin": parsed.origin_agent_id, "origin_memory_id": parsed.origin_memory_id},
            )
        credited = await self.copies.credit(
            parsed.recipient, parsed.origin_memory_id, success=bool(parsed.success)
        )
        return (
            CLADE_CREDIT_OP,
            (parsed.origin_memory_id,),
            {"success": bool(parsed.success), "credited": credited},
        )

    async def _share(self, message: CladeMessage) -> Step:
        entry = message.entry
        assert entry is not None  # the parser refuses a share without one
        target = message.copy_id
        found = (await self.sources(message.recipient).records([target])).get(target)
        confidence = round(entry.confidence * self.discount, 9)
        created = found is None or found.deleted
        if created:
            if found is not None:  # withdrawn before: written afresh
                await self.copies.discard(message.recipient, target)
            await self._create(message, entry, target, confidence)
        await self.copies.set_counts(
            message.recipient,
            target,
            confidence=confidence,
            validated=entry.validated,
            contradicted=entry.contradicted,
        )
        return (
            CLADE_SHARE_OP,
            (target,),
            {
                "origin": message.origin_agent_id,
                "origin_memory_id": message.origin_memory_id,
                "clade": message.clade,
                "created": created,
                "confidence": confidence,
            },
        )

    async def _create(
        self, message: CladeMessage, entry: SharedEntry, target: str, confidence: float
    ) -> None:
        vectors = await self.embedder.embed([entry.text])
        try:
            kind = Kind(entry.kind)
        except ValueError:
            kind = Kind.INSIGHT
        candidate = MemoryCandidate(
            id=target,
            agent_id=message.recipient,
            kind=kind,
            layer=Layer.CONTEMPLATION,
            text=entry.text,
            ts_ms=entry.ts_ms,
            provenance=Provenance(
                source_event_id=message.copy_source,
                event_type=entry.event_type or CLADE_PROVENANCE,
                provenance=CLADE_PROVENANCE,
            ),
            normalized_hash=normalized_hash(entry.text),
            tags=(CLADE_PROVENANCE,),
            keys=tuple(k for k in entry.keys if not k.startswith(("run:", "session:"))),
            hyperedge=HyperedgeRef(entry.situation_edge, Role.ACTION)
            if entry.situation_edge
            else None,
            # a sibling's evidence is a count too: never compacted nor archived
            pinned=entry.event_type == EVIDENCE_EVENT_TYPE,
        )
        record = MemoryRecord(
            candidate,
            canonical=np.asarray(vectors[0], dtype=np.float32).tobytes(),
            confidence=confidence,
        )
        await self.writes.commit(WriteBatch(records=(record,)))


def copies_used(records: Mapping[str, RecallRecord]) -> list[RecallRecord]:
    """The clade copies among a run's members and recalled memories."""
    return [r for r in records.values() if r.provenance == CLADE_PROVENANCE]


@dataclass
class AutoShare:
    """`share_policy` auto (docs/clades.md): a warning as it is written, an insight
    or heuristic once the curator promotes it, each along the route journaled with
    the entry that wrote or promoted it. An agent with `explicit` shares nothing."""

    sharing: Sharing
    configs: ConfigStore
    curated: CuratorStore | None = None

    async def _auto(self, agent_id: str) -> bool:
        return (await self.configs.load([agent_id]))[agent_id].share_policy == "auto"

    async def warnings(
        self, agent_id: str, memory_ids: Sequence[str], route: CladeRoute, ts_ms: int, cause: str
    ) -> list[Step]:
        if not memory_ids or not route or not await self._auto(agent_id):
            return []
        return await self.sharing.publish_new(agent_id, memory_ids, route, ts_ms, cause)

    async def promoted(
        self, agent_id: str, route: CladeRoute, ts_ms: int, cause: str
    ) -> list[Step]:
        """Publish the agent's promoted insights (active) and heuristics (playbook)
        that are its own and not published yet."""
        if self.curated is None or not route or not await self._auto(agent_id):
            return []
        promoted = sorted(
            entry.memory_id
            for entry in await self.curated.entries(agent_id)
            if entry.provenance != CLADE_PROVENANCE
            and (
                (entry.kind is Kind.INSIGHT and entry.status is EntryStatus.ACTIVE)
                or (entry.kind is Kind.HEURISTIC and entry.status is EntryStatus.PLAYBOOK)
            )
        )
        return await self.sharing.publish_new(agent_id, promoted, route, ts_ms, cause)


def journaled_route(payload: bytes, limits: InputLimits) -> tuple[CladeRoute, int]:
    """The route the sequencer journaled with an entry (() when it has none) and
    the entry's event time (0 when it has none a route needs). Called for every
    written input on the ingest path: one without the field is not parsed."""
    if ROUTE_FIELD.encode() not in payload:
        return (), 0
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return (), 0
    if not isinstance(data, dict) or ROUTE_FIELD not in data:
        return (), 0
    ts = data.get("ts")
    try:
        return parse_route(data[ROUTE_FIELD], limits), ts if isinstance(ts, int) else 0
    except InvalidEvent:
        return (), 0
