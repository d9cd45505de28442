"""Commands (retract, forget, pin, unpin, configure, import, publish, unpublish),
applied at their place in the journal.

The command is decoded here (a malformed one is dead-lettered), and carried out by
the concern that owns it: the retraction cascade and pinning by the retraction
handler, forgetting by the eraser (every key of the agent, then its journal key).
What each did is returned for the witness.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grimoire.agents.dead_letters import dead_letter
from grimoire.agents.handlers.clade import Sharing
from grimoire.agents.handlers.facts import FactHandler
from grimoire.agents.ports import EventSink, InputMessage
from grimoire.agents.ports.commands import Eraser, Importer, Retractor
from grimoire.streams.config.agent_config import apply_update, config_to_json
from grimoire.streams.inbound.command import Command, CommandKind, parse_command
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.inbound.validators import InputLimits
from grimoire.tables.ports.config import ConfigStore
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import MemoryEventV1

__all__ = ["CommandHandler", "Eraser", "Importer", "Retractor", "StepLog"]

logger = logging.getLogger(__name__)


class StepLog:
    """Collects the mutations a command makes (the retraction handler reports each
    step to it), for the witness of the command's journal entry."""

    def __init__(self) -> None:
        self._steps: list[tuple[str, tuple[str, ...], dict[str, object]]] = []

    async def __call__(self, op: str, ids: Sequence[str], details: Mapping[str, object]) -> None:
        self._steps.append((op, tuple(ids), dict(details)))

    def drain(self) -> list[tuple[str, tuple[str, ...], dict[str, object]]]:
        steps, self._steps = self._steps, []
        return steps


@dataclass
class CommandHandler:
    retractor: Retractor
    eraser: Eraser
    sink: EventSink
    topics: TopicNames
    limits: InputLimits = field(default_factory=InputLimits)
    # Where the retractor reports its steps (wired to it by the composition root).
    steps: StepLog = field(default_factory=StepLog)
    # Where `configure` writes (wired by the composition root; required for it).
    configs: ConfigStore | None = None
    # Facts: a `retract` naming a fact's source event removes the fact and
    # restores what it superseded (None: retraction reaches memories only).
    facts: FactHandler | None = None
    # Where `import` chunks are written (wired by the composition root; required for it).
    importer: Importer | None = None
    # Clades: `publish` / `unpublish`, and the withdrawal of what a retraction or a
    # forget takes from a published memory (None: publishing is refused).
    sharing: Sharing | None = None
    # The step log is one per handler, and journal partitions fold side by side:
    # one command at a time, or two commands' steps would mix.
    _one_at_a_time: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    async def apply_command(
        self, message: InputMessage
    ) -> Sequence[tuple[str, Sequence[str], Any]]:
        async with self._one_at_a_time:
            return await self._apply_command(message)

    async def _apply_command(
        self, message: InputMessage
    ) -> Sequence[tuple[str, Sequence[str], Any]]:
        command = parse_command(message.value, self.limits)
        if isinstance(command, Rejection):
            await dead_letter(self.sink, self.topics.dead_letters, message, command)
            return []
        self.steps.drain()
        summary = await self._carry_out(command)
        made: list[tuple[str, Sequence[str], Any]] = list(self.steps.drain())
        op, ids, _ = summary
        event = MemoryEventV1(
            type="GrimoireCommand",
            agent_id=command.agent_id,
            memory_id=",".join(ids),
            source_event_id=command.target or command.command_id,
            kind="command",
            layer="",
            ts=command.ts_ms or 0,
            action=command.kind.value,
            reason=op,
        )
        await self.sink.send(self.topics.memory_events, command.agent_id, event.dumps_json())
        return [*made, summary]

    async def _carry_out(self, command: Command) -> tuple[str, Sequence[str], Any]:
        agent_id = command.agent_id
        if command.kind is CommandKind.RETRACT:
            report = await self.retractor.retract(
                agent_id, command.target, at_ms=command.ts_ms or 0
            )
            # The witness digests these fields, so they hold ids and counts: a repr
            # would carry rebuilt summaries' and entries' text, and change with
            # the dataclasses' shape.
            facts = await self._retract_fact(command)
            if facts:
                await self._withdraw(command, report.retracted)
                return (
                    "retract",
                    (*report.memory_ids, *facts),
                    {
                        **report.details(),
                        "facts": list(facts),
                    },
                )
            await self._withdraw(command, report.retracted)
            return "retract", report.memory_ids, report.details()
        if command.kind is CommandKind.PIN:
            changed = await self.retractor.pin(agent_id, command.target)
            return "pin", (command.target,), {"changed": changed}
        if command.kind is CommandKind.UNPIN:
            changed = await self.retractor.unpin(agent_id, command.target)
            return "unpin", (command.target,), {"changed": changed}
        if command.kind is CommandKind.CONFIGURE:
            assert command.config is not None  # the parser refuses a configure without
            if self.configs is None:
                raise RuntimeError("no configuration store is wired to the command handler")
            current = (await self.configs.load([agent_id]))[agent_id]
            updated = apply_update(current, command.config)
            await self.configs.save(agent_id, updated)
            # The whole configuration it leaves (its non-default settings), so the
            # witness shows what held from here on, not only what changed.
            return "configure", (), {"config": config_to_json(updated)}
        if command.kind is CommandKind.IMPORT:
            assert command.chunk is not None  # the parser refuses an import without
            if self.importer is None:
                raise RuntimeError("no importer is wired to the command handler")
            return await self.importer.apply_chunk(agent_id, command.chunk)
        if command.kind in (CommandKind.PUBLISH, CommandKind.UNPUBLISH):
            if self.sharing is None:
                raise RuntimeError("no clade sharing is wired to the command handler")
            ts_ms, cause = command.ts_ms or 0, command.command_id
            if command.kind is CommandKind.PUBLISH:
                return await self.sharing.publish(
                    agent_id, command.target, command.route, ts_ms, cause
                )
            return await self.sharing.unpublish(
                agent_id, command.target, command.clade, ts_ms, cause
            )
        # What it published goes from every sibling before the agent goes, and the
        # agent from its clades.
        await self._withdraw(command, None)
        if self.sharing is not None:
            await self.sharing.leave_all(agent_id)
        removed = await self.eraser.forget(agent_id)
        # Recorded without content: that the agent was forgotten, and how much went.
        return "forget", (), {"keys_removed": removed}

    async def _withdraw(self, command: Command, memory_ids: Sequence[str] | None) -> None:
        """Withdraw the copies of what the command took (None: everything the agent
        published), each withdrawal a step of the command's witness."""
        if self.sharing is None or memory_ids == ():
            return
        steps = await self.sharing.withdraw_all(
            command.agent_id, memory_ids or (), command.ts_ms or 0, command.command_id
        )
        for op, ids, details in steps:
            await self.steps(op, ids, details)

    async def _retract_fact(self, command: Command) -> tuple[str, ...]:
        """The ids of the facts a retraction changed (the retracted one first)."""
        if self.facts is None:
            return ()
        steps = await self.facts.retract(command.agent_id, command.target, at_ms=command.ts_ms or 0)
        for op, ids, details in steps:
            await self.steps(op, ids, details)
        return tuple(dict.fromkeys(i for _, ids, _ in steps for i in ids))
