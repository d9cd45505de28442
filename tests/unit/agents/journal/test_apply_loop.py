"""The sequencer and the apply loop without services: the reference key store,
marks and witness log, the handlers on the in-memory memory store.

What is checked: a fold is a function of the journal (batch boundaries change
nothing, witness chain included); an outcome journaled before its memory takes
effect once the memory is written; a re-journaled input is applied once; a
forgotten agent's entries are skipped; a poison entry is dead-lettered with its
journal position and the fold goes on; an outage is raised for the caller to retry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson
import pytest

from grimoire.agents.folding import fold_rules
from grimoire.agents.handlers.commands import CommandHandler
from grimoire.agents.handlers.usage import StoreUsage
from grimoire.agents.journal.apply import JournalApplier, with_agent
from grimoire.agents.journal.publication import Publication
from grimoire.agents.journal.sequencer import Sequencer
from grimoire.agents.journal.witness import PublishedWitness
from grimoire.agents.maintenance.handler import MaintenanceHandler
from grimoire.agents.ports import InputMessage, MemorySink
from grimoire.streams.config.agent_config import AgentConfig, apply_update
from grimoire.streams.journal.entry import INGEST_KINDS, EntryKind, decode_entry, encode_entry
from grimoire.streams.journal.usage import RecallUsage
from grimoire.streams.trust.witness import verify_chain
from grimoire.tables.testing.applied_marks import InMemoryAppliedMarks
from grimoire.tables.testing.config_store import InMemoryConfigStore, InMemoryDefaultConfig
from grimoire.tables.testing.keystore import InMemoryKeyStore
from grimoire.tables.testing.maintenance_ledger import InMemoryMaintenanceLedger
from grimoire.tables.testing.outbox import InMemoryOutbox
from grimoire.tables.testing.witness_log import InMemoryWitnessLog
from grimoire.tables.trust.witness_store import Witness
from tests.support.handlers import (
    TOPICS,
    TS,
    Rig,
    command_message,
    episode,
    messages,
    mid,
    outcome,
    recall_request,
)


class Commands:
    """Stands in for retraction and forgetting (tested on their own): records what
    it was asked, and fails the way it is told to."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []
        self.fail_with: BaseException | None = None

    async def apply_command(
        self, message: InputMessage
    ) -> Sequence[tuple[str, Sequence[str], Any]]:
        self.seen.append(message.value)
        if self.fail_with is not None:
            raise self.fail_with
        return [("pin", ("m-1",), {"changed": True})]


class JournalRig:
    """`published`: the worker's way (ingest decisions stored with their witness
    records and outbox events); without, they are recorded and sent after."""

    def __init__(
        self,
        *,
        is_outage: Any = None,
        published: bool = True,
        log: InMemoryWitnessLog | None = None,
        outbox: InMemoryOutbox | None = None,
        rig: Rig | None = None,
        keys: InMemoryKeyStore | None = None,
        marks: InMemoryAppliedMarks | None = None,
    ) -> None:
        self.rig = rig or Rig()
        self.sink = self.rig.sink
        self.keys = keys or InMemoryKeyStore()
        self.marks = marks or InMemoryAppliedMarks()
        self.log = log or InMemoryWitnessLog()
        self.outbox = outbox or InMemoryOutbox()
        self.commands = Commands()
        witness = Witness(self.log)

        async def live(_: str) -> int:
            return 0

        maintenance = MaintenanceHandler(
            ledgers=InMemoryMaintenanceLedger(),
            field_states=self.rig.store,
            runners={},
            sink=self.sink,
            topics=TOPICS,
            worker_id="w1",
            block_interval_ms=12_000,
            live_count=live,
        )
        self.sequencer = Sequencer(self.keys, self.sink, TOPICS)
        extra = {} if is_outage is None else {"is_outage": is_outage}
        publication = Publication(witness, self.outbox, self.sink, TOPICS) if published else None
        # What the registry's rules are built from; `use` swaps a part.
        self.parts: dict[str, Any] = {
            "ingest": self.rig.ingest,
            "outcomes": self.rig.outcomes,
            "maintenance": maintenance,
            "usage": StoreUsage(self.rig.store),
            "commands": self.commands,
            "witness": PublishedWitness(witness, self.sink, TOPICS),
            "publication": publication,
        }
        self.applier = JournalApplier(
            keys=self.keys,
            marks=self.marks,
            rules=fold_rules(**self.parts),
            sink=self.sink,
            topics=TOPICS,
            publication=publication,
            **extra,
        )

    def use(self, **parts: Any) -> None:
        """The fold's rules rebuilt with `parts` (a handler, the configurations)."""
        self.parts.update(parts)
        self.applier = replace(self.applier, rules=fold_rules(**self.parts))

    def journal(self) -> list[InputMessage]:
        """The journal as one partition, offsets in append order."""
        return [
            InputMessage(value=v, topic=TOPICS.journal, partition=0, offset=i)
            for i, v in enumerate(self.sink.on(TOPICS.journal))
        ]

    async def fold(self, journal: Sequence[InputMessage], chunk: int = 100) -> None:
        for start in range(0, len(journal), chunk):
            await self.applier.apply(journal[start : start + chunk])

    def on(self, topic: str) -> list[dict[str, Any]]:
        return self.rig.on(topic)


