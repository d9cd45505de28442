"""CommandHandler (agents/handlers/commands.py): a retract command's witness fields
are the retraction report's `details()`, ids and counts only; the steps the
retraction handler reported come first, in order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grimoire.agents.handlers.commands import CommandHandler, StepLog
from grimoire.agents.handlers.retraction import RetractionHandler, RetractionReport
from grimoire.agents.ports import InputMessage
from grimoire.streams.model.records import EventType
from grimoire.streams.write.plan import aggregate_id
from grimoire.tables.testing.derivations import InMemoryDerivationStore
from tests.support.handlers import TOPICS, TS, Rig, command_message, episode, messages, mid

A = "agent-1"
REPEAT = "rpc endpoint timed out on node seven"


@dataclass
class RecordingRetractor:
    """The real retraction handler, keeping each report it returned."""

    inner: RetractionHandler
    reports: list[RetractionReport] = field(default_factory=list)

    async def retract(self, agent_id: str, source_event_id: str, *, at_ms: int) -> RetractionReport:
        report = await self.inner.retract(agent_id, source_event_id, at_ms=at_ms)
        self.reports.append(report)
        return report

    async def pin(self, agent_id: str, memory_id: str) -> bool:
        return await self.inner.pin(agent_id, memory_id)

    async def unpin(self, agent_id: str, memory_id: str) -> bool:
        return await self.inner.unpin(agent_id, memory_id)


class NoEraser:
    async def forget(self, agent_id: str) -> int:
        raise AssertionError("no forget command is sent here")


def command(**fields: Any) -> InputMessage:
    return command_message({"agent_id": A, "ts": TS + 10, **fields}, offset=3)


def _plain(value: object) -> bool:
    """Ids, counts and flags: nothing that carries a rendering of an object."""
    if isinstance(value, list):
        return all(isinstance(item, str) and "(" not in item for item in value)
    return isinstance(value, bool | int) or (isinstance(value, str) and "(" not in value)


async def test_a_retract_command_witnesses_the_report_s_details() -> None:
    rig = Rig()
    for n in range(3):  # admitted, then folded twice into one aggregate
        payload = episode(A, REPEAT, TS + n, f"agg-{n}")
        await rig.ingest.handle(EventType.EPISODE, messages(payload))
    group = aggregate_id(A, mid(A, "agg-0", TS))
    steps = StepLog()
    retractor = RecordingRetractor(
        RetractionHandler(InMemoryDerivationStore(rig.store), rig.fake, witness=steps)
    )
    handler = CommandHandler(retractor, NoEraser(), rig.sink, TOPICS, steps=steps)

    made = await handler.apply_command(command(command="retract", source_event_id="agg-2"))

    (report,) = retractor.reports
    *reported, (op, ids, fields) = made
    assert [(step_op, tuple(step_ids)) for step_op, step_ids, _ in reported] == [
        ("retract.aggregate_share", (group,))
    ]
    assert (op, tuple(ids)) == ("retract", (group,))
    assert fields == report.details()
    assert fields == {
        "source_event_id": "agg-2",
        "retracted": [],
        "aggregate_shares": [group],
        "summaries_rebuilt": [],
        "aggregates_rebuilt": [],
        "insights_demoted": [],
        "reinforcements": [],
        "edges_dropped": 1,
        "playbook_regenerated": False,
    }
    assert all(_plain(value) for value in fields.values())


async def test_a_retract_command_that_finds_nothing_witnesses_an_empty_report() -> None:
    rig = Rig()
    steps = StepLog()
    retractor = RecordingRetractor(
        RetractionHandler(InMemoryDerivationStore(rig.store), rig.fake, witness=steps)
    )
    handler = CommandHandler(retractor, NoEraser(), rig.sink, TOPICS, steps=steps)
    made = await handler.apply_command(command(command="retract", source_event_id="ev-none"))
    assert made == [("retract", (), RetractionReport(A, "ev-none").details())]
