"""`grimoire bench faults`: the journal under worker crashes, a Redis restart and hostile input.

Two runs of the same valid events, on one tansu broker and one Redis (append-only
file on), each under a prefix of its own:

1. the faulty run: two workers; while the events flow (published in chunks, a few
   thousand ahead of what is decided, or on after 20 s without a decision), a worker
   is SIGKILLed (and started again) at seeded points of the publishing, and Redis is
   stopped and started again once (faults at least 20 s apart); over ten thousand
   hostile messages go in beside the valid events;
2. the clean run: one worker, no faults, no fuzz, the same valid events.

Each agent's valid events go to one topic (its kind fixed by the agent's index), in
one order, so both journals hold each agent's inputs in the same order and the two
folds must agree (`"order": "per agent, one topic"`).

What is counted:

- `lost`: valid source events with a candidate not in its agent's `decided` hash.
  The hash is the authoritative check: it is written in the same transaction as
  the decision, and it is what makes a redelivery a no-op. Memory-events are
  stored in that transaction too (the outbox) and published after it: a decision
  with no event on memory-events is counted apart (`decision_events_missing`), and
  should be 0; an event published twice, byte for byte (a worker killed after the
  broker had it and before the outbox was trimmed), is a redelivery
  (`events_redelivered`), not a second decision.
- `duplicated`: valid source events with more than one decision event
  (GrimoireWrite/Quarantine/Reject/Merge/Aggregate) for one of their candidates,
  or more memory records (aggregates aside) than candidates.
- fuzz: each hostile message is found on its topic again (its bytes are unique)
  and matched, by (topic, partition, offset), to a dead letter, directly or
  through the journal entry a poison dead letter names; a valid-looking one is
  accounted for by its candidates in its agent's `decided` hash.
- `digest_equal_to_clean_run`: every agent's state digest equal between the runs.
  The witness log's records name journal positions (partition, offset), which
  differ between two journals whatever the fold did (other agents' and hostile
  entries interleave, a crashed sequencer re-journals), so the witness family is
  compared by each record's (seq, op, ids, fields digest), everything else as
  `agent_digest` digests it. Full `agent_digest` equality is reported beside it.
- audit: every agent's chain of the faulty run verifies; one stored witness record
  is then rewritten and the audit must find the break (the record is restored).
"""

from __future__ import annotations

import asyncio
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from redis.asyncio import Redis

from grimoire.agents.journal.sequencer import agent_of
from grimoire.infra.bench.event_stream import HEARTBEATS, TOOL_CALLS
from grimoire.infra.local.services import LocalServices, ServicePorts
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
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.trust.agent_keys import agent_footprint
from grimoire.tables.trust.digest import agent_digest, footprint_digest
from grimoire.tables.trust.witness_store import RedisWitnessLog, audit
from grimoire.topics.client import GrimoireClient, RecallTimeout
from grimoire.topics.declarations import TopicNames
from grimoire.topics.offsets import true_end_offsets
from grimoire.topics.schemas import EpisodeV1, ToolEventV1, TranscriptV1

