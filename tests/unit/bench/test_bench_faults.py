"""The pure parts of the fault benchmark: its streams, the fuzz, the fault plan, and
how lost, duplicated and unaccounted inputs are counted."""

from __future__ import annotations

import asyncio
from collections import Counter
from itertools import pairwise

import pytest

from bench.faults import (
    DEAD_LETTER,
    DECISION,
    FUZZ_KINDS,
    INPUT_KINDS,
    RECALL_SLOT,
    SLOT_ROLES,
    Expected,
    FuzzMessage,
    SendGate,
    account_fuzz,
    account_valid,
    agent_kind,
    checkpoint_chunks,
    checkpoint_inputs,
    command_inputs,
    expected_outcome,
    fact_event_id,
    fault_plan,
    fuzz_messages,
    outcome_inputs,
    valid_events,
)
from grimoire.infra.settings import Settings
from grimoire.streams.inbound.command import Command, CommandKind, parse_command
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.inbound.fact import parse_fact
from grimoire.streams.inbound.outcome import parse_outcome
from grimoire.topics.declarations import TopicNames

TOPICS = TopicNames("fa0000")
# The fuzz the issue names, each a kind of its own (or more).
REQUIRED_KINDS = {
    "invalid_json",
    "invalid_utf8",
    "deep_nesting_over_limit",
    "huge_text",
    "nan_infinity",
    "wrong_types",
    "unknown_schema_version",
    "forbidden_agent_id",
    "recall_hostile_reply_to",
    "outcome_bad_fields",
    "command_bad_fields",
}
# Valid-looking kinds: what the worker must decide, not dead-letter.
VALID_LOOKING = {"edge_valid", "mismatched_key"}


@pytest.fixture(scope="module")
def settings() -> Settings:
    return Settings(_env_file=None)


@pytest.fixture(scope="module")
def fuzz() -> list[FuzzMessage]:
    return fuzz_messages(TOPICS, count=2_300, seed=21)


def test_the_fuzz_covers_every_required_kind_in_turn(fuzz: list[FuzzMessage]) -> None:
    assert set(FUZZ_KINDS) >= REQUIRED_KINDS
    counts = Counter(message.kind for message in fuzz)
    assert set(counts) == set(FUZZ_KINDS)
    assert max(counts.values()) - min(counts.values()) <= 1
    assert {m.topic_kind for m in fuzz} == {
        "episodes",
        "tool_events",
        "transcripts",
        "recall_requests",
        "outcomes",
        "commands",
    }


def test_every_fuzz_message_is_unique_and_the_fuzz_is_seeded(fuzz: list[FuzzMessage]) -> None:
    assert len({m.value for m in fuzz}) == len(fuzz)  # so each is found on its topic again
    assert fuzz_messages(TOPICS, count=2_300, seed=21) == fuzz
    assert fuzz_messages(TOPICS, count=2_300, seed=22) != fuzz


def test_hostile_fuzz_is_dead_lettered_and_valid_looking_fuzz_decided(
    fuzz: list[FuzzMessage], settings: Settings
) -> None:
    for message in fuzz:
        expected = expected_outcome(TOPICS, message.topic_kind, message.value, settings)
        if message.kind in VALID_LOOKING:
            assert expected.outcome == DECISION and expected.candidates, message
        else:
            assert expected.outcome == DEAD_LETTER, message


def test_the_fuzz_is_as_hostile_as_named(fuzz: list[FuzzMessage], settings: Settings) -> None:
    reasons: dict[str, set[str | None]] = {}
    for message in fuzz:
        expected = expected_outcome(TOPICS, message.topic_kind, message.value, settings)
        reasons.setdefault(message.kind, set()).add(expected.reason)
    assert reasons["invalid_utf8"] == {"invalid_json"}
    assert reasons["nan_infinity"] == {"invalid_json"}
    assert reasons["deep_nesting_over_limit"] == {"invalid_json"}
    assert reasons["deep_nesting_no_event_id"] == {"too_deeply_nested"}
    assert reasons["deep_nesting_with_event_id"] == {"too_deeply_nested"}
    assert reasons["huge_text"] == {"oversize"}
    assert reasons["unknown_schema_version"] == {"unsupported_schema"}
    huge = [m for m in fuzz if m.kind == "huge_text"]
    assert all(len(m.value) > settings.limits.max_text_chars for m in huge)
    replies = [m for m in fuzz if m.kind == "recall_hostile_reply_to"]
    named = b"".join(m.value for m in replies)
    assert TOPICS.memory_events.encode() in named and b"other" in named


