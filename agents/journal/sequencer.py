"""The sequencing stage: every input and command, appended to its agent's journal.

The public input topics stay as they are; this stage reads them and writes each
input, sealed with its agent's key, as one journal entry keyed by the agent id, so
one agent's inputs of every kind land, in one order, on one journal partition.
What happens to an input is decided later, by the fold, at its place in that order.

An input without a usable agent id cannot be keyed: it is dead-lettered here, with
the reason the parser gives. Everything else is journaled as it came, malformed or
not, and judged by the fold (which dead-letters it there), so the journal holds
every input that had an owner.

With tenant keys on, who sent an input is judged here, before anything else: an
episode, tool event, transcript, outcome, fact or command whose key (its
`grimoire-api-key` header or `api_key` field) does not reach its agent is
dead-lettered (`unauthorized`, counted) and never journaled, so it cannot act,
even in a replay, and spends no sequence number. One batch looks each key up once.
Maintenance commands are not checked: the workers' own block timers issue them,
keyless, and what they run is decided from the agent's tick (the topic is the
workers', for Kafka ACLs to close). Every input is journaled without its
`api_key`: the secret does not belong in a log kept for as long as the journal.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import orjson

from grimoire.agents.auth import Identities, authorize, redacted, without_api_key
from grimoire.agents.dead_letters import dead_letter
from grimoire.agents.journal.cipher import seal
from grimoire.agents.ports import EventSink, InputMessage, source_of
from grimoire.streams.clade.copies import ROUTE_FIELD
from grimoire.streams.config.agent_config import config_to_json
from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.inbound.events import Rejection, decode_object
from grimoire.streams.inbound.validators import (
    INVALID_VALUE,
    MISSING_FIELD,
    InputLimits,
    plausible_agent_id,
)
from grimoire.streams.journal.entry import (
    EntryKind,
    JournalEntry,
    SourceRef,
    associated_data,
    encode_entry,
)
from grimoire.streams.journal.usage import RecallUsage, encode_usage
from grimoire.tables.ports.clade import CladeRegistry
from grimoire.tables.ports.config import DefaultConfig
from grimoire.tables.ports.journal import KeyStore
from grimoire.tables.ports.trust import AuthMetrics
from grimoire.tables.trust.api_keys import Authenticator
from grimoire.topics.declarations import TopicNames, partition_of
from grimoire.topics.schemas import CommandV1

__all__ = ["SequenceReport", "Sequencer", "agent_of"]

logger = logging.getLogger(__name__)

# What a tenant's key is checked on: every kind a producer outside the workers
# writes. Maintenance comes from the workers' own block timers, and clade messages
# from the fold of a sibling's journal, both without a key, on the workers' topics.
_WORKERS: Final = frozenset({EntryKind.MAINTENANCE, EntryKind.CLADE})
_CHECKED: Final = frozenset(EntryKind) - _WORKERS


def _auto_shared(kind: EntryKind, data: dict[str, Any]) -> bool:
    """An entry after which `share_policy` auto may share something."""
    if kind is EntryKind.OUTCOME:
        return data.get("outcome") == "run_ended"
    if kind is EntryKind.EPISODE:
        return data.get("kind") == "warning"
    return kind is EntryKind.MAINTENANCE


def agent_of(raw: bytes, limits: InputLimits) -> str | Rejection:
    """The input's agent id, or why it has none a journal could be keyed by."""
    return _owned(raw, limits)[1]


def _owned(raw: bytes, limits: InputLimits) -> tuple[dict[str, Any], str | Rejection]:
    """The input decoded (empty when it does not decode) and its agent id, or why
    it has none."""
    try:
        data = decode_object(raw)
    except InvalidEvent as exc:
        return {}, Rejection(exc.reason, exc.detail, exc.field, None)
    agent_id = plausible_agent_id(data, limits)
    if agent_id is not None:
        return data, agent_id
    if "agent_id" not in data:
        return data, Rejection(MISSING_FIELD, "'agent_id' is required", "agent_id", None)
    return data, Rejection(INVALID_VALUE, "'agent_id' is not a usable agent id", "agent_id", None)