PIN_M1 = {"agent_id": "agent-1", "command": "pin", "memory_id": "m-1"}


def state_of(rig: JournalRig) -> list[dict[str, Any]]:
    """Every memory hash but its transaction time, and the usage hashes."""
    store = rig.rig.store
    hashes = []
    for doc in sorted(store.hashes(), key=lambda d: str(d["memory_id"])):
        kept = {k: v for k, v in doc.items() if k != "recorded_at"}
        hashes.append({"doc": kept, "usage": store.usage(str(doc["memory_id"]))})
    return hashes


EPISODES = [
    episode("agent-1", "disk full on node seven", TS, "a1"),
    episode("agent-1", "cpu load high on scheduler", TS + 1_000, "a2"),
    episode("agent-2", "disk full on node seven", TS + 2_000, "b1"),
    episode("agent-1", "network partition between racks", TS + 3_000, "a3"),
]


async def journal_a_mixed_history(rig: JournalRig) -> None:
    await rig.sequencer.append(EntryKind.EPISODE, messages(*EPISODES[:2]))
    positive = outcome("positive", [mid("agent-1", "a1", TS)], TS + 1_500, event_id="o1")
    await rig.sequencer.append(EntryKind.OUTCOME, [positive])
    await rig.sequencer.append(EntryKind.EPISODE, messages(*EPISODES[2:], first_offset=2))


async def journal_an_early_outcome_and_near_duplicates(rig: JournalRig) -> None:
    # The outcome waits for a1; a1's near-duplicates come right after it in one run,
    # and must be decided against a1 as the outcome left it, whatever the batching.
    early = outcome("positive", [mid("agent-1", "a1", TS)], TS - 10, event_id="early")
    await rig.sequencer.append(EntryKind.OUTCOME, [early])
    again = [
        episode("agent-1", "disk full on node seven", TS + 10 * n, f"dup-{n}") for n in range(1, 4)
    ]
    await rig.sequencer.append(EntryKind.EPISODE, messages(EPISODES[0], *again, EPISODES[1]))


@pytest.mark.parametrize("published", [True, False])
@pytest.mark.parametrize("chunk", [1, 2, 3, 100])
@pytest.mark.parametrize(
    "history", [journal_a_mixed_history, journal_an_early_outcome_and_near_duplicates]
)
async def test_the_fold_does_not_depend_on_batch_boundaries(
    chunk: int, history: Any, published: bool
) -> None:
    reference = JournalRig()
    await history(reference)
    await reference.fold(reference.journal(), chunk=100)

    other = JournalRig(published=published)
    await history(other)
    await other.fold(other.journal(), chunk=chunk)

    assert state_of(other) == state_of(reference)
    for agent in ("agent-1", "agent-2"):
        chain = await other.log.records(agent)
        assert [r.fields_digest for r in chain] == [
            r.fields_digest for r in await reference.log.records(agent)
        ]
        assert verify_chain(chain).ok