def test_nesting_that_could_not_be_hashed_is_refused_by_name(settings: Settings) -> None:
    # Nesting orjson parses (< 1,024 levels) but cannot serialise again (> 254), and
    # the event id of a payload without one hashes the re-serialised payload: it
    # once failed as an internal error; now the edge refuses it before that.
    deep = b"[" * 300 + b"]" * 300
    raw = b'{"agent_id":"a-1","ts":1790000000000,"text":"deep","meta":' + deep + b"}"
    for kind in ("episodes", "outcomes", "commands"):
        expected = expected_outcome(TOPICS, kind, raw, settings)
        assert (expected.outcome, expected.reason, expected.raised) == (
            DEAD_LETTER,
            "too_deeply_nested",
            None,
        )


def test_valid_events_are_seeded_valid_and_one_topic_per_agent(settings: Settings) -> None:
    events = valid_events(events=300, agents=7, seed=5)
    assert events == valid_events(events=300, agents=7, seed=5)
    assert len({e.event_id for e in events}) == 300
    kinds: dict[str, set[str]] = {}
    for event in events:
        kinds.setdefault(event.agent_id, set()).add(event.topic_kind)
        expected = expected_outcome(TOPICS, event.topic_kind, event.value, settings)
        assert expected.outcome == DECISION
    assert len(kinds) == 7 and all(len(k) == 1 for k in kinds.values())
    assert {agent_kind(i) for i in range(3)} == {"episodes", "tool_events", "transcripts"}


def test_lost_duplicated_and_missing_events_are_counted_per_source_event() -> None:
    expected = {
        "e1": (("a", "c1"),),
        "e2": (("a", "c2"), ("a", "c3")),  # two candidates of one event
        "e3": (("b", "c4"),),
        "e4": (("b", "c5"),),
    }
    decided = {"a": ["c1", "c2"], "b": ["c4", "c5"]}  # c3 never decided: e2 lost
    events = {"c1": 1, "c2": 1, "c4": 2}  # c4 twice: e3 duplicated; c5 none: missing
    records = {("a", "e1"): 1, ("b", "e4"): 2}  # e4: two records for one candidate
    account = account_valid(expected, decided, events, records)
    assert account.events == 4 and account.candidates == 5
    assert account.lost == 1 and account.lost_examples == ("e2",)
    assert account.duplicated == 2 and account.duplicated_examples == ("e3", "e4")
    assert account.decision_events_missing == 1


def test_a_clean_fold_has_nothing_lost_or_duplicated() -> None:
    expected = {"e1": (("a", "c1"),), "e2": (("a", "c2"), ("a", "c3"))}
    account = account_valid(
        expected,
        {"a": ["c1", "c2", "c3"]},
        {"c1": 1, "c2": 1, "c3": 1},
        {("a", "e1"): 1, ("a", "e2"): 2},
    )
    assert (account.lost, account.duplicated, account.decision_events_missing) == (0, 0, 0)


