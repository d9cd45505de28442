"""Dead letters (agents/dead_letters.py) from each handler: a payload the ingest,
recall or outcome handler cannot take is dead-lettered with its reason, field, agent key
and source position, and the handler goes on (a bad recall request still gets an error
reply when its reply topic is valid).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from grimoire.agents.dead_letters import CountedDeadLetters, dead_letter
from grimoire.agents.ports import InputMessage, MemorySink
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.model.records import EventType
from tests.support.handlers import (
    REPLY_TO,
    TOPICS,
    TS,
    Rig,
    episode,
    messages,
    recall_request,
    seeded,
)

# --- ingest ---------------------------------------------------------------------------


async def test_dead_letter_keeps_a_valid_agent_id_and_field() -> None:
    rig = Rig()
    raw = episode("agent-1", "x", TS, tick=-1)
    await rig.ingest.handle(EventType.EPISODE, messages(raw, first_offset=41))
    (dead,) = rig.on(TOPICS.dead_letters)
    assert (dead["reason"], dead["field"], dead["agent_id"]) == ("invalid_value", "tick", "agent-1")
    assert dead["offset"] == 41
    assert [key for topic, key, _ in rig.sink.sent] == ["agent-1"]


async def test_a_payload_that_breaks_the_normalizer_is_dead_lettered_not_fatal() -> None:
    rig = Rig()
    crashing = orjson.dumps(
        {"agent_id": "coder", "ts": TS, "line": {"role": ["user"], "content": "hi"}}
    )
    fine = orjson.dumps({"agent_id": "coder", "ts": TS, "line": {"role": "user", "content": "hi"}})
    report = await rig.ingest.handle(
        EventType.TRANSCRIPT, messages(crashing, fine, topic=TOPICS.transcripts)
    )
    assert (report.candidates, report.dead_lettered) == (1, 1)
    (dead,) = rig.on(TOPICS.dead_letters)
    assert dead["source_topic"] == TOPICS.transcripts
    assert dead["offset"] == 0
    assert [e["layer"] for e in rig.events()] == ["input"]


# --- recall ---------------------------------------------------------------------------


async def test_bad_k_dead_letters_and_replies_with_an_error() -> None:
    rig = await seeded()
    await rig.recall.handle(recall_request(k=0, correlation_id="corr-9"))

    (dead,) = rig.on(TOPICS.dead_letters)
    assert (dead["reason"], dead["field"]) == ("invalid_value", "k")
    assert dead["source_topic"] == TOPICS.recall_requests
    assert (dead["partition"], dead["offset"]) == (0, 7)
    assert dead["agent_id"] == "agent-1"

    (reply,) = rig.on(REPLY_TO)
    assert reply["correlation_id"] == "corr-9"
    assert reply["agent_id"] == "agent-1"
    assert reply["items"] == []
    assert reply["error"].startswith("invalid_value")
    assert len(rig.sink.sent) == 2
    assert rig.fake.calls == 1  # only the seeding batch; no embedding for a bad request


async def test_bad_reply_to_is_only_dead_lettered() -> None:
    rig = await seeded()
    await rig.recall.handle(recall_request(reply_to="bad topic!"))
    assert [topic for topic, _, _ in rig.sink.sent] == [TOPICS.dead_letters]
    (dead,) = rig.on(TOPICS.dead_letters)
    assert (dead["reason"], dead["field"]) == ("invalid_value", "reply_to")


async def test_unparseable_request_is_only_dead_lettered() -> None:
    rig = await seeded()
    await rig.recall.handle(InputMessage(b"{nope", TOPICS.recall_requests, 0, 3))
    assert [topic for topic, _, _ in rig.sink.sent] == [TOPICS.dead_letters]
    (dead,) = rig.on(TOPICS.dead_letters)
    assert dead["reason"] == "invalid_json"


# --- outcomes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"agent_id": "agent-1", "ts": TS, "outcome": "great"}, "outcome"),
        ({"agent_id": "agent-1", "ts": TS}, "outcome"),
        (
            {"agent_id": "agent-1", "ts": TS, "outcome": "positive", "memory_ids": "m1"},
            "memory_ids",
        ),
        ({"ts": TS, "outcome": "positive"}, "agent_id"),
    ],
)
async def test_bad_outcomes_are_dead_lettered(payload: dict[str, Any], field: str) -> None:
    rig = Rig()
    message = InputMessage(orjson.dumps(payload), TOPICS.outcomes, partition=0, offset=4)
    assert await rig.outcomes.handle(message) == 0
    (dead,) = rig.on(TOPICS.dead_letters)
    assert dead["field"] == field


async def test_dead_letters_are_counted_by_reason_and_counting_never_blocks_them() -> None:
    class Tally:
        def __init__(self, fail: bool = False) -> None:
            self.reasons: list[str] = []
            self.fail = fail

        async def count(self, reason: str) -> None:
            if self.fail:
                raise ConnectionError("redis gone")
            self.reasons.append(reason)

    inner = MemorySink()
    tally = Tally()
    sink = CountedDeadLetters(inner, TOPICS.dead_letters, tally)
    bad = InputMessage(b"{", TOPICS.episodes, 0, 3)
    await dead_letter(sink, TOPICS.dead_letters, bad, Rejection("invalid_json", "x", None, None))
    await sink.send(TOPICS.memory_events, "a", b"{}")
    assert tally.reasons == ["invalid_json"] and len(inner.sent) == 2
    failing = CountedDeadLetters(inner, TOPICS.dead_letters, Tally(fail=True))
    await dead_letter(failing, TOPICS.dead_letters, bad, Rejection("oversize", "x", None, None))
    assert len(inner.on(TOPICS.dead_letters)) == 2