async def _memory_after(order: str) -> dict[str, Any]:
    rig = JournalRig()
    memory = mid("agent-1", "a1", TS)
    positive = outcome("positive", [memory], TS + 10, event_id="o-1")
    episodes = messages(EPISODES[0])
    if order == "outcome first":
        await rig.sequencer.append(EntryKind.OUTCOME, [positive])
    await rig.sequencer.append(EntryKind.EPISODE, episodes)
    if order == "outcome after":
        await rig.sequencer.append(EntryKind.OUTCOME, [positive])
    await rig.fold(rig.journal())
    doc = rig.rig.store.record(memory)
    assert doc is not None
    held = await rig.rig.store.held_outcomes("agent-1", [memory])
    return {
        "confidence": doc["confidence"],
        "strength": doc.get("strength"),
        "last_accessed": rig.rig.store.usage(memory).get("last_accessed"),
        "held": held,
        "events": [e["reason"] for e in rig.rig.events() if e["type"] == "GrimoireOutcome"],
    }


async def test_an_outcome_before_its_memory_takes_effect_when_it_is_written() -> None:
    early = await _memory_after("outcome first")
    late = await _memory_after("outcome after")
    none = await _memory_after("no outcome")
    assert float(early["strength"]) == float(late["strength"]) == 2.0
    assert early["confidence"] == late["confidence"] != none["confidence"]
    assert early["last_accessed"] == late["last_accessed"] == str(TS + 10)
    assert early["held"] == late["held"] == []  # nothing left waiting
    assert early["events"] == ["applied to 0 of 1 memories, held for 1 not written yet"]
    assert late["events"] == ["applied to 1 of 1 memories"]


async def test_a_rejournaled_input_is_applied_once() -> None:
    rig = JournalRig()
    first = messages(*EPISODES[:2])
    await rig.sequencer.append(EntryKind.EPISODE, first)
    # The sequencer crashed after writing, before committing: it reads them again.
    await rig.sequencer.append(EntryKind.EPISODE, first)
    journal = rig.journal()
    await rig.fold(journal[:3])
    report = await rig.applier.apply(journal[3:])
    assert report.skipped == 1
    decisions = [e for e in rig.rig.events() if e.get("candidate_id")]
    assert len(decisions) == 2
    assert len(await rig.log.records("agent-1")) == 2


async def test_a_maintenance_command_for_a_forgotten_agent_is_not_journaled() -> None:
    rig = JournalRig()
    await rig.sequencer.append(EntryKind.EPISODE, messages(EPISODES[0]))
    await rig.keys.forget("agent-1")
    timer = {"agent_id": "agent-1", "issued_by": "worker-1", "pressure": "normal"}
    command = InputMessage(orjson.dumps(timer), TOPICS.maintenance, 0, 0)
    before = len(rig.journal())
    report = await rig.sequencer.append(EntryKind.MAINTENANCE, [command])
    # Journaled, it would have given the agent a new key and its defaults: back to life.
    assert report.stale == 1 and report.journaled == 0
    assert len(rig.journal()) == before and not await rig.keys.has_key("agent-1")
    # A manual request for an agent not seen yet is journaled (its events may follow).
    manual = InputMessage(orjson.dumps({"agent_id": "agent-9"}), TOPICS.maintenance, 0, 1)
    assert (await rig.sequencer.append(EntryKind.MAINTENANCE, [manual])).journaled == 1


async def test_a_forgotten_agents_entries_are_skipped() -> None:
    rig = JournalRig()
    await rig.sequencer.append(EntryKind.EPISODE, messages(*EPISODES))
    await rig.keys.forget("agent-2")
    report = await rig.applier.apply(rig.journal())
    assert report.shredded == 1 and report.applied == 3
    assert all(doc["agent_id"] != "agent-2" for doc in rig.rig.store.hashes())
    # Never dropped unsaid, and the dead letter does not name the agent in clear.
    (letter,) = rig.on(TOPICS.dead_letters)
    assert letter["reason"] == "key_forgotten" and letter.get("agent_id") is None
    assert "agent-2" not in str(letter) and not letter.get("payload")