def test_fuzz_is_accounted_by_dead_letter_or_by_decision() -> None:
    messages = [
        FuzzMessage("invalid_json", "episodes", "k", b"{"),
        FuzzMessage("edge_valid", "episodes", "k", b"{}"),
        FuzzMessage("wrong_types", "episodes", "k", b"[]"),
        FuzzMessage("edge_valid", "episodes", "k", b"{ }"),
        FuzzMessage("huge_text", "episodes", "k", b"{  }"),  # never found on its topic
        FuzzMessage("edge_valid", "episodes", "k", b"{   }"),  # decided, but dead-lettered
    ]
    expected = [
        Expected(DEAD_LETTER, "invalid_json"),
        Expected(DECISION, None, (("f", "c1"),)),
        Expected(DEAD_LETTER, "wrong_type"),
        Expected(DECISION, None, (("f", "c2"),)),
        Expected(DEAD_LETTER, "oversize"),
        Expected(DECISION, None, (("f", "c3"),)),
    ]
    where = {
        0: [("t", 0, 1)],
        1: [("t", 0, 2)],
        2: [("t", 1, 1), ("t", 1, 2)],  # published twice: one dead letter is enough
        3: [("t", 0, 3)],
        5: [("t", 0, 4)],
    }
    letters = {("t", 0, 1): "invalid_json", ("t", 1, 2): "wrong_type", ("t", 0, 4): "x"}
    account = account_fuzz(messages, expected, where, letters, {"f": ["c1"]})
    assert account.sent == 6 and account.found == 5
    assert account.dead_lettered == 3 and account.decided == 1
    assert account.unaccounted == 2  # c2 undecided; the one never found
    assert account.unaccounted_kinds == {"edge_valid": 1, "huge_text": 1}
    assert account.unexpected == 1
    assert account.by_reason == {"invalid_json": 1, "wrong_type": 1, "x": 1}


def test_the_fault_plan_spreads_seeded_faults_over_the_run() -> None:
    plan = fault_plan(kills=3, redis_crashes=1, broker_restarts=1, workers=2, seed=21)
    assert plan == fault_plan(kills=3, redis_crashes=1, broker_restarts=1, workers=2, seed=21)
    assert plan != fault_plan(kills=3, redis_crashes=1, broker_restarts=1, workers=2, seed=22)
    actions = Counter(f.action for f in plan.faults)
    assert actions == {"kill": 3, "redis_crash": 1, "broker_restart": 1}
    assert plan.timeline == plan.faults  # no checkpoints: every fault on the timeline
    points = [f.at for f in plan.faults]
    assert points == sorted(points) and points[0] >= 0.1 and points[-1] <= 0.85
    assert all(b - a > 0 for a, b in pairwise(points))
    assert all(f.downtime_s >= 1.0 for f in plan.faults if f.action != "kill")
    # Kills go to the slots in turn: each role is killed once there are enough kills.
    assert Counter(f.worker for f in plan.faults if f.action == "kill") == {0: 2, 1: 1}
    clean_restart = fault_plan(kills=0, redis_restarts=1, seed=21)
    assert [f.action for f in clean_restart.faults] == ["redis_restart"]


def test_a_recall_worker_kill_lands_among_a_checkpoints_recalls() -> None:
    plan = fault_plan(
        kills=3, redis_crashes=1, broker_restarts=1, workers=2, checkpoints=3, seed=21
    )
    kills = [f for f in plan.faults if f.action == "kill"]
    assert len(kills) == 3 and {SLOT_ROLES[f.worker] for f in kills} == {"ingest", "recall"}
    during = [f for f in plan.faults if f.checkpoint is not None]
    assert len(during) == 1 and during[0].worker == RECALL_SLOT and during[0].action == "kill"
    assert 0 <= during[0].checkpoint < 3
    assert plan.at_checkpoint(during[0].checkpoint) == tuple(during)
    assert during[0] not in plan.timeline and len(plan.timeline) == 4
    # With a single kill it may be the ingest worker's: then none at a checkpoint.
    for seed in range(20):
        one = fault_plan(kills=1, workers=2, checkpoints=3, seed=seed)
        assert len(one.faults) == 1
        assert (one.faults[0].checkpoint is not None) == (one.faults[0].worker == RECALL_SLOT)


def test_checkpoints_are_spread_between_the_first_and_the_last_chunk() -> None:
    assert checkpoint_chunks(50, 3) == (12, 25, 38)
    assert checkpoint_chunks(5, 3) == (1, 2, 4)  # 1.25, 2.5, 3.75 rounded
    assert checkpoint_chunks(2, 3) == (1,)  # one boundary: one checkpoint
    assert checkpoint_chunks(1, 3) == ()
    assert checkpoint_chunks(50, 0) == ()
    for chunks in range(2, 60):
        points = checkpoint_chunks(chunks, 3)
        assert list(points) == sorted(set(points))
        assert all(1 <= p <= chunks - 1 for p in points)


