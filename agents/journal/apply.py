"""The apply loop: the only writer of an agent's state, folding its journal in order.

Each journal partition is read by one loop. A batch of entries is opened (each with
its agent's key; an entry whose key was destroyed by forgetting is skipped, its
content gone), entries already applied are skipped (a re-journaled input, by its
agent's high-water mark for its source partition), and the rest are applied each
agent's in journal order, agents side by side: the ingest entries of every agent
that is free go to the write path together (one embedding batch, one transaction
that also stores their witness records and outbox events), every other entry runs
alone, in its agent's place. Every entry that changed something leaves a witness
record.

Failures are told apart: an outage (Redis unreachable, loading, a timeout) is
raised, so the caller retries the batch with backoff, and everything the batch
already applied is recognised then (marks move after each run; the handlers are
idempotent besides). Anything else is a bug that the same entry would hit again on
every retry and every replay: that entry is dead-lettered as `internal_error` with
its journal position, and the fold goes on (a replay does the same).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import orjson

from grimoire.agents.exceptions import PayloadUnreadable
from grimoire.agents.handlers.dead_letters import dead_letter
from grimoire.agents.handlers.facts import FACT_OP, FactHandler
from grimoire.agents.handlers.ingest import IngestHandler
from grimoire.agents.handlers.outcomes import OutcomeHandler
from grimoire.agents.journal.cipher import KEY_FORGOTTEN, SealedPayload, open_sealed
from grimoire.agents.journal.publication import Publication
from grimoire.agents.maintenance.handler import MaintenanceHandler
from grimoire.agents.ports import EventSink, InputMessage
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.journal.entry import (
    INGEST_KINDS,
    EntryKind,
    InvalidEntry,
    JournalEntry,
    associated_data,
    decode_entry,
)
from grimoire.streams.journal.fold import Run, SourceMarks, mark_key, runs
from grimoire.streams.journal.usage import RecallUsage, decode_usage
from grimoire.tables.config.store import ConfigStore
from grimoire.tables.journal.keystore import KeyStore
from grimoire.tables.journal.marks import AppliedMarks
from grimoire.tables.journal.witness_due import NoWitnessDue, WitnessDue, WitnessDueReader
from grimoire.topics.declarations import TopicNames

__all__ = [
    "FORGOTTEN_CHAIN",
    "ApplyReport",
    "CommandApplier",
    "JournalApplier",
    "Opened",
    "UsageApplier",
    "WitnessPort",
    "with_agent",
]

logger = logging.getLogger(__name__)

INTERNAL_ERROR = "internal_error"
# A run that holds up its partition this long is worth a line in the log.
SLOW_RUN_S = 0.25
FORGET_OP = "forget"
# A chain no agent can own (agent ids are letters, digits and `._-@+=/`).
FORGOTTEN_CHAIN = "~forgotten"


async def with_agent(entry: JournalEntry, keys: KeyStore) -> JournalEntry:
    """`entry` with its agent's id: version 2 names its agent by journal name, and
    whose it is the key store says while the agent lives (forgetting it removes the
    name with the keys: the id stays "")."""
    if entry.agent_id:
        return entry
    return replace(entry, agent_id=await keys.agent_named(entry.journal) or "")


def _is_forget(run: Run[Opened]) -> bool:
    if run.kind is not EntryKind.COMMAND:
        return False
    try:
        data = orjson.loads(run.items[0].message.value)
    except orjson.JSONDecodeError:
        return False
    return isinstance(data, dict) and data.get("command") == FORGET_OP


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class WitnessPort(Protocol):
    """Summarises one mutation in the agent's hash-chained witness log."""

    async def witnessed(self, agent_id: str, journal: tuple[int, int]) -> bool:
        """Whether the agent's chain already reaches the entry at `journal` (its
        entries are all on one journal partition, in order)."""
        ...

    async def record(
        self,
        agent_id: str,
        op: str,
        ids: Sequence[str],
        fields: Any,
        *,
        journal: tuple[int, int],
    ) -> None: ...