@dataclass(frozen=True, slots=True)
class SequenceReport:
    journaled: int
    dead_lettered: int
    # The block timer's commands for agents that no longer exist (forgotten since
    # it sent them): journaling one would bring the agent back, keys and all.
    stale: int = 0


@dataclass
class Sequencer:
    keys: KeyStore
    sink: EventSink
    topics: TopicNames
    limits: InputLimits = field(default_factory=InputLimits)
    # Tenant keys, checked on every input but maintenance (None, or switched off:
    # everything passes).
    authenticator: Authenticator | None = field(default=None, kw_only=True)
    auth_metrics: AuthMetrics | None = field(default=None, kw_only=True)
    # The deployment's default configuration, journaled as a new agent's first entry.
    defaults: DefaultConfig | None = field(default=None, kw_only=True)
    # The journal's partition count: an entry is keyed by its agent's journal name
    # (never the id) but lands where the agent's id hashes, with its inputs and
    # maintenance commands (`partition_of`); None: where the name hashes.
    partitions: int | None = field(default=None, kw_only=True)
    # Clades: a `publish` and a run's end are journaled with where they go
    # (`clade_route`), read here from the registry (None: nothing is routed).
    clades: CladeRegistry | None = field(default=None, kw_only=True)

    async def append(self, kind: EntryKind, messages: Sequence[InputMessage]) -> SequenceReport:
        """Journal `messages` (one source topic, in offset order), each agent's in order."""
        # A forget applied by any worker is seen before this batch seals anything.
        await self.keys.refresh()
        owned: list[tuple[str, InputMessage]] = []
        dead = 0
        identities: Identities = {}
        memberships: dict[str, list[str]] = {}
        stale = 0
        for message in messages:
            data, owner = _owned(message.value, self.limits)
            if isinstance(owner, Rejection):
                await dead_letter(self.sink, self.topics.dead_letters, redacted(message), owner)
                dead += 1
                continue
            if kind in _WORKERS and await self._stale(owner, data):
                stale += 1
                continue
            admitted = await self._admit(kind, owner, message, data, identities)
            if admitted is None:
                dead += 1
                continue
            owned.append((owner, await self._routed(kind, owner, admitted, data, memberships)))
        # One block of sequence numbers per agent and batch: a crash leaves a gap,
        # never a number used twice.
        counts: dict[str, int] = {}
        for agent_id, _ in owned:
            counts[agent_id] = counts.get(agent_id, 0) + 1
        lasts = await self.keys.next_sequences(counts)
        numbers = {
            agent_id: list(range(lasts[agent_id] - count + 1, lasts[agent_id] + 1))
            for agent_id, count in counts.items()
        }
        defaults = await self._defaults_for_new(numbers)
        for agent_id, message in owned:
            if agent_id in defaults:
                # A new agent's first entry: the deployment's defaults, journaled, so
                # a replay configures it exactly as it was.
                await self._send(
                    agent_id, numbers[agent_id].pop(0), EntryKind.COMMAND, None,
                    defaults.pop(agent_id),
                )  # fmt: skip
            await self._send(
                agent_id, numbers[agent_id].pop(0), kind, source_of(message), message.value
            )
        if stale:
            logger.info("%d maintenance commands for agents that no longer exist: not journaled",
                        stale)  # fmt: skip
        return SequenceReport(len(owned), dead, stale)

    async def _stale(self, agent_id: str, data: object) -> bool:
        """A block timer's command for an agent without a key: the timer only sends
        for agents it has seen, so this one was forgotten since. (A manual request
        for an agent not seen yet is journaled: its first event may be on its way.)"""
        issued_by = data.get("issued_by") if isinstance(data, dict) else None
        return bool(issued_by) and not await self.keys.has_key(agent_id)

    async def _defaults_for_new(self, numbers: dict[str, list[int]]) -> dict[str, bytes]:
        """For each agent whose numbers start at 1 (its first entries ever, or since
        it was forgotten), the `configure` command carrying the deployment's
        defaults, with one more number reserved for it; none when there are none."""
        new = sorted(agent for agent, taken in numbers.items() if taken[0] == 1)
        if not new or self.defaults is None:
            return {}
        config = config_to_json(await self.defaults.load())
        if not config:
            return {}
        commands: dict[str, bytes] = {}
        for agent_id in new:
            numbers[agent_id].append(await self.keys.next_sequence(agent_id, 1))
            commands[agent_id] = CommandV1(
                agent_id=agent_id,
                command="configure",
                config=config,
                event_id=f"defaults:{agent_id}",
            ).dumps_json()
        return commands

    async def _admit(
        self,
        kind: EntryKind,
        agent_id: str,
        message: InputMessage,
        data: dict[str, Any],
        identities: Identities,
    ) -> InputMessage | None:
        """The input as it is journaled (without its key), or None when its key
        does not reach its agent (dead-lettered, counted)."""
        if kind in _CHECKED:
            refused = await authorize(
                self.authenticator,
                self.auth_metrics,
                message,
                data,
                agent_id,
                identities=identities,
            )
            if refused is not None:
                await dead_letter(self.sink, self.topics.dead_letters, redacted(message), refused)
                return None
        stripped = without_api_key(message.value, data)
        return message if stripped is message.value else replace(message, value=stripped)

    async def _routed(
        self,
        kind: EntryKind,
        agent_id: str,
        message: InputMessage,
        data: dict[str, Any],
        memberships: dict[str, list[str]],
    ) -> InputMessage:
        """The input with its `clade_route`: a publish gets the route of the clade it
        names (or of every clade of the agent); what `share_policy` auto may share
        (a run's end, for its evidence; a warning; a maintenance tick, for what its
        curator promotes) that of every clade of the agent, when it has any;
        whatever route a producer wrote is replaced, or dropped where none belongs."""
        if kind is EntryKind.COMMAND and data.get("command") == "publish":
            named = data.get("clade") if isinstance(data.get("clade"), str) else ""
        elif _auto_shared(kind, data):
            named = ""
        else:
            named = None
        route: dict[str, list[str]] | None = None
        if named is not None and self.clades is not None:
            if agent_id not in memberships:
                memberships[agent_id] = await self.clades.clades_of(agent_id)
            mine = memberships[agent_id]
            chosen = ([named] if named in mine else []) if named else mine
            route = {}
            for clade in chosen:
                route[clade] = [m for m in await self.clades.members(clade) if m != agent_id]
            if named == "" and kind is not EntryKind.COMMAND and not route:
                route = None  # an agent in no clade: journaled as sent
        if route is None and ROUTE_FIELD not in data:
            return message
        payload = decode_object(message.value)
        payload.pop(ROUTE_FIELD, None)
        if route is not None:
            payload[ROUTE_FIELD] = route
        return replace(message, value=orjson.dumps(payload))

    async def record_usage(
        self, agent_id: str, usage: RecallUsage, source: SourceRef | None
    ) -> None:
        """A served recall's side effects, applied by the fold in their place."""
        if usage.empty:
            return
        # The recall worker learns of a forget here, before sealing with a key it holds.
        await self.keys.refresh()
        seq = await self.keys.next_sequence(agent_id, 1)
        await self._send(agent_id, seq, EntryKind.USAGE, source, encode_usage(usage))

    async def _send(
        self, agent_id: str, seq: int, kind: EntryKind, source: SourceRef | None, payload: bytes
    ) -> None:
        key = await self.keys.key_for(agent_id)
        name = await self.keys.journal_name(agent_id)
        sealed = seal(key, payload, associated=associated_data(agent_id, key.key_id, seq))
        entry = JournalEntry(
            agent_id=agent_id,
            seq=seq,
            kind=kind,
            source=source,
            key_id=key.key_id,
            nonce=sealed.nonce,
            ciphertext=sealed.ciphertext,
            journal=name,
        )
        partition = None if self.partitions is None else partition_of(agent_id, self.partitions)
        await self.sink.send(self.topics.journal, name, encode_entry(entry), partition=partition)
