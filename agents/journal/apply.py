"""The apply loop: the only writer of an agent's state, folding its journal in order.

Each journal partition is read by one loop. A batch of entries is opened (each with
its agent's key; an entry whose key was destroyed by forgetting is skipped, its
content gone), entries already applied are skipped (a re-journaled input, by its
agent's high-water mark for its source partition), and the rest are applied each
agent's in journal order, agents side by side: the ingest entries of every agent
that is free go to the write path together (one embedding batch, one transaction
that also stores their witness records and outbox events), every other entry runs
alone, in its agent's place. A run goes to the rule registered for its kind
(`grimoire.agents.ports.EntryRule`, the registry filled by the composition root):
the loop knows no handler. Every entry that changed something leaves a witness
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

import orjson

from grimoire.agents.dead_letters import dead_letter
from grimoire.agents.exceptions import PayloadUnreadable
from grimoire.agents.journal.cipher import KEY_FORGOTTEN, SealedPayload, open_sealed
from grimoire.agents.journal.publication import Publication
from grimoire.agents.ports import EntryRule, EventSink, InputMessage, Opened
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.journal.entry import (
    EntryKind,
    InvalidEntry,
    JournalEntry,
    associated_data,
    decode_entry,
)
from grimoire.streams.journal.fold import Run, SourceMarks, mark_key, runs
from grimoire.tables.ports.journal import AppliedMarks, KeyStore
from grimoire.topics.declarations import TopicNames

__all__ = ["FORGET_OP", "ApplyReport", "JournalApplier", "agent_sha256", "with_agent"]

logger = logging.getLogger(__name__)

INTERNAL_ERROR = "internal_error"
# A run that holds up its partition this long is worth a line in the log.
SLOW_RUN_S = 0.25
FORGET_OP = "forget"


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


def agent_sha256(agent_id: str) -> str:
    """How a forgotten agent is named where it must still be named (dead letters of
    its entries, the deployment's chain): a hash of its id."""
    return hashlib.sha256(agent_id.encode()).hexdigest()


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
    # Every entry kind to the rule applying it, filled by the composition root
    # (`grimoire.agents.folding.fold_rules`): the loop knows no handler.
    rules: Mapping[EntryKind, EntryRule]
    sink: EventSink
    topics: TopicNames
    max_run: int = 64
    is_outage: Callable[[BaseException], bool] = field(default=_is_never_an_outage)
    # The ingest rule's outbox: what an earlier owner of a partition left unsent is
    # published before the partition's next batch (None: no outbox).
    publication: Publication | None = None

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
            named = (
                entry.journal if entry.journal != entry.agent_id else agent_sha256(entry.agent_id)
            )
            rejection = Rejection(
                KEY_FORGOTTEN,
                f"sealed with destroyed key {entry.key_id} (seq {entry.seq}, agent {named}"
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
        rule = self.rules.get(run.kind)
        if rule is None:
            raise InvalidEntry(f"no rule applies {run.kind!r}")
        return await rule.apply(run)

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