class UsageApplier(Protocol):
    async def apply_usage(
        self,
        agent_id: str,
        usage: RecallUsage,
        seq: int | None = None,
        request: str | None = None,
    ) -> bool:
        """Apply a usage entry's uses, once per entry `seq` and per recall
        `request`; whether it did now."""
        ...

    async def answered(self, agent_id: str, request: str, seq: int) -> bool:
        """Whether another entry than `seq` was applied for the recall `request`."""
        ...


class CommandApplier(Protocol):
    async def apply_command(
        self, message: InputMessage
    ) -> Sequence[tuple[str, Sequence[str], Any]]:
        """Apply a command (retract, forget, pin, unpin); a witness summary (op, ids,
        fields) of each mutation it made, in order (none: it changed nothing or was
        dead-lettered)."""
        ...


@dataclass(frozen=True, slots=True)
class Opened:
    """A journal entry with its payload opened, as the handlers see it: the input's
    bytes at its source coordinates (dead letters name where it came from)."""

    entry: JournalEntry
    message: InputMessage
    journal: tuple[int, int]  # (partition, offset) of the entry itself


@dataclass
class ApplyReport:
    entries: int = 0
    applied: int = 0
    skipped: int = 0  # re-journaled inputs applied before
    shredded: int = 0  # entries of a forgotten agent: their key is gone
    dead_lettered: int = 0  # unreadable envelopes or payloads, poison entries


def _is_never_an_outage(_: BaseException) -> bool:
    return False