def test_every_input_kind_is_sent_and_parses(settings: Settings) -> None:
    events = valid_events(events=600, agents=6, seed=5)
    limits = settings.input_limits
    labels: set[str] = set()
    for agent in sorted({e.agent_id for e in events}):
        mine = [e for e in events if e.agent_id == agent]
        for index, upto in enumerate((30, 60, 90)):
            before = mine[:upto]
            cp = checkpoint_inputs(agent, index, before, seed=21)
            assert cp == checkpoint_inputs(agent, index, before, seed=21)  # seeded
            # Between the agent's last event before it and its next, in event time.
            assert before[-1].ts < cp.ts and cp.ts + 10 < mine[upto].ts
            fact = parse_fact(cp.fact, limits)
            assert not isinstance(fact, Rejection), fact
            assert fact.source_event_id == fact_event_id(agent, index)
            assert fact.valid_from == len(before)
            recalled = (f"m-{index}-a", f"m-{index}-b", f"m-{index}-c")
            for label, value in outcome_inputs(cp, recalled):
                labels.add(label)
                outcome = parse_outcome(value, limits)
                assert not isinstance(outcome, Rejection), (label, outcome)
            commands: list[Command] = []
            for label, value in command_inputs(cp, recalled):
                labels.add(label)
                command = parse_command(value, limits)
                assert not isinstance(command, Rejection), (label, command)
                commands.append(command)
            kinds = [c.kind for c in commands]
            assert kinds[0] is CommandKind.CONFIGURE and kinds[-1] is CommandKind.PIN
            assert commands[-1].target == recalled[0]
            retracted = [c.target for c in commands if c.kind is CommandKind.RETRACT]
            # An earlier event of its own, and (from the second on) the fact before.
            assert retracted[0] in {e.event_id for e in before}
            if index:
                assert retracted[1] == fact_event_id(agent, index - 1)
            assert len({c.command_id for c in commands}) == len(commands)
    assert labels == {
        "outcomes.positive",
        "outcomes.run_ended",
        "commands.configure",
        "commands.retract",
        "commands.retract_fact",
        "commands.pin",
    }
    assert set(INPUT_KINDS) == {
        "episodes",
        "tool_events",
        "transcripts",
        "facts",
        "recall_requests",
        "outcomes",
        "commands",
    }


def test_a_recall_that_returned_nothing_sends_neither_a_positive_outcome_nor_a_pin(
    settings: Settings,
) -> None:
    events = valid_events(events=30, agents=3, seed=5)
    cp = checkpoint_inputs("fault-agent-000", 0, [events[0]], seed=21)
    assert [label for label, _ in outcome_inputs(cp, ())] == ["outcomes.run_ended"]
    assert [label for label, _ in command_inputs(cp, ())] == [
        "commands.configure",
        "commands.retract",
    ]
    first = checkpoint_inputs("fault-agent-000", 0, [], seed=21)  # nothing before it yet
    assert first.retract_event is None and first.retract_fact is None


async def test_a_broker_restart_waits_for_what_the_bench_is_sending_and_holds_back_the_rest() -> (
    None
):
    gate = SendGate()
    order: list[str] = []
    sending = asyncio.Event()
    release = asyncio.Event()

    async def send(name: str, hold: asyncio.Event | None = None) -> None:
        async with gate.shared():
            order.append(f"{name} in")
            sending.set()
            if hold is not None:
                await hold.wait()
            order.append(f"{name} out")

    async def restart() -> None:
        async with gate.exclusive():
            order.append("restart")

    first = asyncio.create_task(send("a", release))
    await sending.wait()
    restarting = asyncio.create_task(restart())
    await asyncio.sleep(0.01)
    later = asyncio.create_task(send("b"))  # comes after the restart asked: waits for it
    await asyncio.sleep(0.01)
    assert order == ["a in"]
    release.set()
    await asyncio.gather(first, restarting, later)
    assert order == ["a in", "a out", "restart", "b in", "b out"]
