"""What the apply loop tells the world, stored before it is sent.

An ingest run's decisions, their witness records and the events that publish
them (memory-events and witness events) are written in one transaction (the
records through `WitnessPart`, the events through the partition's outbox). Only
then are the events handed to the producer; once it has flushed them they are
trimmed from the outbox. What a killed worker had not published is published by
the partition's next owner before it applies anything (`drain`), so a decision is
never stored unheard of, and its witness chain has no gap.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from grimoire.agents.journal.witness import witness_event
from grimoire.agents.ports import CommitEffects, Decided, EventSink, Staged
from grimoire.streams.trust.witness import WitnessRecord
from grimoire.tables.journal.outbox import OutboxEntry, sent_counts
from grimoire.tables.ports.journal import Outbox
from grimoire.tables.ports.transaction import TransactionPart
from grimoire.tables.trust.witness_store import Witness, WitnessPart
from grimoire.topics.declarations import TopicNames

__all__ = ["INGEST_OP", "Publication", "RunEffects"]

logger = logging.getLogger(__name__)

INGEST_OP = "ingest"


@dataclass
class Publication:
    witness: Witness
    outbox: Outbox
    sink: EventSink
    topics: TopicNames
    # Per journal partition: per agent, the entries at its outbox's head handed to
    # the producer in this batch, trimmed once it has flushed them.
    _sent: dict[int, Counter[str]] = field(default_factory=dict)

    async def drain(self, journal_partition: int) -> int:
        """Publish what an earlier owner (or a failed batch) left in the partition's
        outbox; how many entries that was."""
        self._sent[journal_partition] = Counter()
        pending = await self.outbox.pending(journal_partition)
        if not pending:
            return 0
        logger.info(
            "publishing %d events left in journal partition %d's outbox",
            len(pending),
            journal_partition,
        )
        for entry in pending:
            await self.sink.send(entry.topic, entry.key, entry.value)
        await self.sink.flush()
        await self.outbox.remove(journal_partition, sent_counts(pending))
        return len(pending)

    async def settle(self, journal_partition: int) -> None:
        """After a batch: wait for the broker to have everything sent, then trim."""
        sent = self._sent.get(journal_partition)
        if not sent:
            return
        await self.sink.flush()
        await self.outbox.remove(journal_partition, sent)
        self._sent[journal_partition] = Counter()

    async def hold_heads(self, agent_ids: Sequence[str]) -> None:
        """Read (or keep) each agent's witness head before its run reads any state:
        the run's transaction is fenced on that head (`WitnessPart`), so a state
        changed by another writer after this read cannot be written over."""
        for agent_id in agent_ids:
            await self.witness.head(agent_id)

    def for_run(self, journal_partition: int, positions: Sequence[tuple[str, int]]) -> RunEffects:
        """The effects of one ingest run: `positions` is (agent id, journal offset)
        of each of its entries, in order."""
        return RunEffects(self, journal_partition, tuple(positions))

    async def handed_over(self, journal_partition: int, entries: Sequence[OutboxEntry]) -> None:
        """Committed entries: to the producer now, trimmed at `settle`."""
        for entry in entries:
            await self.sink.send(entry.topic, entry.key, entry.value)
        self._sent.setdefault(journal_partition, Counter()).update(sent_counts(entries))


@dataclass(frozen=True, slots=True)
class RunEffects:
    publication: Publication
    journal_partition: int
    positions: tuple[tuple[str, int], ...]

    def sliced(self, start: int, stop: int) -> CommitEffects:
        return RunEffects(self.publication, self.journal_partition, self.positions[start:stop])

    async def stage(self, decided: Sequence[Sequence[Decided]]) -> Staged:
        if len(decided) != len(self.positions):
            raise ValueError(f"{len(decided)} decision lists for {len(self.positions)} entries")
        publication = self.publication
        records: list[WitnessRecord] = []
        entries: list[OutboxEntry] = []
        events_topic = publication.topics.memory_events
        for (agent_id, offset), decisions in zip(self.positions, decided, strict=True):
            if not decisions:
                continue
            record = await publication.witness.next(
                agent_id,
                journal_partition=self.journal_partition,
                journal_offset=offset,
                op=INGEST_OP,
                ids=sorted({d.memory_id for d in decisions}),
                fields=[d.summary() for d in decisions],
            )
            records.append(record)
            entries.extend(OutboxEntry(events_topic, d.agent_id, d.event) for d in decisions)
            entries.append(OutboxEntry(events_topic, agent_id, witness_event(record)))
        return _StagedRun(publication, self.journal_partition, tuple(records), tuple(entries))


@dataclass(frozen=True, slots=True)
class _StagedRun:
    publication: Publication
    journal_partition: int
    records: tuple[WitnessRecord, ...]
    entries: tuple[OutboxEntry, ...]

    @property
    def parts(self) -> Sequence[TransactionPart]:
        if not self.records:
            return ()
        return (
            WitnessPart(self.publication.witness.log, self.records),
            self.publication.outbox.part(self.journal_partition, self.entries),
        )

    async def committed(self) -> None:
        await self.publication.handed_over(self.journal_partition, self.entries)

    def abandoned(self) -> None:
        # The kept heads ran ahead of the log: read them again.
        for agent_id in sorted({record.agent_id for record in self.records}):
            self.publication.witness.invalidate(agent_id)