@dataclass
class JournalApplier:
    keys: KeyStore
    marks: AppliedMarks
    ingest: IngestHandler
    outcomes: OutcomeHandler
    maintenance: MaintenanceHandler
    usage: UsageApplier
    commands: CommandApplier
    witness: WitnessPort
    sink: EventSink
    topics: TopicNames
    max_run: int = 64
    is_outage: Callable[[BaseException], bool] = field(default=_is_never_an_outage)
    # Ingest runs store their witness records and events with their decisions (an
    # outbox); without it they are recorded and sent after the commit.
    publication: Publication | None = None
    # Agents' configurations (ingest may be turned off); None: every agent ingests.
    configs: ConfigStore | None = None
    # Bi-temporal facts (asserts); None: a fact entry is a poison entry.
    facts: FactHandler | None = None
    # Witness records stored with an outcome's or a fact's effects, for the retry
    # of an entry whose worker died before witnessing it.
    due: WitnessDueReader = field(default_factory=NoWitnessDue)

    async def apply(self, messages: Sequence[InputMessage]) -> ApplyReport:
        """Fold `messages` (journal records of one partition, in offset order)."""
        report = ApplyReport(entries=len(messages))
        if not messages:
            return report
        partition = messages[0].partition or 0
        # A forget applied by another worker is seen before this batch opens an entry.
        await self.keys.refresh()
        if self.publication is not None:
            await self.publication.drain(partition)
        opened = [item for item in [await self._open(m, report) for m in messages] if item]
        sources = sorted(
            {mark_key(o.entry.source, o.entry.agent_id) for o in opened if o.entry.source}
        )
        marks = SourceMarks(dict(await self.marks.load(sources)))
        lanes: dict[str, list[Opened]] = {}
        for item in opened:
            entry = item.entry
            if marks.is_applied(entry.kind, entry.source, entry.agent_id):
                report.skipped += 1
                continue
            # Two copies of one input in the same batch: the first is applied.
            marks.advance(entry.kind, entry.source, entry.agent_id)
            lanes.setdefault(entry.agent_id, []).append(item)
        try:
            await self._fold_lanes(partition, lanes, report)
        except BaseException:
            if self.publication is not None:
                # Other agents' runs may have committed: what they handed to the
                # producer is trimmed if the store still answers, or else sent
                # again (byte for byte) by the retry's drain.
                try:
                    await self.publication.settle(partition)
                except Exception:
                    logger.warning(
                        "journal partition %d: outbox left for the next drain", partition
                    )
            raise
        if self.publication is not None:
            await self.publication.settle(partition)
        return report

    async def _fold_lanes(
        self, partition: int, lanes: Mapping[str, Sequence[Opened]], report: ApplyReport
    ) -> None:
        """Apply each agent's entries in journal order, agents side by side.

        An agent's state depends on its own entries alone, so only their order
        matters: a slow maintenance pass holds up its own agent, not the partition.
        Whenever agents are free and next in line with ingest entries, those go to
        the write path together (one embedding batch, one transaction); any other
        entry runs alone, beside them. Every run moves its agent's marks when it is
        done, so a failure leaves each agent's progress exact. On a failure the
        runs in flight finish, and the first failure is raised."""
        queues = {
            agent: deque(runs([(item.entry.kind, item) for item in items], max_run=self.max_run))
            for agent, items in lanes.items()
        }
        busy: dict[asyncio.Task[None], tuple[str, ...]] = {}
        failure: BaseException | None = None
        try:
            while failure is None:
                taken = {agent for agents in busy.values() for agent in agents}
                free = [agent for agent, queue in queues.items() if queue and agent not in taken]
                writers = [agent for agent in free if queues[agent][0].is_ingest]
                if writers:
                    items = sorted(
                        (item for agent in writers for item in queues[agent].popleft().items),
                        key=lambda item: item.journal[1],
                    )
                    task = asyncio.create_task(self._fold_ingest(partition, items, report))
                    busy[task] = tuple(writers)
                for agent in free:
                    if agent not in writers:
                        run = queues[agent].popleft()
                        busy[asyncio.create_task(self._fold_run(partition, run, report))] = (agent,)
                if not busy:
                    return
                done, _ = await asyncio.wait(busy, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    del busy[task]
                    if task.exception() is not None and failure is None:
                        failure = task.exception()
        finally:
            if busy:
                if failure is None:  # cancelled: nothing may go on writing behind us
                    for task in busy:
                        task.cancel()
                await asyncio.gather(*busy, return_exceptions=True)
        if failure is not None:
            raise failure

    async def _fold_ingest(
        self, partition: int, items: Sequence[Opened], report: ApplyReport
    ) -> None:
        for start in range(0, len(items), self.max_run):
            chunk = tuple(items[start : start + self.max_run])
            await self._fold_run(partition, Run(chunk[0].entry.kind, chunk), report)

    async def _fold_run(self, partition: int, run: Run[Opened], report: ApplyReport) -> None:
        started = time.perf_counter()
        sent = await self._apply_run(run, report)
        took = time.perf_counter() - started
        if took > SLOW_RUN_S:
            logger.info(
                "journal partition %d: %d %s entries (first of %s) took %.2fs",
                partition,
                len(run.items),
                run.kind.value,
                run.items[0].entry.agent_id,
                took,
            )
        if sent:
            # What went straight to the producer (dead letters, events of other
            # entries than ingest) must be on the broker before the marks say the
            # entries are done, or a crash would drop it unnoticed.
            await self.sink.flush()
        if _is_forget(run):
            # The marks name the agent: a forget's own mark would be the one thing of
            # it left. A copy of the command read again would forget it again, which
            # erases nothing more.
            return
        moved = SourceMarks({})
        for item in run.items:
            moved.advance(item.entry.kind, item.entry.source, item.entry.agent_id)
        await self.marks.advance(moved.marks)

    # ---- opening ------------------------------------------------------------------

    async def _open(self, message: InputMessage, report: ApplyReport) -> Opened | None:
        journal = (message.partition or 0, message.offset if message.offset is not None else -1)
        try:
            entry = decode_entry(message.value)
        except InvalidEntry as exc:
            await self._dead_letter(message, None, f"unreadable journal entry: {exc}")
            report.dead_lettered += 1
            return None
        entry = await with_agent(entry, self.keys)
        key = await self.keys.key(entry.agent_id, entry.key_id) if entry.agent_id else None
        if key is None:
            # Forgotten (or sealed by a worker that had not yet seen the forget):
            # nothing of it may be applied again, and nothing of it is dropped
            # unsaid. The dead letter names the agent by hash and carries no
            # payload: the envelope would name it in clear.
            report.shredded += 1
            rejection = Rejection(
                KEY_FORGOTTEN,
                f"sealed with destroyed key {entry.key_id} (seq {entry.seq}, agent "
                f"{entry.journal if entry.journal != entry.agent_id else _sha256(entry.agent_id)}"
                "): the agent was forgotten",
                None,
                None,
            )
            unsaid = replace(message, value=b"")
            await dead_letter(self.sink, self.topics.dead_letters, unsaid, rejection)
            return None
        sealed = SealedPayload(key_id=entry.key_id, nonce=entry.nonce, ciphertext=entry.ciphertext)
        try:
            payload = open_sealed(
                key, sealed, associated=associated_data(entry.agent_id, entry.key_id, entry.seq)
            )
        except PayloadUnreadable as exc:
            await self._dead_letter(message, entry.agent_id, f"payload does not open: {exc}")
            report.dead_lettered += 1
            return None
        source = entry.source
        input_message = InputMessage(
            value=payload,
            topic=source.topic if source else self.topics.journal,
            partition=source.partition if source else journal[0],
            offset=source.offset if source else journal[1],
        )
        return Opened(entry, input_message, journal)

    # ---- applying -----------------------------------------------------------------

    async def _apply_run(self, run: Run[Opened], report: ApplyReport) -> bool:
        """Apply a run; whether it sent anything straight to the producer."""
        try:
            sent = await self._dispatch(run)
            report.applied += len(run.items)
            return sent
        except Exception as exc:
            if self.is_outage(exc):
                raise
            if len(run.items) == 1:
                await self._poison(run.items[0], exc)
                report.dead_lettered += 1
                return True
            logger.warning("a run of %d entries failed; applying them one by one", len(run.items))
        # Find the poison entry: the others are applied as if alone (the handlers
        # recognise what the failed attempt already decided).
        sent = False
        for item in run.items:
            sent = await self._apply_run(Run(item.entry.kind, (item,)), report) or sent
        return sent

    async def _dispatch(self, run: Run[Opened]) -> bool:
        first = run.items[0]
        kind = run.kind
        if kind in INGEST_KINDS:
            messages = [(INGEST_KINDS[item.entry.kind], item.message) for item in run.items]
            # Read at the run's place in each agent's line: a `configure` before it
            # has been applied, one after it has not.
            agents = sorted({item.entry.agent_id for item in run.items})
            off = await self._ingest_off(agents)
            if self.publication is not None:
                await self.publication.hold_heads(agents)
                effects = self.publication.for_run(
                    first.journal[0], [(item.entry.agent_id, item.journal[1]) for item in run.items]
                )
                ingested = await self.ingest.handle_mixed(messages, effects, ingest_off=off)
                return ingested.dead_lettered > 0
            report = await self.ingest.handle_mixed(messages, ingest_off=off)
            for item, decided in zip(run.items, report.by_message, strict=True):
                if decided:
                    await self.witness.record(
                        item.entry.agent_id,
                        "ingest",
                        sorted({d.memory_id for d in decided}),
                        [d.summary() for d in decided],
                        journal=item.journal,
                    )
            return True
        if kind is EntryKind.OUTCOME:
            changed = await self.outcomes.handle(first.message, first.journal)
            if changed < 0:
                due = await self._due(first)
                changed = int(due.fields["changed"]) if due is not None else -1
            if changed >= 0:
                await self.witness.record(
                    first.entry.agent_id,
                    "outcome",
                    (),
                    {"changed": changed, "payload": _json_or_text(first.message.value)},
                    journal=first.journal,
                )
            return True
        if kind is EntryKind.FACT:
            if self.facts is None:
                raise InvalidEntry("no fact handler is wired to the apply loop")
            asserted = await self.facts.handle(first.message, first.journal)
            if asserted is None:
                due = await self._due(first)
                asserted = None if due is None else (due.ids, due.fields)
            if asserted is not None:
                ids, fields = asserted
                await self.witness.record(
                    first.entry.agent_id, FACT_OP, sorted(ids), fields, journal=first.journal
                )
            return True
        if kind is EntryKind.MAINTENANCE:
            plan = await self.maintenance.handle(first.message)
            if plan is not None and (plan.tasks or plan.postponed):
                await self.witness.record(
                    first.entry.agent_id,
                    "maintenance",
                    (),
                    {
                        "tick": plan.tick,
                        "tasks": [t.value for t in plan.tasks],
                        "postponed": [t.value for t in plan.postponed],
                    },
                    journal=first.journal,
                )
            return True
        if kind is EntryKind.USAGE:
            usage = decode_usage(first.message.value)
            source = first.entry.source
            request = (
                None if source is None else f"{source.topic}:{source.partition}:{source.offset}"
            )
            agent_id = first.entry.agent_id
            applied = await self.usage.apply_usage(agent_id, usage, first.entry.seq, request)
            if not applied and await self.witness.witnessed(agent_id, first.journal):
                return False  # applied and witnessed before this entry was read again
            if (
                not applied
                and request
                and await self.usage.answered(agent_id, request, first.entry.seq)
            ):
                # The recall was answered twice (its worker killed before committing
                # the request): the first answer's uses count, and were witnessed.
                return False
            await self.witness.record(
                first.entry.agent_id,
                "usage",
                sorted(set(usage.memory_ids)),
                {"as_of": usage.as_of_ms, "contrarian_window": usage.contrarian_window},
                journal=first.journal,
            )
            return True
        if kind is EntryKind.COMMAND:
            for op, ids, fields in await self.commands.apply_command(first.message):
                owner = first.entry.agent_id
                if op == FORGET_OP:
                    # The agent's own chain went with everything else of it: the
                    # forgetting is recorded in the deployment's chain, by a hash
                    # of the id, with no content.
                    fields = {"agent_sha256": _sha256(owner), **dict(fields)}
                    owner = FORGOTTEN_CHAIN
                await self.witness.record(owner, op, sorted(ids), fields, journal=first.journal)
            return True
        raise InvalidEntry(f"no rule applies {kind!r}")

    async def _due(self, item: Opened) -> WitnessDue | None:
        """The record `item`'s effects left due, when an earlier attempt applied
        them and died before witnessing (the chain falls short of the entry); None
        when they were applied by another entry (a copy of the input) or witnessed."""
        agent_id = item.entry.agent_id
        due = await self.due.due(agent_id)
        if due is None or due.journal != item.journal:
            return None
        if await self.witness.witnessed(agent_id, item.journal):
            return None
        logger.info(
            "journal entry %s@%s of %s: applied before, witnessed now",
            item.journal[0], item.journal[1], agent_id,
        )  # fmt: skip
        return due

    async def _ingest_off(self, agent_ids: Sequence[str]) -> set[str]:
        if self.configs is None:
            return set()
        configs = await self.configs.load(agent_ids)
        return {agent_id for agent_id, config in configs.items() if not config.ingests}

    async def _poison(self, item: Opened, exc: BaseException) -> None:
        logger.error(
            "journal entry %s@%s of %s failed deterministically; dead-lettered",
            item.journal[0],
            item.journal[1],
            item.entry.agent_id,
            exc_info=exc,
        )
        journal = InputMessage(
            value=item.message.value,
            topic=self.topics.journal,
            partition=item.journal[0],
            offset=item.journal[1],
        )
        detail = f"{type(exc).__name__}: {exc}"[:500]
        await self._dead_letter(journal, item.entry.agent_id, detail)

    async def _dead_letter(self, message: InputMessage, agent_id: str | None, detail: str) -> None:
        rejection = Rejection(INTERNAL_ERROR, detail, None, agent_id)
        await dead_letter(self.sink, self.topics.dead_letters, message, rejection)


def _json_or_text(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")