async def test_a_poison_entry_is_dead_lettered_with_its_place_and_the_fold_goes_on() -> None:
    rig = JournalRig()
    rig.commands.fail_with = RuntimeError("a bug")
    await rig.sequencer.append(EntryKind.COMMAND, [command_message(PIN_M1)])
    await rig.sequencer.append(EntryKind.EPISODE, messages(EPISODES[0]))
    report = await rig.applier.apply(rig.journal())
    assert report.dead_lettered == 1 and report.applied == 1
    (letter,) = rig.on(TOPICS.dead_letters)
    assert letter["reason"] == "internal_error"
    assert (letter["source_topic"], letter["offset"]) == (TOPICS.journal, 0)
    assert "a bug" in letter["detail"]
    assert rig.rig.store.record(mid("agent-1", "a1", TS)) is not None


async def test_an_entry_of_a_kind_with_no_rule_is_a_poison_entry() -> None:
    # The rig registers no fact rule (a deployment without facts): the loop knows
    # no handler, so such an entry is dead-lettered and the fold goes on.
    rig = JournalRig()
    assert EntryKind.FACT not in rig.applier.rules
    fact = {"agent_id": "agent-1", "subject": "db", "predicate": "is", "object": "up", "ts": TS}
    await rig.sequencer.append(
        EntryKind.FACT, [InputMessage(orjson.dumps(fact), TOPICS.facts, partition=0, offset=0)]
    )
    await rig.sequencer.append(EntryKind.EPISODE, messages(EPISODES[0]))
    report = await rig.applier.apply(rig.journal())
    assert report.dead_lettered == 1 and report.applied == 1
    (letter,) = rig.on(TOPICS.dead_letters)
    assert letter["reason"] == "internal_error" and "no rule applies" in letter["detail"]
    assert rig.rig.store.record(mid("agent-1", "a1", TS)) is not None


def test_every_entry_kind_but_the_optional_ones_has_a_rule_and_ingest_kinds_share_one() -> None:
    # facts and clades are wired by the composition root when it has their stores
    rules = JournalRig().applier.rules
    assert set(rules) == set(EntryKind) - {EntryKind.FACT, EntryKind.CLADE}
    assert len({id(rules[kind]) for kind in INGEST_KINDS}) == 1


async def test_an_outage_is_raised_and_the_entry_stays_unapplied() -> None:
    rig = JournalRig(is_outage=lambda exc: isinstance(exc, ConnectionError))
    rig.commands.fail_with = ConnectionError("redis gone")
    forget = command_message({"agent_id": "agent-1", "command": "forget"}, offset=5)
    await rig.sequencer.append(EntryKind.COMMAND, [forget])
    with pytest.raises(ConnectionError):
        await rig.applier.apply(rig.journal())
    assert rig.marks.marks == {}
    rig.commands.fail_with = None
    report = await rig.applier.apply(rig.journal())  # the retry
    assert report.applied == 1 and len(rig.commands.seen) == 2


async def test_a_tampered_payload_is_dead_lettered_not_applied() -> None:
    rig = JournalRig()
    await rig.sequencer.append(EntryKind.EPISODE, messages(EPISODES[0]))
    (message,) = rig.journal()
    entry = decode_entry(message.value)
    forged = encode_entry(replace(entry, seq=entry.seq + 1))  # moved to another place
    report = await rig.applier.apply([InputMessage(forged, TOPICS.journal, 0, 0)])
    assert report.dead_lettered == 1 and rig.rig.store.hashes() == []
    (letter,) = rig.on(TOPICS.dead_letters)
    assert letter["reason"] == "internal_error" and "does not open" in letter["detail"]


async def test_an_input_without_an_owner_is_dead_lettered_by_the_sequencer() -> None:
    rig = JournalRig()
    report = await rig.sequencer.append(
        EntryKind.EPISODE, messages(b"{not json", orjson.dumps({"text": "no agent"}))
    )
    assert report.journaled == 0 and report.dead_lettered == 2
    assert [d["reason"] for d in rig.on(TOPICS.dead_letters)] == ["invalid_json", "missing_field"]
    assert rig.journal() == []


async def journaling_recalls() -> JournalRig:
    """A rig with a1 applied, whose recalls journal the uses they serve (as the worker's do)."""
    rig = JournalRig()
    await rig.sequencer.append(EntryKind.EPISODE, messages(EPISODES[0]))
    await rig.fold(rig.journal())
    rig.rig.recall.usage = rig.sequencer
    return rig


