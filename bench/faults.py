"""`python -m bench faults`: the journal under real crashes and hostile input, every input kind.

Two runs of the same inputs on one durable stack (tansu on its `s3://` engine over a
local SeaweedFS, Redis with its append-only file fsynced every second), each under a
prefix of its own:

1. the faulty run: an ingest worker and a recall worker (split roles); while the
   events flow (published in chunks, a few thousand ahead of what is decided, or on
   after 20 s without a decision), at seeded points of the publishing: workers are
   SIGKILLed (and started again), Redis is SIGKILLed and started again on its
   append-only file, and the broker is SIGKILLed and started again on the same
   object store (faults at least 20 s apart); one recall worker kill lands while a
   checkpoint's recalls are in flight. Hostile messages (ten thousand by default) go
   in beside the valid events;
2. the clean run: one worker with both roles, no faults, no fuzz, the same inputs.

Each agent's valid events (episodes, tool events or transcripts) go to one topic
(its kind fixed by the agent's index), in one order. At checkpoints (three by
default, spread over the events) every agent is sent, step by step, a fact; a
recall served for a run (its usage journaled); the run's outcomes (positive for
what the recall returned, then `run_ended` with a quality); commands (configure,
retract an earlier event, retract the previous checkpoint's fact, pin what the
recall returned first). The kinds are on different topics, sequenced apart, so the
bench waits before each step until the fold applied the one before (its events
decided; an input's source partition mark past its offset; a usage record in the
witness log): both journals then hold each agent's inputs in the same order, and
the recall answers the same state in both runs, so both folds must agree. The
inputs sent (`same_inputs_as_clean_run`) and the recall answers
(`recall_answers_equal_to_clean_run`) are compared too. Both runs search the
vector lanes exactly (`EXACT_KNN`): an HNSW walk answers by the graph's shape, not
the agent's state alone.

What is counted:

- `lost`: valid source events with a candidate not in its agent's `decided` hash,
  plus checkpoint inputs whose effect never showed and recalls that returned
  items with no usage record (`lost_by`). The hash is the authoritative check: it
  is written in the same transaction as the decision, and it is what makes a
  redelivery a no-op. Memory-events are stored in that transaction too (the
  outbox) and published after it: a decision with no event on memory-events is
  counted apart (`decision_events_missing`), and should be 0; an event published
  twice, byte for byte (a worker killed after the broker had it and before the
  outbox was trimmed), is a redelivery (`events_redelivered`), not a second
  decision.
- `duplicated`: valid source events with more than one decision event
  (GrimoireWrite/Quarantine/Reject/Merge/Aggregate) for one of their candidates,
  or more memory records (aggregates aside) than candidates; plus usage records
  beyond one per recall that returned items (`duplicated_by`).
- fuzz: each hostile message is found on its topic again (its bytes are unique)
  and matched, by (topic, partition, offset), to a dead letter, directly or
  through the journal entry a poison dead letter names; a valid-looking one is
  accounted for by its candidates in its agent's `decided` hash.
- `digest_equal_to_clean_run`: every agent's state digest equal between the runs.
  The witness log's records name journal positions (partition, offset), and the
  usage entries applied are kept by journal sequence number, both of which differ
  between two journals whatever the fold did (other agents' and hostile entries
  interleave, a crashed sequencer re-journals, spending numbers), so the witness
  family is compared by each record's (seq, op, ids, fields digest), the usage
  entries applied by their count, everything else as `agent_digest` digests it.
  Full `agent_digest` equality is reported beside it.
- audit: every agent's chain of the faulty run verifies; one stored witness record
  is then rewritten and the audit must find the break (the record is restored).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import random
import shutil
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from redis.asyncio import Redis

from bench.event_stream import HEARTBEATS, TOOL_CALLS, WORDS
from bench.services import bench_ports, cpu_model, on_services, state_root
from grimoire.agents.journal.sequencer import agent_of
from grimoire.infra.local.services import LocalServices
from grimoire.infra.local.worker_process import start_worker, stop_worker
from grimoire.infra.replay import read_partition
from grimoire.infra.settings import Settings
from grimoire.streams.inbound.command import parse_command
from grimoire.streams.inbound.events import Accepted, Rejection, normalize_event
from grimoire.streams.inbound.outcome import parse_outcome
from grimoire.streams.inbound.recall_request import parse_recall_request
from grimoire.streams.journal.entry import InvalidEntry, decode_entry
from grimoire.streams.model.records import EventType
from grimoire.streams.trust.witness import canonical_bytes
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.journal.marks import mark_field
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.trust.agent_keys import agent_footprint
from grimoire.tables.trust.digest import agent_digest, footprint_digest
from grimoire.tables.trust.witness_store import RedisWitnessLog, audit
from grimoire.topics.client import GrimoireClient, RecallFailed, RecallTimeout
from grimoire.topics.declarations import TopicNames
from grimoire.topics.offsets import true_end_offsets
from grimoire.topics.schemas import (
    CommandV1,
    EpisodeV1,
    FactV1,
    OutcomeV1,
    ToolEventV1,
    TranscriptV1,
)

__all__ = [
    "DECISION_EVENTS",
    "FAULT_ACTIONS",
    "FUZZ_KINDS",
    "INGEST_SLOT",
    "INPUT_KINDS",
    "RECALL_SLOT",
    "SLOT_ROLES",
    "AgentCheckpoint",
    "Expected",
    "Fault",
    "FaultPlan",
    "FuzzAccount",
    "FuzzMessage",
    "SendGate",
    "ValidAccount",
    "ValidEvent",
    "account_fuzz",
    "account_valid",
    "checkpoint_chunks",
    "checkpoint_inputs",
    "command_inputs",
    "comparable_digest",
    "decided_sets",
    "decided_total",
    "decision_event_counts",
    "expected_candidates",
    "expected_outcome",
    "fact_event_id",
    "fault_plan",
    "fuzz_messages",
    "outcome_inputs",
    "read_topics",
    "records_per_event",
    "run_faults_bench",
    "valid_events",
    "witness_ops",
]

logger = logging.getLogger(__name__)

GENESIS_MS: Final = 1_790_000_000_000
BLOCK_MS: Final = 12_000
INGEST_KINDS: Final = ("episodes", "tool_events", "transcripts")
_EVENT_TYPES: Final = {
    "episodes": EventType.EPISODE,
    "tool_events": EventType.TOOL,
    "transcripts": EventType.TRANSCRIPT,
}
DECISION_EVENTS: Final = frozenset(
    {
        "GrimoireWrite",
        "GrimoireQuarantine",
        "GrimoireReject",
        "GrimoireMerge",
        "GrimoireAggregate",
    }
)
DEAD_LETTER: Final = "dead_letter"
DECISION: Final = "decision"
INTERNAL_ERROR: Final = "internal_error"
CLIENT_ID: Final = "benchfaults"
_CHUNK_EVENTS: Final = 400  # valid events published at a time
_READY_S: Final = 300.0
_STALL_S: Final = 180.0  # no progress for this long: the run is stuck
_PACE_WAIT_S: Final = 20.0  # publishing waits this long at most for decisions to move
_QUIET_S: Final = 5.0
# Faults are at least this far apart: a restarted worker has loaded its model and
# rejoined the group before the next one (else a run's faults could fall together).
_FAULT_GAP_S: Final = 20.0


# ---- the valid events -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ValidEvent:
    """One valid input: `topic_kind` is a `TopicNames` attribute (the same events go
    to both runs' topics)."""

    topic_kind: str
    agent_id: str
    event_id: str
    value: bytes
    step: int = 0  # the agent's how-manieth event (its tick and block)
    ts: int = 0  # its event time


# The heartbeats, tool calls and filler words are the ingest bench's (`event_stream`);
# its chat lines, as plain text blocks only:
_CHAT = (
    ("user", "How is the {a} position doing after block {b}?"),
    ("assistant", "Depth changed by {a}% so impermanent loss risk moved."),
    ("assistant", "The position is fine: health factor {a}.{b}."),
)
_EPISODE_TYPES = ("observation", "observation", "action", "alert", "report")


def _agent_name(index: int) -> str:
    return f"fault-agent-{index:03d}"


def agent_kind(index: int) -> str:
    """The one topic an agent's valid events go to."""
    return INGEST_KINDS[index % len(INGEST_KINDS)]


def _text(rng: random.Random, template: str, serial: int) -> str:
    text = template.format(a=rng.randint(1, 4), b=rng.randint(1, 3))
    if rng.random() < 0.4:  # the rest repeat: merges, reinforcements, aggregates
        words = " ".join(rng.choice(WORDS) for _ in range(6))
        text = f"{text} [{serial}] {words}"
    return text


def valid_events(*, events: int, agents: int, seed: int) -> list[ValidEvent]:
    """`events` valid inputs spread round-robin over `agents` agents, each agent on
    one topic kind (episodes, tool events or transcripts), in a fixed order."""
    rng = random.Random(seed)
    out: list[ValidEvent] = []
    for serial in range(events):
        index = serial % agents
        step = serial // agents
        agent = _agent_name(index)
        kind = agent_kind(index)
        ts = GENESIS_MS + step * BLOCK_MS + index
        event_id = f"{agent}-e{step:06d}"
        value: bytes
        if kind == "episodes":
            value = EpisodeV1(
                agent_id=agent,
                ts=ts,
                tick=step,
                event_id=event_id,
                text=_text(rng, rng.choice(HEARTBEATS), serial),
                episode_type=rng.choice(_EPISODE_TYPES),
                tags=[f"venue/{rng.randint(0, 2)}"],
                affect={"pleasure": rng.randint(-4, 4) / 4, "arousal": 0.3}
                if rng.random() < 0.3
                else None,
            ).dumps_json()
        elif kind == "tool_events":
            tool, error, result = rng.choice(TOOL_CALLS)
            value = ToolEventV1(
                agent_id=agent,
                ts=ts,
                tick=step,
                event_id=event_id,
                tool=tool,
                error=_text(rng, error, serial) if error else None,
                result=_text(rng, result, serial) if result else None,
                paths=[f"/venues/{rng.randint(0, 2)}.json"] if rng.random() < 0.3 else None,
            ).dumps_json()
        else:
            role, template = rng.choice(_CHAT)
            content: Any = _text(rng, template, serial)
            if rng.random() < 0.3:  # a line of two blocks: two candidates of one event
                block = "thinking" if role == "assistant" else "text"
                content = [
                    {"type": block, block: content},
                    {"type": "text", "text": _text(rng, rng.choice(_CHAT)[1], serial)},
                ]
            value = TranscriptV1(
                agent_id=agent,
                ts=ts,
                tick=step,
                event_id=event_id,
                session_id=f"{agent}-chat",
                turn_id=f"t-{step // 2}",
                line={"role": role, "content": content},
            ).dumps_json()
        out.append(ValidEvent(kind, agent, event_id, value, step, ts))
    return out


# ---- the other inputs: facts, recalls, outcomes, commands -------------------------

# Every input kind the bench sends (the valid events' three, then the rest, which go
# in at checkpoints).
INPUT_KINDS: Final = (*INGEST_KINDS, "facts", "recall_requests", "outcomes", "commands")
_VENUES: Final = ("uniswap", "curve", "balancer")
_STATES: Final = ("healthy", "thin", "paused", "migrating")


@dataclass(frozen=True, slots=True)
class AgentCheckpoint:
    """What one agent is sent at one checkpoint, each step applied before the next
    is sent (they are on different topics, so only waiting keeps their journal
    order, and that order, the same in both runs, is what makes the folds
    comparable): a fact; a recall served for a run (its usage journaled); the
    run's outcomes (positive for what the recall returned, then the run's end);
    commands (configure, retract an earlier event, retract the previous
    checkpoint's fact, pin what the recall returned first)."""

    agent_id: str
    index: int
    step: int  # the agent's valid events published before it
    ts: int  # event time: after the agent's last event, before its next (a block on)
    fact: bytes
    query: str
    run_id: str
    configure: Mapping[str, Any]
    retract_event: str | None  # an earlier valid event of the agent
    retract_fact: str | None  # the previous checkpoint's fact (its event id)


def fact_event_id(agent_id: str, index: int) -> str:
    return f"{agent_id}-fact{index:02d}"


def checkpoint_inputs(
    agent_id: str, index: int, before: Sequence[ValidEvent], *, seed: int
) -> AgentCheckpoint:
    """The agent's inputs at checkpoint `index`, from its valid events published
    before it (`before`, in order): seeded, so both runs send the same."""
    rng = random.Random(f"{seed}:{agent_id}:{index}")  # a str seed is hashed stably
    step = len(before)
    ts = (before[-1].ts if before else GENESIS_MS) + 1
    venue = rng.choice(_VENUES)
    fact = FactV1(
        agent_id=agent_id,
        ts=ts,
        subject=f"{venue} pool",
        predicate="status",
        object=rng.choice(_STATES),
        valid_from=step,
        event_id=fact_event_id(agent_id, index),
    ).dumps_json()
    query = f"{venue} {' '.join(rng.choice(WORDS) for _ in range(3))} position"
    return AgentCheckpoint(
        agent_id=agent_id,
        index=index,
        step=step,
        ts=ts,
        fact=fact,
        query=query,
        run_id=f"run-{index:02d}",
        configure={"top_k": 3 + (index % 3), "outcome_bias": 0.9},
        retract_event=before[rng.randrange(step)].event_id if step else None,
        retract_fact=fact_event_id(agent_id, index - 1) if index > 0 else None,
    )


def outcome_inputs(cp: AgentCheckpoint, recalled: Sequence[str]) -> list[tuple[str, bytes]]:
    """(label, value): a positive outcome for the first two memories the recall
    returned (none when it returned nothing), then the run's end with a quality."""
    out: list[tuple[str, bytes]] = []
    if recalled:
        positive = OutcomeV1(
            agent_id=cp.agent_id,
            ts=cp.ts + 2,
            outcome="positive",
            memory_ids=list(recalled[:2]),
            event_id=f"{cp.agent_id}-cp{cp.index:02d}-positive",
        )
        out.append(("outcomes.positive", positive.dumps_json()))
    ended = OutcomeV1(
        agent_id=cp.agent_id,
        ts=cp.ts + 3,
        outcome="run_ended",
        run_id=cp.run_id,
        quality=(0.35, 0.8, 0.6)[cp.index % 3],
        event_id=f"{cp.agent_id}-cp{cp.index:02d}-ended",
    )
    out.append(("outcomes.run_ended", ended.dumps_json()))
    return out


def command_inputs(cp: AgentCheckpoint, recalled: Sequence[str]) -> list[tuple[str, bytes]]:
    """(label, value), in the order they go on the commands topic (one partition for
    the agent: applied in this order)."""
    prefix = f"{cp.agent_id}-cp{cp.index:02d}"

    def command(name: str, kind: str, after: int, **fields: Any) -> tuple[str, CommandV1]:
        # `after` ms past the checkpoint, each name its own: event times follow the order.
        event_id = f"{prefix}-{name.replace('_', '-')}"
        return f"commands.{name}", CommandV1(
            agent_id=cp.agent_id, command=kind, ts=cp.ts + after, event_id=event_id, **fields
        )

    commands = [command("configure", "configure", 4, config=dict(cp.configure))]
    if cp.retract_event is not None:
        commands.append(command("retract", "retract", 5, source_event_id=cp.retract_event))
    if cp.retract_fact is not None:
        commands.append(command("retract_fact", "retract", 6, source_event_id=cp.retract_fact))
    if recalled:
        commands.append(command("pin", "pin", 7, memory_id=recalled[0]))
    return [(label, command.dumps_json()) for label, command in commands]


def checkpoint_chunks(chunks: int, checkpoints: int) -> tuple[int, ...]:
    """After how many published chunks each checkpoint comes: spread evenly, after
    the first chunk and before the last (at most one per chunk boundary)."""
    if chunks < 2 or checkpoints < 1:
        return ()
    points = {
        max(1, min(chunks - 1, round(chunks * (n + 1) / (checkpoints + 1))))
        for n in range(checkpoints)
    }
    return tuple(sorted(points))


# ---- the hostile messages ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FuzzMessage:
    kind: str
    topic_kind: str  # a TopicNames attribute
    key: str
    value: bytes


@dataclass(frozen=True, slots=True)
class _Ctx:
    rng: random.Random
    serial: int  # unique over the fuzz: every payload holds it
    nth: int  # the how-manieth of its kind: picks the variant, topic and agent
    topics: TopicNames
    reply_to: str  # the bench client's own reply topic

    @property
    def agent(self) -> str:
        return f"fuzz-agent-{self.nth % 8}"

    def ingest_kind(self) -> str:
        return INGEST_KINDS[self.nth % len(INGEST_KINDS)]

    def payload(self) -> tuple[str, dict[str, Any]]:
        """This message's ingest kind and a valid payload of it, for a fuzzer to spoil."""
        kind = self.ingest_kind()
        return kind, self.base(kind)

    def base(self, kind: str, *, event_id: bool = True) -> dict[str, Any]:
        """A valid payload of `kind` for a fuzz agent, unique by its serial."""
        rng, serial = self.rng, self.serial
        data: dict[str, Any] = {
            "agent_id": self.agent,
            "ts": GENESIS_MS + serial * 1_000,
            "tick": serial,
        }
        if event_id:
            data["event_id"] = f"fz-{serial}"
        text = f"fuzz {serial}: " + " ".join(rng.choice(WORDS) for _ in range(5))
        if kind == "episodes":
            data["text"] = text
        elif kind == "tool_events":
            data["tool"] = "swap"
            data["result"] = text
        else:
            data["line"] = {"role": "user", "content": text}
        return data


def _dumps(data: Any) -> bytes:
    return orjson.dumps(data)


def _text_field(kind: str) -> str:
    return {"episodes": "text", "tool_events": "result", "transcripts": "line"}[kind]


def _fz_invalid_json(c: _Ctx) -> tuple[str, bytes]:
    kind = c.ingest_kind()
    raw = _dumps({"fuzz": c.serial, **c.base(kind)})
    unique = len(_dumps({"fuzz": c.serial}))  # keep the serial: the cut is after it
    return kind, raw[: c.rng.randint(unique, len(raw) - 2)]  # a prefix of an object is no JSON


def _fz_garbage(c: _Ctx) -> tuple[str, bytes]:
    return c.ingest_kind(), f"fz{c.serial}:".encode() + c.rng.randbytes(c.rng.randint(1, 300))


def _fz_invalid_utf8(c: _Ctx) -> tuple[str, bytes]:
    kind, data = c.payload()
    data["tags"] = ["@@BAD@@"]
    bad = c.rng.choice(
        [b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"]
    )
    return kind, _dumps(data).replace(b"@@BAD@@", bad)


def _fz_lone_surrogate(c: _Ctx) -> tuple[str, bytes]:
    kind, data = c.payload()
    data["tags"] = ["@@BAD@@"]
    escape = c.rng.choice([rb"\ud800", rb"\udfff", rb"\ud83d x"])
    return kind, _dumps(data).replace(b"@@BAD@@", escape)


def _fz_not_an_object(c: _Ctx) -> tuple[str, bytes]:
    forms = (
        _dumps([f"fz{c.serial}", {"agent_id": c.agent}]),
        _dumps(f"fz{c.serial}"),
        f"{c.serial}.25".encode(),
        _dumps([[c.serial]]),
    )
    return c.ingest_kind(), forms[c.nth % len(forms)]


def _fz_nan(c: _Ctx) -> tuple[str, bytes]:
    kind, data = c.payload()
    name = c.rng.choice(["ts", "importance", "tick", "latency_ms"])
    data[name] = "@@NAN@@"
    literal = c.rng.choice([b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e999"])
    return kind, _dumps(data).replace(b'"@@NAN@@"', literal)


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"n": value}
    return value


def _fz_deep_over_limit(c: _Ctx) -> tuple[str, bytes]:
    kind = c.ingest_kind()
    depth = c.rng.randint(1_100, 20_000)
    data = c.base(kind)
    data["meta"] = "@@DEEP@@"
    deep = b"[" * depth + b"]" * depth
    return kind, _dumps(data).replace(b'"@@DEEP@@"', deep)


def _fz_deep_typed(c: _Ctx) -> tuple[str, bytes]:
    kind, data = c.payload()
    target = c.rng.choice(["tags", "affect", "entities"])
    data[target] = _nested(c.rng.randint(10, 200), "x")
    if target == "affect" and isinstance(data[target], list):
        data[target] = {"pleasure": data[target]}
    return kind, _dumps(data)


def _deep_bytes(data: dict[str, Any], depth: int) -> bytes:
    data["meta"] = "@@DEEP@@"
    return _dumps(data).replace(b'"@@DEEP@@"', b"[" * depth + b"1" + b"]" * depth)


def _fz_deep_no_event_id(c: _Ctx) -> tuple[str, bytes]:
    """Parsable (under orjson's 1,024 levels) but deeper than orjson.dumps goes (254),
    with no event id (which would be a hash of the re-serialised payload): refused
    as `too_deeply_nested` before anything re-serialises it. Every fourth is an
    outcome (with a timestamp out of range besides)."""
    depth = c.rng.randint(260, 1_000)
    if c.nth % 4 == 3:
        outcome = {"agent_id": c.agent, "ts": -c.serial, "outcome": "positive", "fz": c.serial}
        return "outcomes", _deep_bytes(outcome, depth)
    kind = INGEST_KINDS[c.nth % 4]
    return kind, _deep_bytes(c.base(kind, event_id=False), depth)


def _fz_deep_with_event_id(c: _Ctx) -> tuple[str, bytes]:
    """The same nesting in a field nothing reads, with an event id: refused at the
    edge all the same (`too_deeply_nested`: no schema nests past a few levels)."""
    kind = c.ingest_kind()
    return kind, _deep_bytes(c.base(kind), c.rng.randint(260, 1_000))


def _huge(c: _Ctx, floor: int) -> str:
    size = floor + int(min(c.rng.expovariate(1 / 12_000), 400_000))
    return (f"fz{c.serial} " + "x" * size)[:size]


def _fz_huge_text(c: _Ctx) -> tuple[str, bytes]:
    kind, data = c.payload()
    text = _huge(c, 16_001)
    if kind == "transcripts":
        data["line"] = {"role": "assistant", "content": text}
    else:
        data[_text_field(kind)] = text
    return kind, _dumps(data)


def _fz_huge_field(c: _Ctx) -> tuple[str, bytes]:
    kind, data = c.payload()
    choice = c.nth % 5
    if choice == 0:
        data["event_id"] = _huge(c, 129)
    elif choice == 1:
        data["session_id"] = _huge(c, 129)
    elif choice == 2:
        data["tags"] = [f"t{n}" for n in range(65 + c.rng.randint(0, 5_000))]
    elif choice == 3:
        data["tags"] = [_huge(c, 16_001)]
    else:
        data["regime"] = _huge(c, 129)
    return kind, _dumps(data)


def _fz_huge_agent_id(c: _Ctx) -> tuple[str, bytes]:
    kind, data = c.payload()
    data["agent_id"] = _huge(c, 129)
    return kind, _dumps(data)


_WRONG_VALUES: Final = ([1, 2], {"a": 1}, True, 42, 4.5, "text")


def _fz_wrong_types(c: _Ctx) -> tuple[str, bytes]:
    kind, data = c.payload()
    name = c.rng.choice(["ts", _text_field(kind), "tick", "tags", "affect", "session_id"])
    wrong = {
        "ts": ([1, 2], {"a": 1}, True),
        "text": ([1, 2], {"a": 1}, True, 42, 4.5),
        "result": ([1, 2], {"a": 1}, True, 42),
        "line": ([1, 2], True, 42, 4.5),
        "tick": ("7", 4.5, True, [1]),
        "tags": ("tag", 42, {"a": 1}, [1, 2]),
        "affect": ("happy", [0.1], 42, {"pleasure": "high"}),
        "session_id": (42, [1], {"a": 1}, True),
    }[name]
    data[name] = c.rng.choice(wrong)
    return kind, _dumps(data)


def _fz_bad_values(c: _Ctx) -> tuple[str, bytes]:
    kind, data = c.payload()
    choice = c.nth % 8
    if choice == 0:
        data["ts"] = c.rng.choice([0, -1, 10**15, 2**63, "2024-01-01T00:00:00", "soon"])
    elif choice == 1:
        data["tick"] = -c.rng.randint(1, 10**6)
    elif choice == 2:
        data["affect"] = c.rng.choice([{"pleasure": 3}, {"SEEKING": -1}, {"x" * 200: 0.5}])
    elif choice == 3:
        data["event_id"] = f"fz {c.serial}"  # whitespace
    elif choice == 4:
        data[_text_field(kind) if kind != "transcripts" else "session_id"] = f"fz{c.serial}\x00\x1b"
    elif choice == 5 and kind == "episodes":
        data["episode_type"] = c.rng.choice(["dream", "summary", ""]) or "x"
    elif choice == 5 and kind == "tool_events":
        data["latency_ms"] = -5
    elif choice == 5:
        data["line"] = {"role": "system", "content": "x"}
    elif choice == 6 and kind == "episodes":
        data["kind"] = c.rng.choice(["aggregate", "summary", "playbook"])
    elif choice == 6 and kind == "tool_events":
        data["tool"] = f"two words {c.serial}"
    elif choice == 6:
        data["line"] = {"role": "user", "content": [{"type": "image", "url": "x"}]}
    elif kind == "transcripts":
        data["line"] = {
            "role": "assistant",
            "content": [{"type": "text", "text": f"part {n}"} for n in range(66)],
        }
    else:  # blank where text is required (a tool event's result may be blank)
        data["tool" if kind == "tool_events" else "text"] = "   "
    return kind, _dumps(data)


def _fz_unknown_schema(c: _Ctx) -> tuple[str, bytes]:
    kind, data = c.payload()
    names = {
        "episodes": "grimoire.episode",
        "tool_events": "grimoire.tool_event",
        "transcripts": "grimoire.transcript",
    }
    data["schema"] = c.rng.choice(
        [
            f"{names[kind]}/2",
            f"{names[kind]}/0",
            f"{names[kind]}/1.1",
            "grimoire.episode/1" if kind != "episodes" else "grimoire.tool_event/1",
            "other.schema/1",
        ]
    )
    return kind, _dumps(data)


_FORBIDDEN_IDS: Final = (
    "fz{n}:x",
    "fz {n}",
    "fz*{n}",
    "fz|{n}",
    "fz,{n}",
    "{{fz{n}}}",
    "fz{n}ü",
    "fz{n}\n",
    "fz?{n}",
    "[fz{n}]",
    "\uff46\uff5a{n}",  # fullwidth
    "fz{n}\u200b",
    "fz{n}\\",
)


def _fz_forbidden_agent_id(c: _Ctx) -> tuple[str, bytes]:
    kind, data = c.payload()
    data["agent_id"] = _FORBIDDEN_IDS[c.nth % len(_FORBIDDEN_IDS)].format(n=c.serial)
    return kind, _dumps(data)


def _fz_missing_fields(c: _Ctx) -> tuple[str, bytes]:
    kind, data = c.payload()
    name = c.rng.choice(
        ["agent_id", "ts", _text_field(kind), "tool" if kind == "tool_events" else "ts"]
    )
    data.pop(name, None)
    if name == "result":  # a tool event with neither result nor error is valid: drop the tool
        data.pop("tool", None)
    return kind, _dumps(data)


def _hostile_reply_to(c: _Ctx) -> str:
    topics = c.topics
    other = TopicNames(f"other{c.nth % 3}")
    choices = (
        other.reply_topic("victim"),
        topics.memory_events,
        topics.dead_letters,
        topics.journal,
        topics.episodes,
        f"random-topic-{c.serial}",
        topics.reply_namespace + "a.b",
        topics.reply_namespace,
        "../etc/passwd",
        "",
        "x" * 300,
        topics.reply_namespace + "x y",
        "__consumer_offsets",
        topics.reply_namespace + "ü",
    )
    return choices[c.nth % len(choices)]


def _recall_request(c: _Ctx, reply_to: str) -> dict[str, Any]:
    return {
        "agent_id": c.agent,
        "query": f"fuzz {c.serial} slippage",
        "reply_to": reply_to,
        "correlation_id": f"fz-{c.serial}",
    }


def _fz_recall_hostile_reply_to(c: _Ctx) -> tuple[str, bytes]:
    return "recall_requests", _dumps(_recall_request(c, _hostile_reply_to(c)))


def _fz_recall_bad_fields(c: _Ctx) -> tuple[str, bytes]:
    data = _recall_request(c, c.reply_to)
    choice = c.nth % 10
    if choice == 0:
        data["k"] = c.rng.choice([0, -1, 10**9, "5", 2.5])
    elif choice == 1:
        data["query"] = _huge(c, 4_001)
    elif choice == 2:
        data["correlation_id"] = _huge(c, 129)
    elif choice == 3:
        data["budgets"] = c.rng.choice(["all", [1], {"max_items": 10**6}, {"num_walkers": -3}])
    elif choice == 4:
        data["filters"] = c.rng.choice([[1], {"kinds": ["nope"]}, {"since": "yesterday"}])
    elif choice == 5:
        data["mode"] = "telepathy"
    elif choice == 6:
        data["as_of"] = c.rng.choice(["x", -5, [1]])
    elif choice == 7:
        data["schema"] = "grimoire.recall_request/9"
    elif choice == 8:
        data["state"] = c.rng.choice([{"circuit": "no-such-circuit"}, {"affect": {"pleasure": 9}}])
    else:
        data["agent_id"] = f"fz:{c.serial}"
    return "recall_requests", _dumps(data)


def _fz_outcome_bad(c: _Ctx) -> tuple[str, bytes]:
    data: dict[str, Any] = {
        "agent_id": c.agent,
        "ts": GENESIS_MS + c.serial,
        "outcome": "positive",
        "memory_ids": [f"fz-{c.serial}"],
        "event_id": f"fz-out-{c.serial}",
    }
    choice = c.nth % 8
    if choice == 0:
        data["outcome"] = c.rng.choice(["great", "", "POSITIVE", 1])
    elif choice == 1:
        data["memory_ids"] = c.rng.choice(["m1", 5, {"a": 1}, [1, 2]])
    elif choice == 2:
        data["memory_ids"] = [f"m{n}" for n in range(257 + c.rng.randint(0, 500))]
    elif choice == 3:
        data.pop("ts")
    elif choice == 4:
        data["ts"] = c.rng.choice([-1, 10**16, "tomorrow", [1]])
    elif choice == 5:
        data["schema"] = "grimoire.outcome/3"
    elif choice == 6:
        data.pop("outcome")
    else:
        data["run_id"] = f"run {c.serial}"
    return "outcomes", _dumps(data)


def _fz_command_bad(c: _Ctx) -> tuple[str, bytes]:
    data: dict[str, Any] = {"agent_id": c.agent, "event_id": f"fz-cmd-{c.serial}"}
    choice = c.nth % 8
    if choice == 0:
        data["command"] = c.rng.choice(["delete", "drop", "FORGET", "Retract", "pin!"])
    elif choice == 1:
        data["command"] = "retract"
    elif choice == 2:
        data["command"] = "pin"
    elif choice == 3:
        data.update(command="unpin", memory_id=c.rng.choice([5, [1], {"a": 1}]))
    elif choice == 4:
        data.update(command="forget", schema="grimoire.command/2")
    elif choice == 5:
        data.update(command="retract", source_event_id=f"fz {c.serial}")
    elif choice == 6:
        data.update(command="retract", source_event_id=f"fz-{c.serial}", ts="yesterday")
    else:
        data["command"] = c.rng.choice([None, 7, ["forget"], {"x": 1}])
    return "commands", _dumps(data)


def _fz_mismatched_key(c: _Ctx) -> tuple[str, bytes]:
    """A valid event whose Kafka key names someone else (`_key`): a producer with
    another partitioner, or a hostile one. It lands on whatever source partition the
    key hashes to, while its journal entry goes to its agent's journal partition."""
    kind = c.ingest_kind()
    return kind, _dumps(c.base(kind))


def _fz_edge_valid(c: _Ctx) -> tuple[str, bytes]:
    """Odd but valid: each must be decided, never dead-lettered."""
    kind, data = c.payload()
    choice = c.nth % 6
    text_field = _text_field(kind)
    if choice == 0:  # exactly at the text limit (episodes; a tool event's text adds words)
        kind = "episodes"
        data = c.base(kind)
        data["text"] = (f"fz{c.serial} " + "y" * 16_000)[:16_000]
    elif choice == 1:
        text = f"fz{c.serial} 🦊 日本語 مرحبا é́ Ω≈ç√ \u202ereversed\u202c"
        if kind == "transcripts":
            data["line"] = {"role": "assistant", "content": text}
        else:
            data[text_field] = text
    elif choice == 2:
        data["ts"] = "2026-09-21T10:00:00.123+02:00"
    elif choice == 3:
        data["agent_id"] = f"fz.a_b-c@d+e=f/g{c.nth % 4}"
    elif choice == 4:
        data.update(unknown_field={"nested": [1, 2, {"x": None}]}, schema_hint="v9")
        data["tags"] = [f"t{n}" for n in range(64)]
    elif kind == "transcripts":
        data["line"] = {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": f"fz{c.serial} consider the swap"},
                {"type": "tool_use", "name": "swap", "input": {"amount": c.serial}},
                {"type": "tool_result", "content": "filled", "is_error": False},
                {"type": "text", "text": "done"},
            ],
        }
    else:
        data["affect"] = {"pleasure": -1, "arousal": 1, "SEEKING": 0.0, "CARE": 1}
    return kind, _dumps(data)


_FuzzBuilder = Callable[[_Ctx], tuple[str, bytes]]
_BUILDERS: Final[Mapping[str, _FuzzBuilder]] = {
    "invalid_json": _fz_invalid_json,
    "garbage_bytes": _fz_garbage,
    "invalid_utf8": _fz_invalid_utf8,
    "lone_surrogate": _fz_lone_surrogate,
    "not_an_object": _fz_not_an_object,
    "nan_infinity": _fz_nan,
    "deep_nesting_over_limit": _fz_deep_over_limit,
    "deep_nesting_in_typed_field": _fz_deep_typed,
    "deep_nesting_no_event_id": _fz_deep_no_event_id,
    "deep_nesting_with_event_id": _fz_deep_with_event_id,
    "huge_text": _fz_huge_text,
    "huge_field": _fz_huge_field,
    "huge_agent_id": _fz_huge_agent_id,
    "wrong_types": _fz_wrong_types,
    "bad_values": _fz_bad_values,
    "unknown_schema_version": _fz_unknown_schema,
    "forbidden_agent_id": _fz_forbidden_agent_id,
    "missing_fields": _fz_missing_fields,
    "recall_hostile_reply_to": _fz_recall_hostile_reply_to,
    "recall_bad_fields": _fz_recall_bad_fields,
    "outcome_bad_fields": _fz_outcome_bad,
    "command_bad_fields": _fz_command_bad,
    "edge_valid": _fz_edge_valid,
    "mismatched_key": _fz_mismatched_key,
}
FUZZ_KINDS: Final = tuple(_BUILDERS)


def fuzz_messages(
    topics: TopicNames,
    *,
    count: int,
    seed: int,
    reply_to: str | None = None,
    kinds: Sequence[str] = FUZZ_KINDS,
) -> list[FuzzMessage]:
    """`count` hostile messages, the kinds in turn; every value is unique (each holds
    its serial), so it can be found on its topic again."""
    unknown = set(kinds) - set(FUZZ_KINDS)
    if unknown or not kinds:
        raise ValueError(f"unknown fuzz kinds {sorted(unknown)} (known: {FUZZ_KINDS})")
    rng = random.Random(seed ^ 0xF022)
    reply = reply_to or topics.reply_topic(CLIENT_ID)
    out: list[FuzzMessage] = []
    for serial in range(count):
        kind = kinds[serial % len(kinds)]
        ctx = _Ctx(rng, serial, serial // len(kinds), topics, reply)
        topic_kind, value = _BUILDERS[kind](ctx)
        out.append(FuzzMessage(kind, topic_kind, _key(kind, value, ctx), value))
    return out


def _key(kind: str, value: bytes, ctx: _Ctx) -> str:
    """The Kafka key: the payload's agent id, as the SDK keys a message (the agent
    of the bench's fuzz where there is none), except for `mismatched_key`."""
    if kind == "mismatched_key":
        return f"fuzz-key-{ctx.serial}"
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError:
        return ctx.agent
    agent = data.get("agent_id") if isinstance(data, dict) else None
    if isinstance(agent, str) and 0 < len(agent) <= 128 and agent.isascii() and agent.isprintable():
        return agent
    return ctx.agent


# ---- what should become of an input (pure) ----------------------------------------


@dataclass(frozen=True, slots=True)
class Expected:
    """What the worker should do with one input: dead-letter it (with `reason`), or
    decide its `candidates` ((agent, candidate id) pairs)."""

    outcome: str  # DEAD_LETTER | DECISION
    reason: str | None = None
    candidates: tuple[tuple[str, str], ...] = ()
    raised: str | None = None  # a parser raised instead of rejecting: a bug


def expected_outcome(
    topics: TopicNames, topic_kind: str, value: bytes, settings: Settings
) -> Expected:
    """The worker's parsers, run here on the same bytes with the same limits."""
    limits = settings.input_limits
    try:
        if topic_kind == "recall_requests":
            parsed = parse_recall_request(
                value, settings.recall_limits, limits, reply_namespace=topics.reply_namespace
            )
            if isinstance(parsed, Rejection):
                return Expected(DEAD_LETTER, parsed.reason)
            return Expected("reply")
        owner = agent_of(value, limits)
        if isinstance(owner, Rejection):
            return Expected(DEAD_LETTER, owner.reason)
        if topic_kind == "outcomes":
            outcome = parse_outcome(value, limits)
            return (
                Expected(DEAD_LETTER, outcome.reason)
                if isinstance(outcome, Rejection)
                else Expected("applied")
            )
        if topic_kind == "commands":
            command = parse_command(value, limits)
            return (
                Expected(DEAD_LETTER, command.reason)
                if isinstance(command, Rejection)
                else Expected("applied")
            )
        accepted = normalize_event(_EVENT_TYPES[topic_kind], value, limits)
    except Exception as exc:
        return Expected(DEAD_LETTER, INTERNAL_ERROR, raised=f"{type(exc).__name__}: {exc}"[:200])
    if isinstance(accepted, Accepted):
        return Expected(DECISION, None, tuple((c.agent_id, c.id) for c in accepted.candidates))
    return Expected(DEAD_LETTER, accepted.reason)


# ---- accounting (pure) -------------------------------------------------------------

Coordinates = tuple[str, int, int]  # (topic, partition, offset)


def expected_candidates(
    events: Iterable[ValidEvent], settings: Settings
) -> dict[str, tuple[tuple[str, str], ...]]:
    """Source event id → the (agent, candidate id) pairs the write path must decide
    for it, by the worker's own normalizer with the deployment's limits."""
    out: dict[str, tuple[tuple[str, str], ...]] = {}
    for event in events:
        accepted = normalize_event(
            _EVENT_TYPES[event.topic_kind], event.value, settings.input_limits
        )
        if not isinstance(accepted, Accepted):
            raise RuntimeError(f"the generator produced an invalid event: {accepted}")
        out[event.event_id] = tuple((c.agent_id, c.id) for c in accepted.candidates)
    return out


def decision_event_counts(values: Iterable[bytes]) -> tuple[Counter[str], int]:
    """Decision events per candidate id on memory-events, and how many records were
    copies. Events are published at least once (the outbox sends again what a killed
    worker may have sent already), byte for byte: a copy is a redelivery of one
    decision, counted apart; two different events for a candidate are two decisions."""
    decisions: Counter[str] = Counter()
    copies: Counter[bytes] = Counter()
    for value in values:
        copies[value] += 1
        if copies[value] > 1:
            continue
        event = orjson.loads(value)
        if event.get("type") in DECISION_EVENTS and event.get("candidate_id"):
            decisions[event["candidate_id"]] += 1
    return decisions, sum(count - 1 for count in copies.values())


@dataclass(frozen=True, slots=True)
class ValidAccount:
    events: int
    candidates: int
    lost: int
    duplicated: int
    decision_events_missing: int  # decided, but no decision event on memory-events
    lost_examples: tuple[str, ...] = ()
    duplicated_examples: tuple[str, ...] = ()


def account_valid(
    expected: Mapping[str, Sequence[tuple[str, str]]],
    decided: Mapping[str, Iterable[str]],
    decision_events: Mapping[str, int],
    records: Mapping[tuple[str, str], int],
) -> ValidAccount:
    """`expected`: source event id → its (agent, candidate id) pairs; `decided`: agent
    → candidate ids in its decided hash; `decision_events`: candidate id → decision
    events seen; `records`: (agent, source event id) → memory records (aggregates
    aside). A candidate missing from `decided` loses its event; more than one
    decision event for a candidate, or more records than candidates, duplicates it."""
    decided_sets = {agent: set(ids) for agent, ids in decided.items()}
    lost: list[str] = []
    duplicated: list[str] = []
    missing_events = 0
    candidates = 0
    for event_id, pairs in expected.items():
        candidates += len(pairs)
        if any(cand not in decided_sets.get(agent, set()) for agent, cand in pairs):
            lost.append(event_id)
        missing_events += sum(
            1
            for agent, cand in pairs
            if cand in decided_sets.get(agent, set()) and decision_events.get(cand, 0) == 0
        )
        agents = {agent for agent, _ in pairs}
        too_many_records = any(records.get((agent, event_id), 0) > len(pairs) for agent in agents)
        if too_many_records or any(decision_events.get(cand, 0) > 1 for _, cand in pairs):
            duplicated.append(event_id)
    return ValidAccount(
        events=len(expected),
        candidates=candidates,
        lost=len(lost),
        duplicated=len(duplicated),
        decision_events_missing=missing_events,
        lost_examples=tuple(sorted(lost)[:10]),
        duplicated_examples=tuple(sorted(duplicated)[:10]),
    )


@dataclass(frozen=True, slots=True)
class FuzzAccount:
    sent: int
    found: int  # found on their topics again
    dead_lettered: int
    decided: int
    unaccounted: int
    by_reason: Mapping[str, int] = field(default_factory=dict)
    unexpected: int = 0  # dead-lettered where a decision was expected, or the reverse
    unaccounted_kinds: Mapping[str, int] = field(default_factory=dict)


def account_fuzz(
    messages: Sequence[FuzzMessage],
    expected: Sequence[Expected],
    where: Mapping[int, Sequence[Coordinates]],
    dead_letters: Mapping[Coordinates, str],
    decided: Mapping[str, Iterable[str]],
) -> FuzzAccount:
    """`where`: fuzz index → where it was found on its topic (a retried publish may
    store it twice); `dead_letters`: coordinates → the dead letter's reason. A message
    is accounted for by a dead letter at any of its coordinates, or (one the parsers
    accept) by every candidate in its agent's decided hash."""
    decided_sets = {agent: set(ids) for agent, ids in decided.items()}
    dead = decided_count = unaccounted = unexpected = found = 0
    reasons: Counter[str] = Counter()
    missing: Counter[str] = Counter()
    for index, (message, wanted) in enumerate(zip(messages, expected, strict=True)):
        coords = where.get(index, ())
        if coords:
            found += 1
        letters = [dead_letters[c] for c in coords if c in dead_letters]
        if letters:
            dead += 1
            reasons[letters[0]] += 1
            if wanted.outcome != DEAD_LETTER:
                unexpected += 1
            continue
        if (
            wanted.outcome == DECISION
            and coords
            and all(cand in decided_sets.get(agent, set()) for agent, cand in wanted.candidates)
        ):
            decided_count += 1
            continue
        unaccounted += 1
        missing[message.kind] += 1
    return FuzzAccount(
        sent=len(messages),
        found=found,
        dead_lettered=dead,
        decided=decided_count,
        unaccounted=unaccounted,
        by_reason=dict(sorted(reasons.items())),
        unexpected=unexpected,
        unaccounted_kinds=dict(sorted(missing.items())),
    )


# ---- the fault plan (pure) ---------------------------------------------------------


# The faulty run's workers, by slot: one folds the journal, one serves the reads.
SLOT_ROLES: Final = ("ingest", "recall")
INGEST_SLOT: Final = 0
RECALL_SLOT: Final = 1
FAULT_ACTIONS: Final = ("kill", "redis_crash", "redis_restart", "broker_restart")


@dataclass(frozen=True, slots=True)
class Fault:
    at: float  # fraction of the valid events published
    action: str  # one of FAULT_ACTIONS
    worker: int = 0  # which worker slot (kill)
    delay_s: float = 0.0  # after the threshold, so faults land anywhere in a batch
    downtime_s: float = 0.0  # Redis or the broker down this long
    # Fired while this checkpoint's recalls are in flight (not on the timeline).
    checkpoint: int | None = None


@dataclass(frozen=True, slots=True)
class FaultPlan:
    faults: tuple[Fault, ...]

    @property
    def timeline(self) -> tuple[Fault, ...]:
        return tuple(f for f in self.faults if f.checkpoint is None)

    def at_checkpoint(self, index: int) -> tuple[Fault, ...]:
        return tuple(f for f in self.faults if f.checkpoint == index)


def fault_plan(
    *,
    kills: int,
    seed: int,
    redis_crashes: int = 0,
    broker_restarts: int = 0,
    redis_restarts: int = 0,
    workers: int = 2,
    checkpoints: int = 0,
) -> FaultPlan:
    """Each timeline fault in its own stretch of [0.1, 0.85] of the events published,
    at a seeded point within it, so faults never pile up and each happens while
    events flow. Kills go to the worker slots in turn (every role is killed once
    there are as many kills as slots); with checkpoints and a recall worker, one of
    the recall worker's kills lands while a checkpoint's recalls are in flight
    (recalls come only at checkpoints)."""
    rng = random.Random(seed ^ 0xFA17)
    slots = [n % workers for n in range(kills)]
    rng.shuffle(slots)
    at_recalls: list[Fault] = []
    if checkpoints > 0 and workers > RECALL_SLOT and RECALL_SLOT in slots:
        slots.remove(RECALL_SLOT)
        at_recalls.append(
            Fault(
                at=0.0,
                action="kill",
                worker=RECALL_SLOT,
                delay_s=round(rng.uniform(0.05, 0.6), 2),
                checkpoint=rng.randrange(checkpoints),
            )
        )
    actions: list[tuple[str, int]] = [("kill", slot) for slot in slots]
    actions += [("redis_crash", 0)] * redis_crashes + [("broker_restart", 0)] * broker_restarts
    actions += [("redis_restart", 0)] * redis_restarts
    rng.shuffle(actions)
    span = (0.85 - 0.1) / max(1, len(actions))
    faults = []
    for slot, (action, worker) in enumerate(actions):
        at = 0.1 + span * slot + rng.uniform(0.15, 0.85) * span
        faults.append(
            Fault(
                at=round(at, 4),
                action=action,
                worker=worker,
                delay_s=round(rng.uniform(0.0, 2.0), 2),
                downtime_s=round(rng.uniform(1.0, 4.0), 2) if action != "kill" else 0.0,
            )
        )
    return FaultPlan((*faults, *at_recalls))


# ---- the workers -------------------------------------------------------------------


class _Workers:
    """One run's worker processes: started, SIGKILLed and started again; a worker
    that exits without being killed (or stopped) here has crashed."""

    def __init__(
        self,
        settings: Settings,
        root: Path,
        root_dir: Path,
        roles: Sequence[str] = ("ingest,recall",),
    ) -> None:
        self.settings = settings
        self.root = root  # the repository (the worker's cwd)
        self.dir = root_dir
        self.roles = tuple(roles)  # each slot's GRIMOIRE_WORKER_ROLES
        self.slots: dict[int, subprocess.Popen[bytes]] = {}
        self.started_at: dict[int, float] = {}
        self.logs: dict[int, Path] = {}  # pid -> log
        self.killed: set[int] = set()
        self.crashes: list[dict[str, Any]] = []
        self._incarnation = 0

    def start(self, slot: int) -> None:
        if len(self.crashes) > 10:
            raise RuntimeError(f"workers keep crashing: {self.crashes[-3:]}")
        self._incarnation += 1
        data_dir = self.dir / "data" / f"worker-{slot}"
        data_dir.mkdir(parents=True, exist_ok=True)
        role = self.roles[slot]
        settings = self.settings.with_values(data_dir=data_dir, worker_roles=role)
        log = self.dir / "log" / f"worker-{slot}-{self._incarnation}.log"
        process = start_worker(settings, log, cwd=self.root)
        self.slots[slot] = process
        self.started_at[slot] = time.monotonic()
        self.logs[process.pid] = log
        logger.info("worker %d (%s) started (pid %d, log %s)", slot, role, process.pid, log)

    def kill(self, slot: int) -> None:
        process = self.slots[slot]
        if process.poll() is None:
            self.killed.add(process.pid)
            process.kill()
            process.wait()
            logger.info("worker %d (pid %d) SIGKILLed", slot, process.pid)
        self.start(slot)

    def check(self) -> None:
        """Notice crashed workers (recorded, then started again so the run can end)."""
        for slot, process in list(self.slots.items()):
            code = process.poll()
            if code is not None and process.pid not in self.killed:
                log = self.logs.get(process.pid)
                tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
                self.crashes.append({"slot": slot, "pid": process.pid, "rc": code, "log": str(log)})
                logger.error(
                    "worker %d (pid %d) exited on its own (rc %s):\n%s",
                    slot,
                    process.pid,
                    code,
                    tail,
                )
                self.killed.add(process.pid)
                self.start(slot)

    def stop_all(self) -> None:
        self.check()
        for process in self.slots.values():
            self.killed.add(process.pid)
            stop_worker(process)


async def _until_ready(client: GrimoireClient, workers: _Workers) -> None:
    """Until a worker answers a recall, noticing workers that die starting."""
    deadline = time.monotonic() + _READY_S
    while True:
        workers.check()
        try:
            await client.wait_until_ready(timeout=10.0)
            return
        except RecallTimeout:
            if time.monotonic() > deadline:
                raise


# ---- reading back ------------------------------------------------------------------


async def read_topics(
    bootstrap: str, topics: Sequence[str]
) -> dict[str, list[tuple[int, int, bytes]]]:
    """Every record of each topic: (partition, offset, value), partition by partition."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    out: dict[str, list[tuple[int, int, bytes]]] = {topic: [] for topic in topics}
    try:
        await consumer.topics()
        tps = [
            TopicPartition(topic, p)
            for topic in topics
            for p in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        # tansu's ListOffsets undercounts: the end is found by reading.
        ends = await true_end_offsets(consumer, tps)
        for tp in tps:
            async for batch in read_partition(consumer, tp, end=ends[tp]):
                out[tp.topic].extend((tp.partition, m.offset or 0, m.value) for m in batch)
    finally:
        await consumer.stop()
    return out


async def decided_sets(redis: Redis, prefix: str, agents: Iterable[str]) -> dict[str, set[str]]:
    keys = Keyspace(prefix)
    out: dict[str, set[str]] = {}
    for agent in agents:
        out[agent] = {text_of(k) for k in await redis.hkeys(keys.decided(agent))}
    return out


async def _summed(
    redis: Redis, agents: Sequence[str], queue: Callable[[Any, str], object]
) -> int | None:
    """The sum over `agents` of the counts `queue` puts on a pipeline (one each);
    None while Redis is away (restarting: no reading now)."""
    try:
        async with redis.pipeline(transaction=False) as pipe:
            for agent in agents:
                queue(pipe, agent)
            return sum(int(n) for n in await pipe.execute())
    except Exception:
        return None


async def decided_total(redis: Redis, prefix: str, agents: Sequence[str]) -> int | None:
    keys = Keyspace(prefix)
    return await _summed(redis, agents, lambda pipe, agent: pipe.hlen(keys.decided(agent)))


async def _witness_total(redis: Redis, prefix: str, agents: Sequence[str]) -> int | None:
    keys = Keyspace(prefix)
    return await _summed(redis, agents, lambda pipe, agent: pipe.xlen(keys.witness(agent)))


async def records_per_event(redis: Redis, prefix: str) -> dict[tuple[str, str], int]:
    """(agent, source event id) → memory records, aggregates aside."""
    keys = Keyspace(prefix)
    counts: Counter[tuple[str, str]] = Counter()
    batch: list[str] = []

    async def flush() -> None:
        async with redis.pipeline(transaction=False) as pipe:
            for key in batch:
                pipe.hmget(key, ["agent_id", "source_event_id", "kind"])
            for agent, source, kind in await pipe.execute():
                if agent is None or text_of(kind) == "aggregate":
                    continue
                counts[(text_of(agent), text_of(source))] += 1
        batch.clear()

    async for raw in redis.scan_iter(match=keys.memory_pattern, count=1000):
        batch.append(text_of(raw))
        if len(batch) >= 1000:
            await flush()
    if batch:
        await flush()
    return dict(counts)


async def _wait_quiet(
    redis: Redis, prefix: str, agents: Sequence[str], total: int, timeout: float
) -> bool:
    """Until every valid candidate is decided and the witness logs stop growing
    (True), or nothing has moved for a while short of that (False)."""
    deadline = time.monotonic() + timeout
    last: tuple[int | None, int | None] = (None, None)
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        now = (
            await decided_total(redis, prefix, agents),
            await _witness_total(redis, prefix, agents),
        )
        if now != last:
            last, quiet_since = now, time.monotonic()
        elif now[0] is not None:
            still = time.monotonic() - quiet_since
            if now[0] >= total and still >= _QUIET_S:
                return True
            if still >= 6 * _QUIET_S:
                return False
        await asyncio.sleep(0.5)
    return False


# ---- digests -----------------------------------------------------------------------


# Families that name journal coordinates, compared by content apart: the witness
# log's records name journal positions, and the usage entries applied are kept by
# their journal sequence numbers, which a sequencer killed after journaling (its
# inputs journaled again, skipped by the fold, each spending a number) moves on for
# every later entry of the agent, whatever the fold did.
_BY_POSITION: Final = frozenset({"witness", "witness_due", "usage_applied"})


async def comparable_digest(redis: Redis, prefix: str, agent: str) -> dict[str, str]:
    """The agent's state digest with what names journal coordinates compared by
    content: `state` (every family but the witness log and the usage entries
    applied, as `agent_digest` digests it), `witness` (each record's seq, op, ids
    and fields digest), `usage_applied` (how many usage entries were applied), and
    `digest` over the three."""
    footprint = await agent_footprint(redis, prefix, agent)
    families = {name: keys for name, keys in footprint.families.items() if name not in _BY_POSITION}
    state = await footprint_digest(redis, replace(footprint, families=families))
    records = await RedisWitnessLog(redis, prefix).records(agent)
    chain = [[r.seq, r.op, list(r.ids), r.fields_digest] for r in records]
    witness = hashlib.sha256(canonical_bytes(chain)).hexdigest()
    usage_applied = int(await redis.zcard(Keyspace(prefix).applied_usage(agent)))
    digest = hashlib.sha256(f"{state.sha256}\n{witness}\n{usage_applied}".encode()).hexdigest()
    return {
        "digest": digest,
        "state": state.sha256,
        "witness": witness,
        "records": str(len(records)),
        "usage_applied": str(usage_applied),
    }


async def witness_ops(redis: Redis, prefix: str, agent: str) -> Counter[str]:
    """The agent's witness records by op."""
    return Counter(r.op for r in await RedisWitnessLog(redis, prefix).records(agent))


async def _family_digests(redis: Redis, prefix: str, agent: str) -> dict[str, str]:
    """One digest per family (and per member family): where two states differ."""
    footprint = await agent_footprint(redis, prefix, agent)
    out: dict[str, str] = {}
    for name, keys in footprint.families.items():
        if name in _BY_POSITION:
            continue
        part = replace(footprint, families={name: keys}, members={})
        out[name] = (await footprint_digest(redis, part)).sha256
    for name, member in footprint.members.items():
        part = replace(footprint, families={}, members={name: member})
        out[f"member:{name}"] = (await footprint_digest(redis, part)).sha256
    return out


async def _first_difference(redis: Redis, one: str, two: str, agent: str) -> dict[str, Any]:
    """Where two witness chains first part: each side's record there (by content)."""
    first = await RedisWitnessLog(redis, one).records(agent)
    second = await RedisWitnessLog(redis, two).records(agent)

    def content(record: Any) -> tuple[Any, ...]:
        return (record.op, record.ids, record.fields_digest)

    for index in range(max(len(first), len(second))):
        a = first[index] if index < len(first) else None
        b = second[index] if index < len(second) else None
        if a is None or b is None or content(a) != content(b):
            return {
                "seq": index + 1,
                "faulty": _summary(a),
                "clean": _summary(b),
                # Is the clean run's record anywhere in the faulty chain (a gap) or not?
                "clean_record_in_faulty_chain": b is not None
                and any(content(r) == content(b) for r in first),
            }
    return {}


def _summary(record: Any) -> dict[str, Any] | None:
    if record is None:
        return None
    return {
        "op": record.op,
        "ids": list(record.ids)[:4],
        "journal": [record.journal_partition, record.journal_offset],
    }


# ---- the runs ----------------------------------------------------------------------


# The vector lanes' hybrid policy in both runs: RediSearch's own choice, which is
# exact brute force over one agent's memories here. The deployment's default,
# BATCHES, walks the prefix's one HNSW graph, whose shape depends on the order
# every agent's vectors went in (and a Redis restart rebuilds it in another): two
# runs of the same inputs then answer a recall differently whatever their states,
# and what a recall returned is journaled (usage, a run's learning), so the folds
# part for a reason no fault caused.
EXACT_KNN: Final = ""


@dataclass
class _Env:
    base: Settings
    services: LocalServices
    root: Path
    state_dir: Path
    valid: list[ValidEvent]
    expected_valid: dict[str, tuple[tuple[str, str], ...]]  # event id -> candidates
    agents: list[str]
    total_candidates: int
    seed: int
    fuzz_kinds: tuple[str, ...] = FUZZ_KINDS
    checkpoints: int = 3
    knn_hybrid_policy: str = EXACT_KNN


def _run_settings(env: _Env, prefix: str) -> Settings:
    return env.base.with_values(
        topic_prefix=prefix,
        app_id=f"grimoire-{prefix}",
        maintenance_enabled=False,
        block_interval_s=3_600.0,
        knn_hybrid_policy=env.knn_hybrid_policy,
    )


def _topic(topics: TopicNames, kind: str) -> str:
    name: str = getattr(topics, kind)
    return name


def _chunks(
    env: _Env, fuzz: Sequence[FuzzMessage], topics: TopicNames
) -> list[tuple[list[tuple[str, str, bytes]], int]]:
    """The publishing order: chunks of valid events with the fuzz spread among
    them, each with the valid candidates published up to its end."""
    chunks: list[tuple[list[tuple[str, str, bytes]], int]] = []
    per_valid = len(fuzz) / max(1, len(env.valid))
    next_fuzz = 0
    cumulative = 0
    for start in range(0, len(env.valid), _CHUNK_EVENTS):
        records: list[tuple[str, str, bytes]] = []
        for offset, event in enumerate(env.valid[start : start + _CHUNK_EVENTS]):
            records.append((_topic(topics, event.topic_kind), event.agent_id, event.value))
            cumulative += len(env.expected_valid[event.event_id])
            until = int((start + offset + 1) * per_valid)
            while next_fuzz < min(until, len(fuzz)):
                message = fuzz[next_fuzz]
                records.append((_topic(topics, message.topic_kind), message.key, message.value))
                next_fuzz += 1
        chunks.append((records, cumulative))
    for message in fuzz[next_fuzz:]:
        chunks[-1][0].append((_topic(topics, message.topic_kind), message.key, message.value))
    return chunks


# Inputs made of a recall's answer (its memory ids): equal between the runs exactly
# when the answers are (`recall_answers_equal_to_clean_run`).
_FROM_ANSWERS: Final = frozenset({"outcomes.positive", "commands.pin"})


class SendGate:
    """Many holders at once (the bench sending), or one alone (a broker restart):
    nothing the bench itself sends is in flight while the broker is down. A record
    the broker stored but never acknowledged would be sent again, a second copy of
    an input: the workers' handling of the restart is what is under test, not the
    bench's producer."""

    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self._shared = 0
        self._exclusive = False

    @contextlib.asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._exclusive)
            self._shared += 1
        try:
            yield
        finally:
            async with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        async with self._cond:
            self._exclusive = True  # first: no new holder gets in while it waits
            await self._cond.wait_for(lambda: self._shared == 0)
        try:
            yield
        finally:
            async with self._cond:
                self._exclusive = False
                self._cond.notify_all()


async def _crash(services: LocalServices, name: str, downtime_s: float) -> dict[str, Any]:
    """SIGKILL a service (`services.pids()` name), leave it down `downtime_s`, and
    start it again on the same storage."""
    pid = services.pids().get(name)
    if pid is None:
        raise RuntimeError(f"{name} is not running: nothing to crash")
    began = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 20.0
    while name in services.pids():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} (pid {pid}) outlived SIGKILL")
        await asyncio.sleep(0.05)
    await asyncio.sleep(downtime_s)
    await asyncio.to_thread(services.up)
    return {"pid": pid, "outage_s": round(time.perf_counter() - began, 2)}


class _Driver:
    """A run's progress (candidates decided, polled), its workers watched (one that
    dies on its own is started again and counted), and, in the faulty run, its
    timeline faults fired once enough of the events are published and the last
    fault is `_FAULT_GAP_S` behind."""

    def __init__(
        self,
        env: _Env,
        workers: _Workers,
        redis: Redis,
        prefix: str,
        gate: SendGate,
        faults: Sequence[Fault] = (),
    ) -> None:
        self.env = env
        self.workers = workers
        self.redis = redis
        self.prefix = prefix
        self.gate = gate
        self.pending = list(faults)
        self.fired: list[dict[str, Any]] = []
        self.decided = 0
        self.changed = time.monotonic()
        self.last_fault = float("-inf")
        self.published = 0.0  # fraction of the chunks published
        self._firing = asyncio.Lock()
        self._stop = False

    async def poll(self) -> None:
        self.workers.check()
        decided = await decided_total(self.redis, self.prefix, self.env.agents)
        if decided is not None and decided != self.decided:
            self.decided, self.changed = decided, time.monotonic()
        while (
            self.pending
            and self.published >= self.pending[0].at
            and time.monotonic() - self.last_fault >= _FAULT_GAP_S
        ):
            fault = self.pending.pop(0)
            await asyncio.sleep(fault.delay_s)
            await self.fire(fault)

    async def run(self) -> None:
        while not self._stop:
            await self.poll()
            await asyncio.sleep(0.5)

    async def stop(self, task: asyncio.Task[None]) -> None:
        """Let a fault under way finish (a service half restarted would be left down)."""
        self._stop = True
        await task

    async def wait_gap(self) -> None:
        while time.monotonic() - self.last_fault < _FAULT_GAP_S:
            await asyncio.sleep(0.25)

    async def fire(self, fault: Fault, *, checkpoint: int | None = None) -> None:
        async with self._firing:
            record: dict[str, Any] = {
                "action": fault.action,
                "at_published": round(self.published, 3),
                "at_decided": self.decided,
            }
            if checkpoint is not None:
                record["during_recalls_of_checkpoint"] = checkpoint
            services = self.env.services
            if fault.action == "kill":
                record.update(worker=fault.worker, role=self.workers.roles[fault.worker])
                self.workers.kill(fault.worker)
            elif fault.action == "redis_crash":
                logger.info("Redis: SIGKILL (down %.1fs)", fault.downtime_s)
                record.update(await _crash(services, "redis", fault.downtime_s))
            elif fault.action == "broker_restart":
                logger.info("the broker: SIGKILL (down %.1fs)", fault.downtime_s)
                async with self.gate.exclusive():
                    record.update(await _crash(services, "kafka", fault.downtime_s))
            elif fault.action == "redis_restart":
                logger.info("Redis: clean restart (down %.1fs)", fault.downtime_s)
                began = time.perf_counter()
                await asyncio.to_thread(services.restart_redis, fault.downtime_s)
                record["outage_s"] = round(time.perf_counter() - began, 2)
            else:
                raise ValueError(f"unknown fault {fault.action!r}")
            logger.info("fault fired: %s", record)
            self.fired.append(record)
            self.changed = self.last_fault = time.monotonic()


class _Inputs:
    """The bench's own producer for what goes in at checkpoints: each input is sent
    alone and waited for, so its (partition, offset) is known, and the fold's mark
    for that source partition says when it has been applied."""

    def __init__(self, bootstrap: str) -> None:
        self._producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def send(self, topic: str, key: str, value: bytes) -> tuple[int, int]:
        meta = await self._producer.send_and_wait(topic, value=value, key=key.encode())
        return meta.partition, meta.offset


class _Run:
    """One run: its workers, its publishing (valid events in chunks, the fuzz among
    them in the faulty run) and its checkpoints, where every agent is sent a fact,
    a recall, outcomes and commands (`AgentCheckpoint`), each applied before the
    next is sent."""

    def __init__(
        self,
        env: _Env,
        *,
        faulty: bool,
        fuzz_count: int = 0,
        plan: FaultPlan | None = None,
    ) -> None:
        self.env = env
        self.faulty = faulty
        self.fuzz_count = fuzz_count
        self.plan = plan or FaultPlan(())
        self.prefix = f"{'fa' if faulty else 'fb'}{uuid.uuid4().hex[:6]}"
        self.settings = _run_settings(env, self.prefix)
        self.topics = TopicNames(self.prefix)
        self.keys = Keyspace(self.prefix)
        roles = SLOT_ROLES if faulty else ("ingest,recall",)
        self.workers = _Workers(self.settings, env.root, env.state_dir / self.prefix, roles)
        self.redis = Redis.from_url(self.settings.redis.url)
        self.gate = SendGate()
        self.inputs = _Inputs(self.settings.bootstrap_servers)
        self.driver = _Driver(
            env, self.workers, self.redis, self.prefix, self.gate, self.plan.timeline
        )
        # What went in at checkpoints, by label; per agent, in order, what was
        # planned (labels and bytes, recalls by query: not what was made of a
        # recall's answer, compared apart), for comparing both runs' inputs.
        self.sent: Counter[str] = Counter()
        self.sent_log: dict[str, list[tuple[str, bytes]]] = {a: [] for a in env.agents}
        self.answers: dict[str, list[list[str] | None]] = {a: [] for a in env.agents}
        self.usage_expected: Counter[str] = Counter()  # recalls that returned items
        self.unapplied: list[dict[str, Any]] = []  # inputs whose effect never showed
        self.checkpoints: list[dict[str, Any]] = []
        self._expected_fuzz: list[Expected] = []
        self._publish_s = 0.0  # when every candidate was decided (perf_counter)
        self._driver_task: asyncio.Task[None] | None = None

    def _driver_alive(self) -> None:
        """Raise what ended the driver (workers that keep crashing, a service that
        would not start again): the run cannot go on without it."""
        task = self._driver_task
        if task is not None and task.done():
            task.result()
            raise RuntimeError("the run's driver stopped")

    # -- waiting for the fold --------------------------------------------------------

    def _stalled(self, since: float) -> bool:
        """Nothing decided for `_STALL_S` (and this wait began that long ago)."""
        now = time.monotonic()
        return now - since > _STALL_S and now - self.driver.changed > _STALL_S

    async def until_decided(self, agent: str, events: Sequence[ValidEvent]) -> bool:
        missing = [cand for e in events for _, cand in self.env.expected_valid[e.event_id]]
        key = self.keys.decided(agent)
        began = time.monotonic()
        while missing:
            if self._stalled(began):
                return False
            try:
                found = await self.redis.hmget(key, missing)
            except Exception:  # Redis down (a fault): ask again
                found = None
            if found is not None:
                missing = [c for c, v in zip(missing, found, strict=True) if v is None]
            if missing:
                await asyncio.sleep(0.3)
        return True

    async def until_applied(self, agent: str, topic: str, partition: int, offset: int) -> bool:
        field_name = mark_field((agent, topic, partition))
        began = time.monotonic()
        while time.monotonic() - began < _STALL_S:
            try:
                raw = await self.redis.hget(self.keys.applied_sources, field_name)
            except Exception:
                raw = None
            if raw is not None and int(text_of(raw)) >= offset:
                return True
            await asyncio.sleep(0.2)
        return False

    async def _witness_tail(self, agent: str) -> str:
        """Where the agent's witness log ends now, as an XRANGE start after it."""
        while True:
            try:
                last = await self.redis.xrevrange(self.keys.witness(agent), count=1)
                return f"({text_of(last[0][0])}" if last else "-"
            except Exception:
                await asyncio.sleep(0.3)

    async def until_usage(self, agent: str, after: str) -> bool:
        """Until a usage record follows `after` in the agent's witness log."""
        began = time.monotonic()
        while time.monotonic() - began < _STALL_S:
            entries: Any = []
            with contextlib.suppress(Exception):  # Redis down (a fault): ask again
                entries = await self.redis.xrange(self.keys.witness(agent), min=after, max="+")
            for _, fields in entries:
                if orjson.loads(fields[b"record"]).get("op") == "usage":
                    return True
            await asyncio.sleep(0.2)
        return False

    # -- checkpoints -----------------------------------------------------------------

    async def _send(
        self, index: int, agent: str, topic_kind: str, records: Sequence[tuple[str, bytes]]
    ) -> None:
        """Send the records in order (one topic: one partition for the agent), then
        wait until the fold applied the last."""
        topic = _topic(self.topics, topic_kind)
        where = (0, -1)
        for label, value in records:
            async with self.gate.shared():
                where = await self.inputs.send(topic, agent, value)
            self.sent[label] += 1
            if label not in _FROM_ANSWERS:
                self.sent_log[agent].append((label, value))
        if not await self.until_applied(agent, topic, *where):
            self.unapplied.append(
                {"agent": agent, "checkpoint": index, "inputs": [label for label, _ in records]}
            )

    async def _recall(self, cp: AgentCheckpoint, client: GrimoireClient) -> tuple[str, ...]:
        agent = cp.agent_id
        tail = await self._witness_tail(agent)
        self.sent["recall_requests"] += 1
        self.sent_log[agent].append(("recall_requests", f"{cp.query}|{cp.run_id}".encode()))
        try:
            async with self.gate.shared():
                answer = await client.recall(
                    agent, cp.query, serving_run_id=cp.run_id, timeout=_STALL_S
                )
        except (RecallTimeout, RecallFailed) as exc:
            self.answers[agent].append(None)
            error = f"{type(exc).__name__}: {exc}"[:200]
            self.unapplied.append(
                {
                    "agent": agent,
                    "checkpoint": cp.index,
                    "inputs": ["recall_requests"],
                    "error": error,
                }
            )
            return ()
        recalled = tuple(item.id for item in answer.items)
        self.answers[agent].append(list(recalled))
        if recalled:  # delivered items: a usage entry is journaled
            self.usage_expected[agent] += 1
            if not await self.until_usage(agent, tail):
                self.unapplied.append({"agent": agent, "checkpoint": cp.index, "inputs": ["usage"]})
        return recalled

    async def checkpoint(self, index: int, published: int, client: GrimoireClient) -> None:
        """Every agent, side by side, step by step: its events published so far all
        decided; a fact; a recall (a recall worker kill may land among them); the
        run's outcomes; commands."""
        began = time.perf_counter()
        before: dict[str, list[ValidEvent]] = {a: [] for a in self.env.agents}
        for event in self.env.valid[:published]:
            before[event.agent_id].append(event)
        cps = [
            checkpoint_inputs(agent, index, before[agent], seed=self.env.seed)
            for agent in self.env.agents
        ]
        logger.info("%s run: checkpoint %d after %d events", self._name, index, published)
        decided = await asyncio.gather(*(self.until_decided(a, before[a]) for a in before))
        undecided = [a for a, ok in zip(before, decided, strict=True) if not ok]
        await asyncio.gather(
            *(self._send(index, cp.agent_id, "facts", [("facts", cp.fact)]) for cp in cps)
        )
        self._driver_alive()
        faults = self.plan.at_checkpoint(index) if self.faulty else ()
        if faults:
            await self.driver.wait_gap()
        recalls = asyncio.gather(*(self._recall(cp, client) for cp in cps))
        for fault in faults:
            await asyncio.sleep(fault.delay_s)
            await self.driver.fire(fault, checkpoint=index)
        recalled = await recalls
        self._driver_alive()
        await asyncio.gather(
            *(
                self._send(index, cp.agent_id, "outcomes", outcome_inputs(cp, ids))
                for cp, ids in zip(cps, recalled, strict=True)
            )
        )
        await asyncio.gather(
            *(
                self._send(index, cp.agent_id, "commands", command_inputs(cp, ids))
                for cp, ids in zip(cps, recalled, strict=True)
            )
        )
        self.checkpoints.append(
            {
                "index": index,
                "after_events": published,
                "seconds": round(time.perf_counter() - began, 1),
                "undecided_agents": undecided,
            }
        )

    @property
    def _name(self) -> str:
        return "faulty" if self.faulty else "clean"

    # -- the run ---------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        env = self.env
        started = time.perf_counter()
        for slot in range(len(self.workers.roles)):
            self.workers.start(slot)
        driver_task: asyncio.Task[None] | None = None
        try:
            async with GrimoireClient(
                self.settings.bootstrap_servers,
                self.prefix,
                partitions=self.settings.broker.partitions,
                client_id=CLIENT_ID,
            ) as client:
                await self.inputs.start()
                try:
                    await _until_ready(client, self.workers)
                    fuzz = (
                        fuzz_messages(
                            self.topics,
                            count=self.fuzz_count,
                            seed=env.seed,
                            reply_to=client.reply_topic,
                            kinds=env.fuzz_kinds,
                        )
                        if self.faulty
                        else []
                    )
                    driver_task = self._driver_task = asyncio.create_task(self.driver.run())
                    stalled, quiet, fuzz_agents = await self._publish(client, fuzz)
                finally:
                    try:
                        if driver_task is not None:
                            await self.driver.stop(driver_task)
                    finally:
                        await self.inputs.stop()
            self.workers.check()
            crashes = list(self.workers.crashes)
            self.workers.stop_all()
            publish_s = self._publish_s
            result = await self._account(fuzz, fuzz_agents)
            return {
                "prefix": self.prefix,
                "seconds": round(time.perf_counter() - started, 1),
                "publish_to_decided_s": round(publish_s - started, 1),
                "quiet": quiet,
                "stalled": stalled,
                "faults": self.driver.fired,
                "crashes": crashes,
                "checkpoints": self.checkpoints,
                "inputs": dict(sorted(self.sent.items())),
                "inputs_digest": _inputs_digest(self.sent_log),
                "recall_answers": self.answers,
                "unapplied": self.unapplied,
                **result,
            }
        finally:
            for process in self.workers.slots.values():
                if process.poll() is None:
                    stop_worker(process)
            await self.redis.aclose()

    async def _publish(
        self, client: GrimoireClient, fuzz: Sequence[FuzzMessage]
    ) -> tuple[bool, bool, list[str]]:
        env, driver = self.env, self.driver
        self._expected_fuzz = [
            expected_outcome(self.topics, m.topic_kind, m.value, self.settings) for m in fuzz
        ]
        fuzz_agents = sorted(
            {agent for e in self._expected_fuzz for agent, _ in e.candidates}
            | {m.key for m in fuzz}
        )
        chunks = _chunks(env, fuzz, self.topics)
        after = checkpoint_chunks(len(chunks), env.checkpoints)
        backlog = max(2_000, env.total_candidates // 10)
        published_candidates = 0
        for index, (records, cumulative) in enumerate(chunks):
            # A few thousand candidates ahead of the decisions, so faults land
            # while events flow; when decisions stop (lost events never come),
            # publishing goes on after a while rather than waiting for them.
            while (
                self.faulty
                and published_candidates - driver.decided > backlog
                and time.monotonic() - driver.changed < _PACE_WAIT_S
            ):
                self._driver_alive()
                await asyncio.sleep(0.5)
            async with self.gate.shared():
                for topic, key, value in records:
                    await client.publish_raw(topic, key, value, wait=False)
                await client.flush()
            published_candidates = cumulative
            driver.published = (index + 1) / len(chunks)
            if index % 5 == 0:
                logger.info(
                    "%s run: published %d/%d chunks, %d/%d candidates decided",
                    self._name,
                    index + 1,
                    len(chunks),
                    driver.decided,
                    env.total_candidates,
                )
            if index + 1 in after:
                published = min(len(env.valid), (index + 1) * _CHUNK_EVENTS)
                await self.checkpoint(after.index(index + 1), published, client)
        stalled = False
        while not stalled and (driver.decided < env.total_candidates or driver.pending):
            self._driver_alive()
            if time.monotonic() - driver.changed > _STALL_S:
                stalled = True
            await asyncio.sleep(0.5)
        self._publish_s = time.perf_counter()
        logger.info("%s run: %d candidates decided, waiting for quiet", self._name, driver.decided)
        quiet = await _wait_quiet(
            self.redis, self.prefix, env.agents + fuzz_agents, env.total_candidates, 120.0
        )
        return stalled, quiet, fuzz_agents

    async def _account(self, fuzz: Sequence[FuzzMessage], fuzz_agents: list[str]) -> dict[str, Any]:
        env, redis, prefix, topics = self.env, self.redis, self.prefix, self.topics
        ops = {a: await witness_ops(redis, prefix, a) for a in env.agents}
        usage_records = {a: ops[a]["usage"] for a in env.agents}
        usage = {
            "recalls_with_items": sum(self.usage_expected.values()),
            "usage_records": sum(usage_records.values()),
            "duplicated": sum(
                max(0, usage_records[a] - self.usage_expected[a]) for a in env.agents
            ),
            "missing": sum(max(0, self.usage_expected[a] - usage_records[a]) for a in env.agents),
        }
        digests = {a: await comparable_digest(redis, prefix, a) for a in env.agents}
        full_digests = {a: (await agent_digest(redis, prefix, a)).sha256 for a in env.agents}
        common = {
            "usage": usage,
            "witness_ops": dict(sorted(sum(ops.values(), Counter()).items())),
            "digests": digests,
            "full_digests": full_digests,
        }
        if not self.faulty:
            decided = await decided_sets(redis, prefix, env.agents)
            account = account_valid(env.expected_valid, decided, {}, {})
            return {"valid": account, **common}

        logger.info("faulty run: reading the topics back")
        read = [
            topics.episodes,
            topics.tool_events,
            topics.transcripts,
            topics.outcomes,
            topics.commands,
            topics.recall_requests,
            topics.memory_events,
            topics.dead_letters,
        ]
        topic_records = await read_topics(self.settings.bootstrap_servers, read)
        by_value = {m.value: i for i, m in enumerate(fuzz)}
        where: dict[int, list[Coordinates]] = {}
        valid_values = {e.value for e in env.valid}
        valid_found = 0
        for topic in read[:6]:
            for partition, offset, value in topic_records[topic]:
                index = by_value.get(value)
                if index is not None:
                    where.setdefault(index, []).append((topic, partition, offset))
                elif value in valid_values:
                    valid_found += 1
        letters: dict[Coordinates, str] = {}
        journal_letters: dict[tuple[int, int], str] = {}
        reasons: Counter[str] = Counter()
        for _, _, value in topic_records[topics.dead_letters]:
            letter = orjson.loads(value)
            reasons[letter.get("reason", "?")] += 1
            coords = (letter.get("source_topic"), letter.get("partition"), letter.get("offset"))
            if coords[0] == topics.journal:
                journal_letters[(int(coords[1]), int(coords[2]))] = letter.get("reason", "?")
            else:
                letters[(str(coords[0]), int(coords[1] or 0), int(coords[2] or 0))] = letter.get(
                    "reason", "?"
                )
        if journal_letters:  # poison entries: through the journal to their source
            journal = await read_topics(self.settings.bootstrap_servers, [topics.journal])
            for partition, offset, value in journal[topics.journal]:
                reason = journal_letters.get((partition, offset))
                if reason is None:
                    continue
                try:
                    source = decode_entry(value).source
                except InvalidEntry:
                    continue
                if source is not None:
                    letters[(source.topic, source.partition, source.offset)] = reason
        valid_letters = sum(
            1
            for topic in read[:3]
            for partition, offset, value in topic_records[topic]
            if value in valid_values and (topic, partition, offset) in letters
        )
        decision_events, redelivered = decision_event_counts(
            value for _, _, value in topic_records[topics.memory_events]
        )
        decided = await decided_sets(redis, prefix, env.agents + fuzz_agents)
        records = await records_per_event(redis, prefix)
        valid_account = account_valid(env.expected_valid, decided, decision_events, records)
        fuzz_account = account_fuzz(fuzz, self._expected_fuzz, where, letters, decided)
        audit_report = await _audit(redis, prefix, env.agents, env.seed)
        return {
            "valid": valid_account,
            "valid_found_on_topics": valid_found,
            "valid_dead_lettered": valid_letters,
            "fuzz": fuzz_account,
            "fuzz_predicted_internal_errors": sum(1 for e in self._expected_fuzz if e.raised),
            "dead_letter_reasons": dict(sorted(reasons.items())),
            "poison_dead_letters": len(journal_letters),
            "decision_events": sum(decision_events.values()),
            "events_redelivered": redelivered,
            "audit": audit_report,
            **common,
        }


def _inputs_digest(sent: Mapping[str, Sequence[tuple[str, bytes]]]) -> str:
    """What each agent was sent at checkpoints as planned, in its order (recalls by
    query and run): equal between the runs when both sent the same."""
    digest = hashlib.sha256()
    for agent in sorted(sent):
        for label, value in sent[agent]:
            digest.update(f"{agent}\0{label}\0".encode() + value + b"\n")
    return digest.hexdigest()


async def _audit(redis: Redis, prefix: str, agents: Sequence[str], seed: int) -> dict[str, Any]:
    """Verify every agent's chain; rewrite one stored record and verify again (the
    break must be found where the record is); put the record back."""
    log = RedisWitnessLog(redis, prefix)
    verdicts = {agent: await audit(log, agent) for agent in agents}
    verified = all(v.ok for v in verdicts.values())
    records = sum(v.count for v in verdicts.values())
    rng = random.Random(seed ^ 0xA0D1)
    candidates = [a for a in agents if verdicts[a].count > 0]
    if not candidates:
        return {"verified": verified, "records": records, "tamper_detected": False}
    agent = rng.choice(candidates)
    key = Keyspace(prefix).witness(agent)
    entries = await redis.xrange(key, "-", "+")
    position = rng.randrange(len(entries))
    entry_id, fields = entries[position]
    record = orjson.loads(fields[b"record"])
    field_name = rng.choice(["op", "ids"])
    if field_name == "op":
        record["op"] = f"{record['op']}-tampered"
    else:
        record["ids"] = [*record["ids"], "forged-memory-id"]
    tampered = dict(fields)
    tampered[b"record"] = orjson.dumps(record)

    async def rewrite(replacement: Mapping[bytes, bytes]) -> None:
        async with redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            for n, (eid, original) in enumerate(entries):
                pipe.xadd(key, dict(replacement if n == position else original), id=eid)
            await pipe.execute()

    await rewrite(tampered)
    broken = await audit(log, agent)
    await rewrite(fields)
    restored = await audit(log, agent)
    seq = int(text_of(entry_id).split("-", 1)[0])
    return {
        "verified": verified,
        "agents": len(agents),
        "records": records,
        "tamper_detected": (not broken.ok) and broken.first_broken == seq,
        "tampered": {
            "agent": agent,
            "seq": seq,
            "field": field_name,
            "first_broken": broken.first_broken,
            "reason": broken.reason,
        },
        "restored_verifies": restored.ok,
    }


# ---- the bench ---------------------------------------------------------------------


def _compare(faulty: Mapping[str, Any], clean: Mapping[str, Any]) -> dict[str, Any]:
    agents = sorted(clean["digests"])
    differ = [
        a
        for a in agents
        if faulty["digests"].get(a, {}).get("digest") != clean["digests"][a]["digest"]
    ]
    full_equal = sum(1 for a in agents if faulty["full_digests"].get(a) == clean["full_digests"][a])
    answers_differ = [
        a for a in agents if faulty["recall_answers"][a] != clean["recall_answers"][a]
    ]
    return {
        "equal": not differ,
        "differ": differ,
        "full_equal": full_equal,
        "same_inputs": faulty["inputs_digest"] == clean["inputs_digest"],
        "recall_answers_equal": not answers_differ,
        "recall_answers_differ": answers_differ,
    }


async def _bench(env: _Env, *, fuzz_count: int, plan: FaultPlan) -> dict[str, Any]:
    faulty = await _Run(env, faulty=True, fuzz_count=fuzz_count, plan=plan).run()
    logger.info("faulty run done in %.0fs; the clean run", faulty["seconds"])
    clean = await _Run(env, faulty=False).run()
    comparison = _compare(faulty, clean)
    differences: dict[str, Any] = {}
    if comparison["differ"]:
        redis = Redis.from_url(env.base.redis.url)
        try:
            for agent in comparison["differ"][:5]:
                one = await _family_digests(redis, faulty["prefix"], agent)
                two = await _family_digests(redis, clean["prefix"], agent)
                families = sorted(n for n in set(one) | set(two) if one.get(n) != two.get(n))
                ours, theirs = faulty["digests"][agent], clean["digests"][agent]
                witness = ours["witness"] != theirs["witness"]
                if ours["usage_applied"] != theirs["usage_applied"]:
                    families.append("usage_applied")
                differences[agent] = {
                    "families": families + (["witness"] if witness else []),
                    "witness_records": [ours["records"], theirs["records"]],
                    "usage_applied": [ours["usage_applied"], theirs["usage_applied"]],
                }
                if witness:
                    differences[agent]["first_witness_difference"] = await _first_difference(
                        redis, faulty["prefix"], clean["prefix"], agent
                    )
        finally:
            await redis.aclose()
    return {"faulty": faulty, "clean": clean, "comparison": comparison, "differences": differences}


def _count(fired: Iterable[Mapping[str, Any]], action: str, role: str | None = None) -> int:
    return sum(1 for f in fired if f["action"] == action and role in (None, f.get("role")))


def run_faults_bench(
    settings: Settings,
    *,
    events: int = 20_000,
    agents: int = 20,
    kills: int = 3,
    redis_crashes: int = 1,
    broker_restarts: int = 1,
    redis_restarts: int = 0,
    checkpoints: int = 3,
    fuzz: int = 10_000,
    seed: int = 21,
    without: Sequence[str] = (),
    knn_hybrid_policy: str = EXACT_KNN,
) -> dict[str, Any]:
    """`without`: fuzz kinds left out (to tell one fault from another); the report
    names them. `redis_crashes` are SIGKILLs, `redis_restarts` clean stops (the
    append-only file flushed); `broker_restarts` SIGKILL tansu and start it again
    on the same object store. `knn_hybrid_policy`: the vector lanes' in both runs
    (`EXACT_KNN` by default: see there)."""
    began = time.perf_counter()
    root = Path(__file__).resolve().parents[1]
    state_dir = state_root().resolve() / "bench-faults"
    ports = bench_ports(19592, 16880, name="faults")
    # The durable profile: the broker's log on an object store that outlives a
    # broker crash, Redis with its append-only file (fsync every second).
    services = LocalServices(
        state_dir,
        ports,
        wheel_cache=state_dir.parent / "wheels",
        ready_timeout=120.0,
        durable=True,
    )
    # A fresh broker and Redis: their storage would otherwise bring back earlier runs.
    services.down()
    shutil.rmtree(state_dir / f"redis-{ports.redis}", ignore_errors=True)
    shutil.rmtree(services.object_store_dir, ignore_errors=True)
    for prefix_dir in state_dir.glob("f[ab]*"):
        shutil.rmtree(prefix_dir, ignore_errors=True)
    services.up()
    base = on_services(settings, services)
    valid = valid_events(events=events, agents=agents, seed=seed)
    expected_valid = expected_candidates(valid, base)
    env = _Env(
        base=base,
        services=services,
        root=root,
        state_dir=state_dir,
        valid=valid,
        expected_valid=expected_valid,
        agents=sorted({e.agent_id for e in valid}),
        total_candidates=sum(len(c) for c in expected_valid.values()),
        seed=seed,
        fuzz_kinds=tuple(kind for kind in FUZZ_KINDS if kind not in set(without)),
        checkpoints=checkpoints,
        knn_hybrid_policy=knn_hybrid_policy,
    )
    chunks = -(-events // _CHUNK_EVENTS)
    plan = fault_plan(
        kills=kills,
        redis_crashes=redis_crashes,
        broker_restarts=broker_restarts,
        redis_restarts=redis_restarts,
        workers=len(SLOT_ROLES),
        checkpoints=len(checkpoint_chunks(chunks, checkpoints)),
        seed=seed,
    )
    logger.info(
        "bench faults: %d events (%d candidates), %d agents, %d fuzz, faults %s",
        events,
        env.total_candidates,
        agents,
        fuzz,
        [(f.action, f.worker, f.at, f.checkpoint) for f in plan.faults],
    )

    def interrupted(signum: int, _: Any) -> None:
        raise SystemExit(128 + signum)  # unwinds: workers and services are stopped

    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        result = asyncio.run(_bench(env, fuzz_count=fuzz, plan=plan))
    finally:
        signal.signal(signal.SIGTERM, previous)
        services.down()
    faulty, clean = result["faulty"], result["clean"]
    comparison = result["comparison"]
    valid_account: ValidAccount = faulty["valid"]
    fuzz_account: FuzzAccount = faulty["fuzz"]
    fired = faulty["faults"]
    sent = Counter({kind: 0 for kind in INPUT_KINDS})
    for event in valid:
        sent[event.topic_kind] += 1
    for label, count in faulty["inputs"].items():
        sent[label.split(".", 1)[0]] += count
    unapplied = len(faulty["unapplied"])
    usage = faulty["usage"]
    return {
        "events": events,
        "agents": agents,
        "candidates": env.total_candidates,
        "kinds": [kind for kind in INPUT_KINDS if sent[kind] > 0],
        "inputs": {
            **{kind: sent[kind] for kind in INGEST_KINDS},
            **faulty["inputs"],
            "usage_entries_applied": usage["usage_records"],
        },
        "kills": _count(fired, "kill"),
        "worker_kills": _count(fired, "kill"),
        "worker_kills_by_role": {role: _count(fired, "kill", role) for role in SLOT_ROLES},
        "redis_crashes": _count(fired, "redis_crash"),
        "redis_restarts": _count(fired, "redis_crash") + _count(fired, "redis_restart"),
        "broker_restarts": _count(fired, "broker_restart"),
        "lost": valid_account.lost + unapplied + usage["missing"],
        "duplicated": valid_account.duplicated + usage["duplicated"],
        "lost_by": {
            "valid_events": valid_account.lost,
            "checkpoint_inputs_never_applied": unapplied,
            "usage_entries_missing": usage["missing"],
        },
        "duplicated_by": {
            "valid_events": valid_account.duplicated,
            "usage_entries": usage["duplicated"],
        },
        "digest_equal_to_clean_run": comparison["equal"],
        "same_inputs_as_clean_run": comparison["same_inputs"],
        "recall_answers_equal_to_clean_run": comparison["recall_answers_equal"],
        "order": "per agent: valid events on one topic; the other inputs at checkpoints, "
        "each applied before the next is sent",
        "decision_check": "candidate in the agent's decided hash; a checkpoint input by its "
        "source partition's applied mark; a recall's usage by its witness record",
        "digest": "agent_digest without the witness and usage-applied families, + witness "
        "records by (seq, op, ids, fields_digest) + the count of usage entries applied",
        "knn": "exact (RediSearch's own hybrid policy)"
        if knn_hybrid_policy == EXACT_KNN
        else knn_hybrid_policy,
        "full_agent_digest_equal": f"{comparison['full_equal']}/{len(env.agents)}",
        "digest_differences": result["differences"],
        "recall_answers_differ": comparison["recall_answers_differ"],
        # Witness records by op, faulty minus clean, where they differ: an input
        # applied but never witnessed shows here (its state equal, its record gone).
        "witness_ops_faulty_minus_clean": {
            op: faulty["witness_ops"].get(op, 0) - clean["witness_ops"].get(op, 0)
            for op in sorted(set(faulty["witness_ops"]) | set(clean["witness_ops"]))
            if faulty["witness_ops"].get(op, 0) != clean["witness_ops"].get(op, 0)
        },
        "fuzz": {
            "sent": fuzz_account.sent,
            "found_on_topics": fuzz_account.found,
            "dead_lettered": fuzz_account.dead_lettered,
            "decided": fuzz_account.decided,
            "unaccounted": fuzz_account.unaccounted,
            "unexpected": fuzz_account.unexpected,
            "worker_crashes": len(faulty["crashes"]) + len(clean["crashes"]),
            "by_reason": fuzz_account.by_reason,
            "unaccounted_kinds": fuzz_account.unaccounted_kinds,
            "predicted_internal_errors": faulty["fuzz_predicted_internal_errors"],
            "kinds": len(env.fuzz_kinds),
            "kinds_left_out": sorted(set(FUZZ_KINDS) - set(env.fuzz_kinds)),
        },
        "audit": {
            "verified": faulty["audit"]["verified"],
            "tamper_detected": faulty["audit"]["tamper_detected"],
            **{
                k: v for k, v in faulty["audit"].items() if k not in ("verified", "tamper_detected")
            },
        },
        "faulty_run": {
            "seconds": faulty["seconds"],
            "publish_to_decided_s": faulty["publish_to_decided_s"],
            "faults": fired,
            "stalled": faulty["stalled"],
            "quiet": faulty["quiet"],
            "checkpoints": faulty["checkpoints"],
            "unapplied": faulty["unapplied"][:10],
            "usage": usage,
            "witness_ops": faulty["witness_ops"],
            "valid_found_on_topics": faulty["valid_found_on_topics"],
            "valid_dead_lettered": faulty["valid_dead_lettered"],
            "decision_events": faulty["decision_events"],
            "events_redelivered": faulty["events_redelivered"],
            "decision_events_missing": valid_account.decision_events_missing,
            "lost_examples": list(valid_account.lost_examples),
            "duplicated_examples": list(valid_account.duplicated_examples),
            "dead_letters": faulty["dead_letter_reasons"],
            "poison_dead_letters": faulty["poison_dead_letters"],
            "crashes": faulty["crashes"],
        },
        "clean_run": {
            "seconds": clean["seconds"],
            "lost": clean["valid"].lost + len(clean["unapplied"]),
            "quiet": clean["quiet"],
            "crashes": clean["crashes"],
            "checkpoints": clean["checkpoints"],
            "unapplied": clean["unapplied"][:10],
            "usage": clean["usage"],
            "witness_ops": clean["witness_ops"],
        },
        "seed": seed,
        "elapsed_s": round(time.perf_counter() - began, 1),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
    }
