"""RecallHandler (agents/handlers/recall.py) on the seeded in-memory rig of
tests/support/handlers.py: one reply per request with only the asking agent's memories,
one copy of a repeated text, k, repeatable answers, usage recorded before the reply,
and anti-rumination. Bad requests are in tests/unit/agents/test_dead_letters.py.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import numpy as np
import orjson
import pytest

from grimoire.agents.ports import InputMessage, MemorySink
from grimoire.streams.model.eidolon import state_key, state_vector
from grimoire.streams.model.records import EventType
from grimoire.streams.write.plan import aggregate_id
from tests.support.handlers import (
    CPU,
    DISK,
    REPLY_TO,
    TS,
    Rig,
    episode,
    messages,
    mid,
    recall_request,
    seeded,
)


async def test_recall_replies_once_with_only_the_agents_memories() -> None:
    rig = await seeded()
    await rig.recall.handle(recall_request())

    assert len(rig.sink.sent) == 1
    topic, key, value = rig.sink.sent[0]
    assert (topic, key) == (REPLY_TO, "agent-1")
    reply = orjson.loads(value)
    assert reply["correlation_id"] == "corr-1"
    assert reply["agent_id"] == "agent-1"
    assert "error" not in reply
    assert reply["watermark"] == TS + 2
    items = reply["items"]
    assert {item["agent_id"] for item in items} == {"agent-1"}
    assert {item["source_event_id"] for item in items} == {"a1", "a2", "a3"}

    top = items[0]
    assert top["id"] == mid("agent-1", "a1", TS)
    assert top["text"] == DISK
    assert sorted(top["lanes"]) == ["bm25", "canonical", "eidolon"]
    assert top["reasons"] == ["lane:bm25", "lane:canonical", "lane:eidolon"]
    assert all("bm25" not in item["lanes"] for item in items[1:])
    assert reply["mode"] == "full"
    assert reply["budget"]["items"] == len(items)
    assert set(reply["timings_ms"]) == {
        "state", "embed", "lanes", "walk", "fetch", "relevance", "rank", "pack", "total",
    }  # fmt: skip


async def test_recall_embeds_its_query_beside_the_ingest_queue() -> None:
    rig = await seeded()
    assert rig.fake.query_calls == 0  # ingest goes through the batching queue
    await rig.recall.handle(recall_request())
    assert rig.fake.query_calls == 1  # the query and the state's parts, one call


async def test_recall_never_crosses_tenants_even_on_an_exact_match() -> None:
    rig = await seeded()
    await rig.recall.handle(recall_request(query="backups exceeded quota limits"))
    (reply,) = rig.on(REPLY_TO)
    assert reply["items"]
    assert all(item["agent_id"] == "agent-1" for item in reply["items"])
    assert "backups exceeded quota limits" not in {item["text"] for item in reply["items"]}


async def test_recall_returns_one_copy_of_a_repeated_text() -> None:
    rig = await seeded()
    await rig.ingest.handle(
        EventType.EPISODE,
        messages(
            episode("agent-1", "Disk  full on NODE seven", TS + 10, "a4"),
            episode("agent-1", DISK, TS + 11, "a5"),
        ),
    )
    assert [e["action"] for e in rig.events()] == ["aggregate", "aggregate"]
    rig.sink.sent.clear()
    await rig.recall.handle(recall_request())
    (reply,) = rig.on(REPLY_TO)
    texts = [item["text"].casefold() for item in reply["items"]]
    assert texts.count(DISK) == 1
    assert len(texts) == 3  # a1 and its aggregate collapse into one; a2 and a3 remain
    # a1 and the aggregate share vector and terms: whichever ranks first is kept
    a1 = mid("agent-1", "a1", TS)
    assert reply["items"][0]["id"] in {a1, aggregate_id("agent-1", a1)}


async def test_recall_k_counts_distinct_texts() -> None:
    rig = await seeded()
    await rig.ingest.handle(EventType.EPISODE, messages(episode("agent-1", DISK, TS + 10, "a4")))
    rig.sink.sent.clear()
    await rig.recall.handle(recall_request(k=2))
    (reply,) = rig.on(REPLY_TO)
    assert len(reply["items"]) == 2
    assert len({item["text"].casefold() for item in reply["items"]}) == 2


async def test_recall_respects_k() -> None:
    rig = await seeded()
    await rig.recall.handle(recall_request(k=1))
    (reply,) = rig.on(REPLY_TO)
    assert [item["source_event_id"] for item in reply["items"]] == ["a1"]


async def test_recall_for_an_unknown_agent_is_empty() -> None:
    rig = await seeded()
    await rig.recall.handle(recall_request(agent_id="nobody"))
    (reply,) = rig.on(REPLY_TO)
    assert reply["items"] == []
    assert "watermark" not in reply
    assert "error" not in reply


async def test_recall_is_repeatable_on_the_same_state() -> None:
    rig = await seeded()
    # A read that records no usage leaves the state as it was, so asking again
    # must give the same bytes.
    await rig.recall.handle(recall_request(record_usage=False, explain=True))
    await rig.recall.handle(recall_request(record_usage=False, explain=True))
    first, second = rig.sink.sent
    assert orjson.loads(first[2])["items"] == orjson.loads(second[2])["items"]
    assert _items_bytes(first[2]) == _items_bytes(second[2])


async def test_usage_is_recorded_once_the_reply_is_out_and_only_for_what_it_carried() -> None:
    # Recall is a read: its uses are recorded (a journal entry in a worker) after
    # the answer reached the caller, never for an answer that did not.
    rig = await seeded()
    recorded_at_send: list[int] = []

    class WatchingSink(MemorySink):
        async def send(
            self, topic: str, key: str, value: bytes, *, partition: int | None = None
        ) -> None:
            if topic == REPLY_TO:
                recorded_at_send.append(len(rig.recorded))
            await super().send(topic, key, value, partition=partition)

    rig.recall.sink = WatchingSink()
    await rig.recall.handle(recall_request(as_of=TS + 500))
    assert recorded_at_send == [0]
    ((agent, usage, source),) = rig.recorded
    (reply,) = [orjson.loads(v) for t, _, v in rig.recall.sink.sent if t == REPLY_TO]
    assert agent == reply["agent_id"]
    assert usage.memory_ids == tuple(item["id"] for item in reply["items"])
    assert usage.as_of_ms == TS + 500 and source is not None
    for item in reply["items"]:
        assert rig.store.usage(item["id"])["last_accessed"] == str(TS + 500)


async def test_a_reply_that_fails_to_send_records_no_use() -> None:
    rig = await seeded()

    class FailingSink(MemorySink):
        async def send(
            self, topic: str, key: str, value: bytes, *, partition: int | None = None
        ) -> None:
            if topic == REPLY_TO:
                raise ConnectionError("broker gone")
            await super().send(topic, key, value, partition=partition)

    rig.recall.sink = FailingSink()
    with pytest.raises(ConnectionError):
        await rig.recall.handle(recall_request(as_of=TS + 500))
    assert rig.recorded == []


async def test_replaying_the_log_gives_the_same_answer_usage_included() -> None:
    # Two workers fed the same events and the same requests answer identically,
    # usage accounting and all: nothing depends on the wall clock.
    answers = []
    for _ in range(2):
        rig = await seeded()
        await rig.recall.handle(recall_request(explain=True))
        await rig.recall.handle(recall_request(explain=True, query="cpu saturated"))
        answers.append([_items_bytes(value) for _, _, value in rig.sink.sent])
    assert answers[0] == answers[1]


def _items_bytes(reply: bytes) -> bytes:
    return orjson.dumps(orjson.loads(reply)["items"])


# --- anti-rumination ------------------------------------------------------------------

SAD = {"pleasure": -0.8, "arousal": 0.6}
SAD_DISK = (
    "disk full on node seven and the writes are failing",
    "the import job crashed when storage on node seven filled up",
    "paged at night because the postgres volume was exhausted",
    "free space alarm below one percent on the seven box",
    "we lost the nightly report since the partition filled",
)


def _anti_rumination(reply: dict[str, Any]) -> list[str]:
    return [
        item["source_event_id"] for item in reply["items"] if "anti-rumination" in item["reasons"]
    ]


async def test_the_first_recall_of_each_hundred_ticks_carries_a_memory_against_the_mood() -> None:
    rig = Rig()
    glad = episode(
        "agent-1", "celebrated a calm week with the storage cluster healthy", TS, "glad", tick=90,
        affect={"pleasure": 0.7},
    )  # fmt: skip
    sad = [
        episode(
            "agent-1",
            text,
            TS + 1_000 * (n + 1),
            f"sad{n}",
            tick=101 + n,
            affect=SAD,
            importance=0.9,
        )
        for n, text in enumerate(SAD_DISK)
    ]
    await rig.ingest.handle(EventType.EPISODE, messages(glad, *sad))
    rig.sink.sent.clear()

    def ask(**fields: Any) -> InputMessage:
        return recall_request(query="disk full node seven", k=4, **fields)

    await rig.recall.handle(ask(record_usage=False))  # a probe serves no window
    await rig.recall.handle(ask())
    await rig.recall.handle(ask())  # the same window (ticks 100-199), served already
    probe, first, again = rig.on(REPLY_TO)
    assert _anti_rumination(probe) == _anti_rumination(first) == ["glad"]
    assert first["items"][-1]["source_event_id"] == "glad"
    assert _anti_rumination(again) == []
    assert "glad" not in {item["source_event_id"] for item in again["items"]}

    more = episode("agent-1", "the disk on node seven is full yet again", TS + 9_000, "sad9",
                   tick=200, affect=SAD)  # fmt: skip
    await rig.ingest.handle(EventType.EPISODE, messages(more, first_offset=10))
    rig.sink.sent.clear()
    await rig.recall.handle(ask())  # a new window
    (later,) = rig.on(REPLY_TO)
    assert _anti_rumination(later) == ["glad"]


# --- tenancy --------------------------------------------------------------------------


async def test_randomised_tenancy_agents_sharing_texts_and_keys_never_mix() -> None:
    rng = random.Random(20261122)
    words = ["disk", "cpu", "node", "seven", "backup", "deploy", "staging", "prod"]
    words += ["oracle", "gas", "reorg", "funding"]
    agents = [f"agent-{i}" for i in range(4)]
    rig = Rig()
    owned: dict[str, set[str]] = {a: set() for a in agents}
    batch = []
    for n in range(80):
        agent = rng.choice(agents)
        # Shared vocabulary, shared tags and, every fifth event, the very same text.
        text = "disk full on node seven" if n % 5 == 0 else " ".join(rng.sample(words, 5))
        tags = [f"topic/{w}" for w in rng.sample(words, 2)]
        batch.append(episode(agent, text, TS + n, f"e{n}", tags=tags))
        owned[agent].add(f"e{n}")
    await rig.ingest.handle(EventType.EPISODE, messages(*batch))
    rig.sink.sent.clear()
    for n in range(40):
        agent = rng.choice(agents)
        text = " ".join(rng.sample(words, 3))
        await rig.recall.handle(
            recall_request(agent_id=agent, query=text, k=20, correlation_id=f"q{n}")
        )
    replies = rig.on(REPLY_TO)
    assert len(replies) == 40
    for reply in replies:
        agent = reply["agent_id"]
        assert reply["items"], reply
        assert {item["agent_id"] for item in reply["items"]} == {agent}
        assert {item["source_event_id"] for item in reply["items"]} <= owned[agent]


async def test_recall_reuses_the_state_vector_the_write_path_kept() -> None:
    """The write path keeps each agent's latest state vector (composed from the
    state's parts); a recall in that state conditions its eidolon query on it
    instead of embedding the parts again, and answers exactly as if it had."""
    rig = Rig()
    await rig.ingest.handle(
        EventType.EPISODE,
        messages(
            episode("agent-1", DISK, TS, "a1", regime="volatile", tags=["ops/disk"]),
            episode("agent-1", CPU, TS + 1, "a2", regime="volatile", tags=["ops/cpu"]),
        ),
    )
    state = (await rig.store.load_fields(["agent-1"]))["agent-1"]
    parts = state.digest_parts()
    assert len(parts) > 1
    kept = (await rig.store.state_vectors(["agent-1"]))["agent-1"]
    assert kept.key == state_key(parts)
    composed = state_vector(parts, {part: rig.fake.vector(part) for part in parts})
    assert composed is not None
    np.testing.assert_array_equal(np.frombuffer(kept.vector, dtype=np.float32), composed)

    rig.fake.texts.clear()
    await rig.recall.handle(recall_request())
    assert rig.fake.texts == ["disk full node seven"]
    # Without the kept vector the parts are embedded, and the answer is the same.
    rig.store.core.state_vectors.clear()
    rig.fake.texts.clear()
    await rig.recall.handle(recall_request())
    assert rig.fake.texts == ["disk full node seven", *parts]
    with_kept, embedded = rig.on(REPLY_TO)
    assert with_kept["items"] and with_kept["items"] == embedded["items"]

    # A request bringing its own state is conditioned on that state's parts.
    await rig.ingest.handle(
        EventType.EPISODE, messages(episode("agent-1", "swap", TS + 2, "a3", tags=["ops/cpu"]))
    )
    assert (await rig.store.state_vectors(["agent-1"]))["agent-1"].key
    rig.fake.texts.clear()
    await rig.recall.handle(recall_request(state={"regime": "calm"}))
    assert rig.fake.texts[0] == "disk full node seven"
    assert "regime calm" in rig.fake.texts[1:]


async def test_recall_embeds_its_query_without_the_actors_it_names() -> None:
    """A query naming one of its agent's actors is embedded without the name (the
    actor match prefers that actor's memories instead); another agent's actor is
    not this agent's, and with the mechanism off every name stays."""
    rig = Rig()
    await rig.ingest.handle(
        EventType.EPISODE,
        messages(
            episode("agent-1", DISK, TS, "a1", actor_id="Dana"),
            episode("agent-1", CPU, TS + 1, "a2", actor_id="deploy-bot"),
            episode("agent-2", DISK, TS + 2, "b1", actor_id="Erik"),
        ),
    )
    rig.fake.texts.clear()
    await rig.recall.handle(recall_request(query="What did Dana's disk do?"))
    await rig.recall.handle(recall_request(query="did the deploy-bot see Erik's cpu"))
    await rig.recall.handle(recall_request(query="Dana"))
    assert rig.fake.texts == ["What did disk do?", "did the see Erik's cpu", "Dana"]
    first, _, _ = rig.on(REPLY_TO)
    # The actor match still reads the whole query: Dana's memory leads.
    assert first["items"][0]["source_event_id"] == "a1"
    # Only `explain` says what the vector lanes embedded.
    assert "embedded_query" not in first
    rig.sink.sent.clear()
    await rig.recall.handle(recall_request(query="What did Dana's disk do?", explain=True))
    (explained,) = rig.on(REPLY_TO)
    assert explained["embedded_query"] == "What did disk do?"
    rig.fake.texts.clear()

    rig.recall.policy = replace(rig.recall.policy, actor_free_query=False)
    rig.fake.texts.clear()
    await rig.recall.handle(recall_request(query="What did Dana's disk do?"))
    assert rig.fake.texts == ["What did Dana's disk do?"]