async def test_usage_entries_apply_the_uses_a_recall_served() -> None:
    rig = await journaling_recalls()
    await rig.rig.recall.handle(recall_request(as_of=TS + 500))
    memory = mid("agent-1", "a1", TS)
    assert "last_accessed" not in rig.rig.store.usage(memory)  # recall only read
    await rig.fold(rig.journal()[1:])
    assert rig.rig.store.usage(memory)["last_accessed"] == str(TS + 500)
    assert [r.op for r in await rig.log.records("agent-1")] == ["ingest", "usage"]


class BrokerGone(MemorySink):
    """A producer that takes nothing once `gone` (the worker dies at that point)."""

    gone = False

    async def send(
        self, topic: str, key: str, value: bytes, *, partition: int | None = None
    ) -> None:
        if self.gone and topic == TOPICS.memory_events:
            raise ConnectionError("killed")
        await super().send(topic, key, value, partition=partition)


async def test_decisions_stored_but_not_published_are_published_by_the_next_owner() -> None:
    # The worker is killed right after its transaction: the decisions, their
    # witness records and their events are stored; nothing reached the broker.
    rig = Rig()
    rig.sink = rig.ingest.sink = BrokerGone()
    first = JournalRig(rig=rig, is_outage=lambda exc: isinstance(exc, ConnectionError))
    await first.sequencer.append(EntryKind.EPISODE, messages(*EPISODES))
    journal = first.journal()
    rig.sink.gone = True
    with pytest.raises(ConnectionError):
        await first.applier.apply(journal)
    assert rig.events() == []
    assert len(await first.outbox.pending(0)) == 2 * len(EPISODES)  # decision + witness each
    assert len(await first.log.records("agent-1")) == 3  # stored with the decisions

    # The partition's next owner: same stores, a live producer. It publishes what
    # was left before anything else, and the re-read entries change nothing.
    rig.sink.gone = False
    second = JournalRig(
        rig=rig, log=first.log, outbox=first.outbox, keys=first.keys, marks=first.marks
    )
    report = await second.applier.apply(journal)
    decisions = [e for e in rig.events() if e.get("candidate_id")]
    assert sorted(e["source_event_id"] for e in decisions) == ["a1", "a2", "a3", "b1"]
    witnessed = [e for e in rig.events() if "fields_digest" in e]
    # Agent by agent (each agent's outbox is its own, in its slot on a cluster),
    # each agent's in order.
    assert [(e["agent_id"], e["seq"]) for e in witnessed] == [
        ("agent-1", 1), ("agent-1", 2), ("agent-1", 3), ("agent-2", 1)
    ]  # fmt: skip
    assert await second.outbox.pending(0) == []
    assert report.applied == len(EPISODES)  # recognised as decided: no second decision
    chain = await second.log.records("agent-1")
    assert len(chain) == 3 and verify_chain(chain).ok


async def test_events_are_trimmed_only_after_the_broker_has_them() -> None:
    rig = JournalRig()
    await rig.sequencer.append(EntryKind.EPISODE, messages(*EPISODES[:2]))
    flushes = rig.sink.flushes
    await rig.applier.apply(rig.journal())
    assert rig.sink.flushes > flushes
    assert await rig.outbox.pending(0) == []
    assert len([e for e in rig.rig.events() if e.get("candidate_id")]) == 2


async def test_a_dead_letter_is_flushed_before_its_entry_is_marked_applied() -> None:
    rig = JournalRig()
    bad = InputMessage(b'{"agent_id": "agent-1", "text": 7}', TOPICS.episodes, 0, 0)
    await rig.sequencer.append(EntryKind.EPISODE, [bad])
    marked_after: list[int] = []
    advance = rig.marks.advance

    async def watched(marks: Any) -> None:
        marked_after.append(rig.sink.flushes)
        await advance(marks)

    rig.applier.marks.advance = watched  # type: ignore[method-assign]
    flushes = rig.sink.flushes
    await rig.applier.apply(rig.journal())
    assert len(rig.on(TOPICS.dead_letters)) == 1
    assert marked_after == [flushes + 1]