__all__ = [
    "DECISION_EVENTS",
    "FUZZ_KINDS",
    "Expected",
    "FaultPlan",
    "FuzzAccount",
    "FuzzMessage",
    "ValidAccount",
    "ValidEvent",
    "account_fuzz",
    "account_valid",
    "comparable_digest",
    "decided_sets",
    "decided_total",
    "decision_event_counts",
    "expected_candidates",
    "expected_outcome",
    "fault_plan",
    "fuzz_messages",
    "read_topics",
    "records_per_event",
    "run_faults_bench",
    "valid_events",
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


# The heartbeats and tool calls are the ingest bench's (`event_stream`); its chat
# lines, as plain text blocks only:
_CHAT = (
    ("user", "How is the {a} position doing after block {b}?"),
    ("assistant", "Depth changed by {a}% so impermanent loss risk moved."),
    ("assistant", "The position is fine: health factor {a}.{b}."),
)
_VOCABULARY = (
    "liquidity oracle reorg validator mempool bridge vault collateral spread funding "
    "basis hedge rebalance keeper sequencer rollup calldata blob epoch slashing staking "
    "governance proposal quorum delegate treasury grant audit exploit patch upgrade proxy "
    "router pool tick range fee tier volatility drawdown momentum mean reversion carry"
)
_WORDS = tuple(_VOCABULARY.split(" "))
_EPISODE_TYPES = ("observation", "observation", "action", "alert", "report")


def _agent_name(index: int) -> str:
    return f"fault-agent-{index:03d}"


def agent_kind(index: int) -> str:
    """The one topic an agent's valid events go to."""
    return INGEST_KINDS[index % len(INGEST_KINDS)]


def _text(rng: random.Random, template: str, serial: int) -> str:
    text = template.format(a=rng.randint(1, 4), b=rng.randint(1, 3))
    if rng.random() < 0.4:  # the rest repeat: merges, reinforcements, aggregates
        words = " ".join(rng.choice(_WORDS) for _ in range(6))
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
        out.append(ValidEvent(kind, agent, event_id, value))
    return out


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
        text = f"fuzz {serial}: " + " ".join(rng.choice(_WORDS) for _ in range(5))
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
    kind = c.ingest_kind()
    data = c.base(kind)
    data["tags"] = ["@@BAD@@"]
    bad = c.rng.choice(
        [b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"]
    )
    return kind, _dumps(data).replace(b"@@BAD@@", bad)


def _fz_lone_surrogate(c: _Ctx) -> tuple[str, bytes]:
    kind = c.ingest_kind()
    data = c.base(kind)
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
    kind = c.ingest_kind()
    data = c.base(kind)
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
    kind = c.ingest_kind()
    data = c.base(kind)
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
    kind = c.ingest_kind()
    data = c.base(kind)
    text = _huge(c, 16_001)
    if kind == "transcripts":
        data["line"] = {"role": "assistant", "content": text}
    else:
        data[_text_field(kind)] = text
    return kind, _dumps(data)


def _fz_huge_field(c: _Ctx) -> tuple[str, bytes]:
    kind = c.ingest_kind()
    data = c.base(kind)
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
    kind = c.ingest_kind()
    data = c.base(kind)
    data["agent_id"] = _huge(c, 129)
    return kind, _dumps(data)


_WRONG_VALUES: Final = ([1, 2], {"a": 1}, True, 42, 4.5, "text")


def _fz_wrong_types(c: _Ctx) -> tuple[str, bytes]:
    kind = c.ingest_kind()
    data = c.base(kind)
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
    kind = c.ingest_kind()
    data = c.base(kind)
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
    kind = c.ingest_kind()
    data = c.base(kind)
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
    kind = c.ingest_kind()
    data = c.base(kind)
    data["agent_id"] = _FORBIDDEN_IDS[c.nth % len(_FORBIDDEN_IDS)].format(n=c.serial)
    return kind, _dumps(data)


def _fz_missing_fields(c: _Ctx) -> tuple[str, bytes]:
    kind = c.ingest_kind()
    data = c.base(kind)
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
    kind = c.ingest_kind()
    data = c.base(kind)
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


@dataclass(frozen=True, slots=True)
class Fault:
    at: float  # fraction of the valid events published
    action: str  # "kill" | "redis_restart"
    worker: int = 0  # which worker slot (kill)
    delay_s: float = 0.0  # after the threshold, so faults land anywhere in a batch
    downtime_s: float = 0.0  # Redis stopped this long


@dataclass(frozen=True, slots=True)
class FaultPlan:
    faults: tuple[Fault, ...]


def fault_plan(*, kills: int, redis_restarts: int, workers: int, seed: int) -> FaultPlan:
    """Each fault in its own stretch of [0.1, 0.85] of the events published, at a
    seeded point within it, so faults never pile up and each happens while events flow."""
    rng = random.Random(seed ^ 0xFA17)
    actions = ["kill"] * kills + ["redis_restart"] * redis_restarts
    rng.shuffle(actions)
    span = (0.85 - 0.1) / max(1, len(actions))
    faults = []
    for slot, action in enumerate(actions):
        at = 0.1 + span * slot + rng.uniform(0.15, 0.85) * span
        faults.append(
            Fault(
                at=round(at, 4),
                action=action,
                worker=rng.randrange(workers),
                delay_s=round(rng.uniform(0.0, 2.0), 2),
                downtime_s=round(rng.uniform(1.0, 4.0), 2) if action == "redis_restart" else 0.0,
            )
        )
    return FaultPlan(tuple(faults))


# ---- the workers -------------------------------------------------------------------


class _Workers:
    """One run's worker processes: started, SIGKILLed and started again; a worker
    that exits without being killed (or stopped) here has crashed."""

    def __init__(self, settings: Settings, root: Path, root_dir: Path) -> None:
        self.settings = settings
        self.root = root  # the repository (the worker's cwd)
        self.dir = root_dir
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
        settings = self.settings.model_copy(update={"data_dir": data_dir})
        log = self.dir / "log" / f"worker-{slot}-{self._incarnation}.log"
        process = start_worker(settings, log, cwd=self.root)
        self.slots[slot] = process
        self.started_at[slot] = time.monotonic()
        self.logs[process.pid] = log
        logger.info("worker %d started (pid %d, log %s)", slot, process.pid, log)

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


async def comparable_digest(redis: Redis, prefix: str, agent: str) -> dict[str, str]:
    """The agent's state digest with its witness log compared by content: `state`
    (every family but the witness log, as `agent_digest` digests it), `witness`
    (each record's seq, op, ids and fields digest), and `digest` over both."""
    footprint = await agent_footprint(redis, prefix, agent)
    families = {name: keys for name, keys in footprint.families.items() if name != "witness"}
    state = await footprint_digest(redis, replace(footprint, families=families))
    records = await RedisWitnessLog(redis, prefix).records(agent)
    chain = [[r.seq, r.op, list(r.ids), r.fields_digest] for r in records]
    witness = hashlib.sha256(canonical_bytes(chain)).hexdigest()
    digest = hashlib.sha256(f"{state.sha256}\n{witness}".encode()).hexdigest()
    return {
        "digest": digest,
        "state": state.sha256,
        "witness": witness,
        "records": str(len(records)),
    }


async def _family_digests(redis: Redis, prefix: str, agent: str) -> dict[str, str]:
    """One digest per family (and per member family): where two states differ."""
    footprint = await agent_footprint(redis, prefix, agent)
    out: dict[str, str] = {}
    for name, keys in footprint.families.items():
        if name == "witness":
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


def _run_settings(env: _Env, prefix: str) -> Settings:
    return env.base.model_copy(
        update={
            "topic_prefix": prefix,
            "app_id": f"grimoire-{prefix}",
            "maintenance_enabled": False,
            "block_interval_s": 3_600.0,
        }
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


async def _faulty_run(env: _Env, fuzz_count: int, plan: FaultPlan) -> dict[str, Any]:
    prefix = f"fa{uuid.uuid4().hex[:6]}"
    settings = _run_settings(env, prefix)
    topics = TopicNames(prefix)
    workers = _Workers(settings, env.root, env.state_dir / prefix)
    started = time.perf_counter()
    for slot in range(2):
        workers.start(slot)
    redis = Redis.from_url(settings.redis_url)
    fired: list[dict[str, Any]] = []
    stalled = False
    try:
        async with GrimoireClient(
            settings.bootstrap_servers, prefix, partitions=settings.partitions, client_id=CLIENT_ID
        ) as client:
            await _until_ready(client, workers)
            fuzz = fuzz_messages(
                topics,
                count=fuzz_count,
                seed=env.seed,
                reply_to=client.reply_topic,
                kinds=env.fuzz_kinds,
            )
            expected_fuzz = [
                expected_outcome(topics, m.topic_kind, m.value, settings) for m in fuzz
            ]
            fuzz_agents = sorted(
                {agent for e in expected_fuzz for agent, _ in e.candidates} | {m.key for m in fuzz}
            )
            chunks = _chunks(env, fuzz, topics)
            pending = list(plan.faults)
            backlog = max(2_000, env.total_candidates // 10)
            progress = {"decided": 0, "changed": time.monotonic(), "fault": 0.0, "published": 0.0}

            async def poll() -> int:
                workers.check()
                decided = await decided_total(redis, prefix, env.agents)
                if decided is not None and decided != progress["decided"]:
                    progress["decided"], progress["changed"] = decided, time.monotonic()
                while (
                    pending
                    and progress["published"] >= pending[0].at
                    and time.monotonic() - progress["fault"] >= _FAULT_GAP_S
                ):
                    fault = pending.pop(0)
                    await asyncio.sleep(fault.delay_s)
                    record = {
                        "action": fault.action,
                        "at_published": round(progress["published"], 3),
                        "at_decided": progress["decided"],
                    }
                    if fault.action == "kill":
                        workers.kill(fault.worker)
                        record["worker"] = fault.worker
                    else:
                        logger.info("restarting Redis (down %.1fs)", fault.downtime_s)
                        t0 = time.perf_counter()
                        await asyncio.to_thread(env.services.restart_redis, fault.downtime_s)
                        record["outage_s"] = round(time.perf_counter() - t0, 2)
                        logger.info("Redis is back after %.1fs", record["outage_s"])
                    fired.append(record)
                    progress["changed"] = progress["fault"] = time.monotonic()
                return int(progress["decided"])

            published_candidates = 0
            for index, (records, cumulative) in enumerate(chunks):
                # A few thousand candidates ahead of the decisions, so faults land
                # while events flow; when decisions stop (lost events never come),
                # publishing goes on after a while rather than waiting for them.
                while (
                    published_candidates - await poll() > backlog
                    and time.monotonic() - progress["changed"] < _PACE_WAIT_S
                ):
                    await asyncio.sleep(0.5)
                for topic, key, value in records:
                    await client.publish_raw(topic, key, value, wait=False)
                await client.flush()
                published_candidates = cumulative
                progress["published"] = (index + 1) / len(chunks)
                if index % 5 == 0:
                    logger.info(
                        "faulty run: published %d/%d chunks, %d/%d candidates decided",
                        index + 1,
                        len(chunks),
                        progress["decided"],
                        env.total_candidates,
                    )
            while not stalled and (await poll() < env.total_candidates or pending):
                if time.monotonic() - progress["changed"] > _STALL_S:
                    stalled = True
                await asyncio.sleep(0.5)
            publish_s = time.perf_counter() - started
            logger.info("faulty run: %d candidates decided, waiting for quiet", progress["decided"])
            quiet = await _wait_quiet(
                redis, prefix, env.agents + fuzz_agents, env.total_candidates, 120.0
            )
        workers.check()
        crashes = list(workers.crashes)
        workers.stop_all()

        # -- accounting --------------------------------------------------------------
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
        topic_records = await read_topics(settings.bootstrap_servers, read)
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
            journal = await read_topics(settings.bootstrap_servers, [topics.journal])
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
        fuzz_account = account_fuzz(fuzz, expected_fuzz, where, letters, decided)
        digests = {a: await comparable_digest(redis, prefix, a) for a in env.agents}
        full_digests = {a: (await agent_digest(redis, prefix, a)).sha256 for a in env.agents}
        audit_report = await _audit(redis, prefix, env.agents, env.seed)
        return {
            "prefix": prefix,
            "seconds": round(time.perf_counter() - started, 1),
            "publish_to_decided_s": round(publish_s, 1),
            "quiet": quiet,
            "stalled": stalled,
            "faults": fired,
            "crashes": crashes,
            "valid": valid_account,
            "valid_found_on_topics": valid_found,
            "valid_dead_lettered": valid_letters,
            "fuzz": fuzz_account,
            "fuzz_predicted_internal_errors": sum(1 for e in expected_fuzz if e.raised),
            "dead_letter_reasons": dict(sorted(reasons.items())),
            "poison_dead_letters": len(journal_letters),
            "decision_events": sum(decision_events.values()),
            "events_redelivered": redelivered,
            "digests": digests,
            "full_digests": full_digests,
            "audit": audit_report,
        }
    finally:
        for process in workers.slots.values():
            if process.poll() is None:
                stop_worker(process)
        await redis.aclose()


async def _clean_run(env: _Env) -> dict[str, Any]:
    prefix = f"fb{uuid.uuid4().hex[:6]}"
    settings = _run_settings(env, prefix)
    topics = TopicNames(prefix)
    workers = _Workers(settings, env.root, env.state_dir / prefix)
    started = time.perf_counter()
    workers.start(0)
    redis = Redis.from_url(settings.redis_url)
    try:
        async with GrimoireClient(
            settings.bootstrap_servers, prefix, partitions=settings.partitions, client_id=CLIENT_ID
        ) as client:
            await _until_ready(client, workers)
            for event in env.valid:
                await client.publish_raw(
                    _topic(topics, event.topic_kind), event.agent_id, event.value, wait=False
                )
            await client.flush()
            last, changed = -1, time.monotonic()
            while True:
                workers.check()
                decided = await decided_total(redis, prefix, env.agents) or 0
                if decided >= env.total_candidates:
                    break
                if decided != last:
                    last, changed = decided, time.monotonic()
                elif time.monotonic() - changed > _STALL_S:
                    break
                await asyncio.sleep(1.0)
            quiet = await _wait_quiet(redis, prefix, env.agents, env.total_candidates, 120.0)
        crashes = list(workers.crashes)
        workers.stop_all()
        decided = await decided_sets(redis, prefix, env.agents)
        account = account_valid(env.expected_valid, decided, {}, {})
        digests = {a: await comparable_digest(redis, prefix, a) for a in env.agents}
        full_digests = {a: (await agent_digest(redis, prefix, a)).sha256 for a in env.agents}
        return {
            "prefix": prefix,
            "seconds": round(time.perf_counter() - started, 1),
            "quiet": quiet,
            "crashes": crashes,
            "lost": account.lost,
            "digests": digests,
            "full_digests": full_digests,
        }
    finally:
        for process in workers.slots.values():
            if process.poll() is None:
                stop_worker(process)
        await redis.aclose()


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


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def _compare(faulty: Mapping[str, Any], clean: Mapping[str, Any]) -> dict[str, Any]:
    agents = sorted(clean["digests"])
    differ = [
        a
        for a in agents
        if faulty["digests"].get(a, {}).get("digest") != clean["digests"][a]["digest"]
    ]
    full_equal = sum(1 for a in agents if faulty["full_digests"].get(a) == clean["full_digests"][a])
    return {"equal": not differ, "differ": differ, "full_equal": full_equal}


async def _bench(env: _Env, *, fuzz_count: int, plan: FaultPlan) -> dict[str, Any]:
    faulty = await _faulty_run(env, fuzz_count, plan)
    logger.info("faulty run done in %.0fs; the clean run", faulty["seconds"])
    clean = await _clean_run(env)
    comparison = _compare(faulty, clean)
    differences: dict[str, Any] = {}
    if comparison["differ"]:
        redis = Redis.from_url(env.base.redis_url)
        try:
            for agent in comparison["differ"][:5]:
                one = await _family_digests(redis, faulty["prefix"], agent)
                two = await _family_digests(redis, clean["prefix"], agent)
                families = sorted(n for n in set(one) | set(two) if one.get(n) != two.get(n))
                witness = faulty["digests"][agent]["witness"] != clean["digests"][agent]["witness"]
                differences[agent] = {
                    "families": families + (["witness"] if witness else []),
                    "witness_records": [
                        faulty["digests"][agent]["records"],
                        clean["digests"][agent]["records"],
                    ],
                }
                if witness:
                    differences[agent]["first_witness_difference"] = await _first_difference(
                        redis, faulty["prefix"], clean["prefix"], agent
                    )
        finally:
            await redis.aclose()
    return {"faulty": faulty, "clean": clean, "comparison": comparison, "differences": differences}


def run_faults_bench(
    settings: Settings,
    *,
    events: int = 20_000,
    agents: int = 20,
    kills: int = 3,
    redis_restarts: int = 1,
    fuzz: int = 10_000,
    seed: int = 21,
    without: Sequence[str] = (),
) -> dict[str, Any]:
    """`without`: fuzz kinds left out (to tell one fault from another); the report
    names them."""
    began = time.perf_counter()
    root = Path(__file__).resolve().parents[2]
    state_dir = Path(os.environ.get("GRIMOIRE_STATE_DIR", ".grimoire")).resolve() / "bench-faults"
    ports = ServicePorts(
        kafka=int(os.environ.get("GRIMOIRE_BENCH_FAULTS_KAFKA_PORT", "19592")),
        redis=int(os.environ.get("GRIMOIRE_BENCH_FAULTS_REDIS_PORT", "16880")),
    )
    services = LocalServices(
        state_dir,
        ports,
        wheel_cache=state_dir.parent / "wheels",
        ready_timeout=120.0,
        redis_appendonly=True,
    )
    # A fresh Redis: its append-only file would otherwise bring back earlier runs.
    services.down()
    shutil.rmtree(state_dir / f"redis-{ports.redis}", ignore_errors=True)
    for prefix_dir in state_dir.glob("f[ab]*"):
        shutil.rmtree(prefix_dir, ignore_errors=True)
    services.up()
    base = settings.model_copy(
        update={
            "broker_url": f"kafka://{services.kafka_bootstrap}",
            "redis_url": services.redis_url,
        }
    )
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
    )
    plan = fault_plan(kills=kills, redis_restarts=redis_restarts, workers=2, seed=seed)
    logger.info(
        "bench faults: %d events (%d candidates), %d agents, %d fuzz, faults %s",
        events,
        env.total_candidates,
        agents,
        fuzz,
        [(f.action, f.at) for f in plan.faults],
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
    valid_account: ValidAccount = faulty["valid"]
    fuzz_account: FuzzAccount = faulty["fuzz"]
    fired = faulty["faults"]
    return {
        "events": events,
        "agents": agents,
        "candidates": env.total_candidates,
        "kills": sum(1 for f in fired if f["action"] == "kill"),
        "redis_restarts": sum(1 for f in fired if f["action"] == "redis_restart"),
        "lost": valid_account.lost,
        "duplicated": valid_account.duplicated,
        "digest_equal_to_clean_run": result["comparison"]["equal"],
        "order": "per agent, one topic",
        "decision_check": "candidate in the agent's decided hash",
        "digest": "agent_digest without the witness family, + witness records by "
        "(seq, op, ids, fields_digest)",
        "full_agent_digest_equal": f"{result['comparison']['full_equal']}/{len(env.agents)}",
        "digest_differences": result["differences"],
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
            "lost": clean["lost"],
            "quiet": clean["quiet"],
            "crashes": clean["crashes"],
        },
        "seed": seed,
        "elapsed_s": round(time.perf_counter() - began, 1),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
    }
