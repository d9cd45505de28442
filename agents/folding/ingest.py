"""The rule for ingest entries (episodes, tool events, transcripts): the runs of
every free agent go to the write path together, one embedding batch and one
transaction that also stores their witness records and outbox events."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from grimoire.agents.handlers.clade import AutoShare, journaled_route
from grimoire.agents.handlers.ingest import IngestHandler
from grimoire.agents.journal.publication import INGEST_OP, Publication
from grimoire.agents.ports import Decided, Opened, WitnessPort
from grimoire.streams.journal.entry import INGEST_KINDS
from grimoire.streams.journal.fold import Run
from grimoire.tables.ports.config import ConfigStore

__all__ = ["IngestRule"]


@dataclass(frozen=True, slots=True)
class IngestRule:
    ingest: IngestHandler
    witness: WitnessPort
    # Stores the witness records and events with the decisions (an outbox); None:
    # they are recorded and sent after the commit.
    publication: Publication | None = None
    # Agents' configurations (ingest may be turned off); None: every agent ingests.
    configs: ConfigStore | None = None
    # Clades: a warning written for an agent with `share_policy` auto reaches its
    # clades (None: nothing is shared on write).
    auto_share: AutoShare | None = None

    async def apply(self, run: Run[Opened]) -> bool:
        messages = [(INGEST_KINDS[item.entry.kind], item.message) for item in run.items]
        # Read at the run's place in each agent's line: a `configure` before it has
        # been applied, one after it has not.
        agents = sorted({item.entry.agent_id for item in run.items})
        off = await self._ingest_off(agents)
        if self.publication is not None:
            await self.publication.hold_heads(agents)
            effects = self.publication.for_run(
                run.items[0].journal[0],
                [(item.entry.agent_id, item.journal[1]) for item in run.items],
            )
            ingested = await self.ingest.handle_mixed(messages, effects, ingest_off=off)
            await self._share_warnings(run, ingested.by_message)
            return ingested.dead_lettered > 0
        report = await self.ingest.handle_mixed(messages, ingest_off=off)
        for item, decided in zip(run.items, report.by_message, strict=True):
            if decided:
                await self.witness.record(
                    item.entry.agent_id,
                    INGEST_OP,
                    sorted({d.memory_id for d in decided}),
                    [d.summary() for d in decided],
                    journal=item.journal,
                )
        await self._share_warnings(run, report.by_message)
        return True

    async def _share_warnings(
        self, run: Run[Opened], by_message: Sequence[Sequence[Decided]]
    ) -> None:
        """The warnings the run wrote, to the clades their entries were routed to."""
        if self.auto_share is None or not by_message:
            return
        for item, decided in zip(run.items, by_message, strict=True):
            written = [d.memory_id for d in decided if d.written is not None]
            if not written:
                continue
            route, ts_ms = journaled_route(item.message.value, self.ingest.limits)
            if not route:
                continue
            agent = item.entry.agent_id
            shared = await self.auto_share.warnings(agent, written, route, ts_ms, "auto")
            for op, ids, fields in shared:
                journal = item.journal
                await self.witness.record(agent, op, sorted(ids), dict(fields), journal=journal)

    async def _ingest_off(self, agent_ids: Sequence[str]) -> set[str]:
        if self.configs is None:
            return set()
        configs = await self.configs.load(agent_ids)
        return {agent_id for agent_id, config in configs.items() if not config.ingests}