class HeldMaintenance:
    """A maintenance pass that takes until it is let go (a slow pass)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def handle(self, message: InputMessage) -> None:
        self.started.set()
        await self.release.wait()


async def test_a_slow_maintenance_pass_holds_up_its_own_agent_and_no_other() -> None:
    rig = JournalRig()
    held = HeldMaintenance()
    rig.use(maintenance=held)
    command = InputMessage(orjson.dumps({"agent_id": "agent-1"}), TOPICS.maintenance, 0, 0)
    await rig.keys.key_for("agent-1")  # a known agent: the block timer sends for no other
    await rig.sequencer.append(EntryKind.MAINTENANCE, [command])
    await rig.sequencer.append(
        EntryKind.EPISODE,
        messages(EPISODES[0], EPISODES[2]),  # agent-1's after its pass, then agent-2's
    )
    folding = asyncio.create_task(rig.applier.apply(rig.journal()))
    await held.started.wait()
    for _ in range(50):  # agent-2's episode goes through while agent-1's pass runs
        if rig.rig.store.record(mid("agent-2", "b1", TS + 2_000)) is not None:
            break
        await asyncio.sleep(0)
    assert rig.rig.store.record(mid("agent-2", "b1", TS + 2_000)) is not None
    assert rig.rig.store.record(mid("agent-1", "a1", TS)) is None  # waits its turn
    assert not folding.done()
    held.release.set()
    report = await folding
    assert report.applied == 3
    assert rig.rig.store.record(mid("agent-1", "a1", TS)) is not None


async def test_a_failing_agent_leaves_the_others_applied_and_their_marks_moved() -> None:
    rig = JournalRig(is_outage=lambda exc: isinstance(exc, ConnectionError))
    rig.commands.fail_with = ConnectionError("redis gone")
    await rig.sequencer.append(EntryKind.COMMAND, [command_message(PIN_M1)])
    await rig.sequencer.append(EntryKind.EPISODE, messages(EPISODES[0], EPISODES[2]))
    with pytest.raises(ConnectionError):
        await rig.applier.apply(rig.journal())
    # agent-1 stopped at its command; agent-2's episode went through and is marked.
    assert rig.rig.store.record(mid("agent-1", "a1", TS)) is None
    assert rig.rig.store.record(mid("agent-2", "b1", TS + 2_000)) is not None
    rig.commands.fail_with = None
    report = await rig.applier.apply(rig.journal())
    assert (report.skipped, report.applied) == (1, 2)
    assert len([e for e in rig.rig.events() if e.get("candidate_id")]) == 2


def configure(update: dict[str, Any], offset: int) -> InputMessage:
    payload = {"agent_id": "agent-1", "command": "configure", "config": update}
    return command_message(payload, offset)


def configured_rig() -> tuple[JournalRig, InMemoryConfigStore]:
    """A rig whose commands are the real handler's (configure needs neither a
    retractor nor an eraser), with the configuration store it and the fold share."""
    rig = JournalRig()
    configs = InMemoryConfigStore()
    rig.use(
        commands=CommandHandler(
            retractor=None,  # type: ignore[arg-type]
            eraser=None,  # type: ignore[arg-type]
            sink=rig.sink,
            topics=TOPICS,
            configs=configs,
        ),
        configs=configs,
    )
    return rig, configs


async def test_a_configure_command_turns_ingest_off_and_on_from_the_next_event() -> None:
    rig, configs = configured_rig()
    await rig.sequencer.append(EntryKind.EPISODE, messages(EPISODES[0]))
    await rig.sequencer.append(EntryKind.COMMAND, [configure({"ingest_enabled": False}, 0)])
    await rig.sequencer.append(
        EntryKind.EPISODE, messages(EPISODES[1], EPISODES[2], first_offset=1)
    )
    await rig.sequencer.append(EntryKind.COMMAND, [configure({"ingest_enabled": None}, 1)])
    await rig.sequencer.append(EntryKind.EPISODE, messages(EPISODES[3], first_offset=3))
    await rig.fold(rig.journal(), chunk=100)

    store = rig.rig.store
    assert store.record(mid("agent-1", "a1", TS)) is not None  # before: decided
    assert store.record(mid("agent-1", "a2", TS + 1_000)) is None  # while off: skipped
    assert store.record(mid("agent-2", "b1", TS + 2_000)) is not None  # another agent
    assert store.record(mid("agent-1", "a3", TS + 3_000)) is not None  # on again
    events = {(e["source_event_id"], e["type"]) for e in rig.rig.events() if "candidate_id" in e}
    assert ("a2", "GrimoireSkipped") in events and ("a3", "GrimoireWrite") in events
    ops = [(r.op, r.fields_digest != "") for r in await rig.log.records("agent-1")]
    assert [op for op, _ in ops] == ["ingest", "configure", "ingest", "configure", "ingest"]
    assert (await configs.load(["agent-1"]))["agent-1"] == AgentConfig()


async def test_a_new_agent_starts_with_the_deployments_defaults_journaled() -> None:
    rig, configs = configured_rig()
    await rig.sequencer.append(EntryKind.EPISODE, messages(EPISODES[0]))  # before defaults
    rig.sequencer.defaults = InMemoryDefaultConfig(
        apply_update(AgentConfig(), {"ingest_enabled": False})
    )
    await rig.sequencer.append(EntryKind.EPISODE, messages(*EPISODES[1:], first_offset=1))
    journal = rig.journal()
    entries = [await with_agent(decode_entry(m.value), rig.keys) for m in journal]
    # agent-2 is new: its defaults come first, with its first sequence number.
    assert [(e.agent_id, e.kind, e.seq) for e in entries] == [
        ("agent-1", EntryKind.EPISODE, 1),
        ("agent-1", EntryKind.EPISODE, 2),
        ("agent-2", EntryKind.COMMAND, 1),
        ("agent-2", EntryKind.EPISODE, 2),
        ("agent-1", EntryKind.EPISODE, 3),
    ]
    await rig.fold(journal)
    assert (await configs.load(["agent-2"]))["agent-2"].ingest_enabled is False
    assert (await configs.load(["agent-1"]))["agent-1"] == AgentConfig()  # not new
    assert rig.rig.store.record(mid("agent-2", "b1", TS + 2_000)) is None  # skipped
    assert rig.rig.store.record(mid("agent-1", "a3", TS + 3_000)) is not None


async def test_a_usage_entry_read_again_counts_once_and_is_witnessed_once() -> None:
    rig = await journaling_recalls()
    await rig.rig.recall.handle(recall_request(as_of=TS + 500))
    usage_entries = rig.journal()[1:]
    await rig.fold(usage_entries)
    # The worker died before committing the journal offset: the entry is read again.
    await rig.fold(usage_entries)
    memory = mid("agent-1", "a1", TS)
    assert rig.rig.store.usage(memory)["included_count_total"] == "1"
    assert [r.op for r in await rig.log.records("agent-1")] == ["ingest", "usage"]


async def test_a_usage_entry_applied_but_not_witnessed_is_witnessed_when_read_again() -> None:
    rig = await journaling_recalls()
    await rig.rig.recall.handle(recall_request(as_of=TS + 500))
    (entry,) = rig.journal()[1:]
    opened = decode_entry(entry.value)
    # Killed between the uses' transaction and the witness record.
    await StoreUsage(rig.rig.store).apply_usage(
        "agent-1", RecallUsage((mid("agent-1", "a1", TS),), TS + 500, None), opened.seq
    )
    await rig.fold([entry])
    assert rig.rig.store.usage(mid("agent-1", "a1", TS))["included_count_total"] == "1"
    assert [r.op for r in await rig.log.records("agent-1")] == ["ingest", "usage"]


async def test_a_recall_answered_twice_counts_its_uses_once() -> None:
    rig = await journaling_recalls()
    request = recall_request(as_of=TS + 500)
    # Its worker killed before committing the request: the next one answers it again,
    # and journals a second usage entry (another seq, the same request).
    await rig.rig.recall.handle(request)
    await rig.rig.recall.handle(request)
    first, second = rig.journal()[1:]
    assert decode_entry(first.value).seq != decode_entry(second.value).seq
    report = await rig.applier.apply([first, second])
    assert report.applied == 2 and report.dead_lettered == 0
    assert rig.rig.store.usage(mid("agent-1", "a1", TS))["included_count_total"] == "1"
    assert [r.op for r in await rig.log.records("agent-1")] == ["ingest", "usage"]
