"""What an outside probe of a fresh clone found, through the real broker, worker and
Redis (the parsers and the handler alone are in tests/unit/streams/inbound/test_hostile_inputs.py):

* `TENV1` and `tenV1` writing the same text stay two agents (the `agent_id` TAG was
  case-insensitive and admission folded the second into the first's aggregate), and
  `tenV2,evil` is refused instead of writing into `tenV2`;
* a `reply_to` outside `{prefix}.replies.` gets no reply and one dead letter;
* an answer larger than a Kafka record is cut to `max_reply_bytes` and says so,
  instead of failing as `internal_error` after three tries;
* a megabyte `correlation_id` is one dead letter, not three and no reply.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

import orjson
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from grimoire.topics.options import RecallBudgets
from grimoire.topics.schemas import EpisodeV1
from tests.support.dead_letters import dead_letters_where
from tests.support.live import Live

pytestmark = pytest.mark.integration

BASE_TS = 1_790_000_000_000
TEXT = "rpc endpoint timed out twice while syncing the validator set"
PARAPHRASE = "the rpc endpoint timed out twice while syncing validator set"


def _request(agent: str, **fields: Any) -> bytes:
    return orjson.dumps({"agent_id": agent, "query": "rpc timed out", **fields})


async def _events_of(live: Live, agent: str, n: int) -> list[dict[str, Any]]:
    def mine(records: list[Any]) -> list[dict[str, Any]]:
        events = [orjson.loads(r.value) for r in records]
        # Admission decisions only (memory-events also carries witness links).
        return [e for e in events if e.get("agent_id") == agent and "action" in e]

    records = await live.read_topic(
        live.settings.bootstrap_servers,
        live.client.topics.memory_events,
        until=lambda rs: len(mine(rs)) >= n,
        timeout=20,
    )
    return mine(records)


async def _owner(live: Live, agent: str, memory_id: str) -> str:
    """The `agent_id` the memory's hash holds under `agent`'s key ("" when absent)."""
    raw = await live.redis.hget(live.keys.memory(agent, memory_id), "agent_id")
    return raw.decode() if raw is not None else ""


async def _letters_of(live: Live, agent: str, n: int) -> list[dict[str, Any]]:
    """The agent's dead letters once there are `n`, read again a moment later so a
    duplicate (a retried handler dead-letters again) would show."""

    def mine(letter: dict[str, Any]) -> bool:
        return letter.get("agent_id") == agent

    read_topic, settings = live.read_topic, live.settings
    await dead_letters_where(read_topic, settings, mine, at_least=n, timeout=20)
    await asyncio.sleep(2.0)  # the retry backoff is 0.1 s, then 0.2 s
    return await dead_letters_where(read_topic, settings, mine, at_least=n + 1, timeout=1)


async def test_agents_differing_only_in_case_never_fold_into_each_other(live: Live) -> None:
    client = live.client
    suffix = uuid.uuid4().hex[:6]
    upper, lower = f"TENV1-{suffix}", f"tenV1-{suffix}"
    await client.publish_episode(EpisodeV1(agent_id=upper, ts=BASE_TS, text=TEXT))
    (first,) = await _events_of(live, upper, 1)
    assert first["action"] == "admit"

    await client.publish_episode(EpisodeV1(agent_id=lower, ts=BASE_TS + 1, text=TEXT))
    await client.publish_episode(EpisodeV1(agent_id=lower, ts=BASE_TS + 2, text=PARAPHRASE))
    own = await _events_of(live, lower, 2)
    # Its first memory is its own, not a fold into TENV1's; the paraphrase lands
    # on that memory (or is admitted), never on TENV1's.
    assert own[0]["action"] == "admit"
    for event in own:
        for memory_id in (event["memory_id"], event.get("target_id")):
            if memory_id and event["action"] != "reject":
                assert await _owner(live, lower, memory_id) == lower, event

    answer = await client.recall(upper, "rpc timed out", k=10, record_usage=False)
    assert [item.agent_id for item in answer.items] == [upper]
    answer = await client.recall(lower, "rpc timed out", k=10, record_usage=False)
    assert answer.items and {item.agent_id for item in answer.items} == {lower}


async def test_an_agent_id_with_a_comma_is_dead_lettered_and_writes_nothing(live: Live) -> None:
    client, settings, read_topic = live.client, live.settings, live.read_topic
    suffix = uuid.uuid4().hex[:6]
    victim, forged = f"tenV2-{suffix}", f"tenV2-{suffix},evil"
    await client.publish_episode(EpisodeV1(agent_id=victim, ts=BASE_TS, text=TEXT))
    await _events_of(live, victim, 1)
    payload = {"agent_id": forged, "ts": BASE_TS + 1, "text": TEXT, "event_id": suffix}
    await client.publish_raw(client.topics.episodes, victim, orjson.dumps(payload))

    (letter,) = await dead_letters_where(
        read_topic, settings, lambda d: forged in (d.get("payload") or ""), timeout=15
    )
    assert (letter["reason"], letter["field"]) == ("invalid_value", "agent_id")
    answer = await client.recall(victim, "rpc timed out", k=10, record_usage=False)
    assert len(answer.items) == 1
    events = await _events_of(live, victim, 1)
    assert [e["action"] for e in events] == ["admit"]


async def test_reply_to_outside_the_reply_namespace_gets_no_reply_and_one_dead_letter(
    live: Live,
) -> None:
    client, settings, read_topic = live.client, live.settings, live.read_topic
    agent = f"probe-{uuid.uuid4().hex[:6]}"
    fresh = f"{settings.broker.topic_prefix}-new-{uuid.uuid4().hex[:6]}"
    targets = [
        client.topics.memory_events,
        client.topics.episodes,
        f"other{uuid.uuid4().hex[:4]}.replies.x",
        f"{client.topics.reply_namespace}someone.else",
        fresh,
    ]
    for n, reply_to in enumerate(targets):
        raw = _request(agent, reply_to=reply_to, correlation_id=f"outside-{n}")
        await client.publish_raw(client.topics.recall_requests, agent, raw)

    mine = await _letters_of(live, agent, len(targets))
    assert len(mine) == len(targets)
    assert {(d["reason"], d["field"]) for d in mine} == {("invalid_value", "reply_to")}

    for topic in (client.topics.memory_events, client.topics.episodes):
        records = await read_topic(
            settings.bootstrap_servers, topic, until=lambda rs: False, timeout=1
        )
        assert not [r for r in records if b"outside-" in r.value]
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    await admin.start()
    try:
        assert fresh not in set(await admin.list_topics())
    finally:
        await admin.close()


# Words from unrelated domains: texts drawn from different samples of them embed far
# apart, so admission keeps every one as its own memory.
VOCABULARY = """
harbor glacier violin mortgage pancake satellite orchid tungsten referee lantern
bicycle volcano ledger saxophone cathedral pepper thunder spreadsheet falcon
quilt compiler meadow anchor tariff yoghurt telescope marathon embassy cactus
velvet pharmacy dolphin kettle senate granite puzzle carnival hammock algebra
lobster freight chimney tornado lullaby passport vineyard cobalt sermon trombone
igloo broccoli asteroid verdict mosaic kayak turbine pigeon sonnet warehouse
blizzard peninsula chess mustard galaxy plumber ballet helmet crocodile tavern
invoice nebula scarecrow parliament espresso lagoon pendulum walrus fresco
subway archive opera gravel rhubarb canyon diploma jellyfish vaccine orbit
tapestry monsoon caravan goblet radish skyscraper quarry penguin bakery moth
census cliff laptop
""".split()  # noqa: SIM905
FILLER = "😀🚀🌍🔥🎲🧭🪐🦉🌵🍄"  # four UTF-8 bytes each, unchanged by NFKC


def _long_text(rng: random.Random, marker: str) -> str:
    """Nearly 16,000 characters, ~60 KB: its own sample of words over the model's
    whole window, then four-byte filler (runs of emoji, 4,000 tokens by the packer's
    estimate) up to the text limit."""
    words = rng.sample(VOCABULARY, 20)
    head = [marker]
    for _ in range(12):
        head += rng.sample(words, len(words))
    text = " ".join(head)
    while len(text) < 15_900:
        text += " " + "".join(rng.choice(FILLER) for _ in range(50))
    return text[:15_950]


async def test_an_answer_larger_than_a_record_is_cut_to_the_reply_limit(live: Live) -> None:
    client, settings, read_topic = live.client, live.settings, live.read_topic
    agent = f"big-{uuid.uuid4().hex[:6]}"
    marker = f"m{uuid.uuid4().hex[:8]}"
    rng = random.Random(20261125)
    count = 30
    for n in range(count):
        text = _long_text(rng, marker)
        # Alerts the agent rates as important: admitted on their own, whatever
        # the model makes of the filler.
        episode = EpisodeV1(
            agent_id=agent, ts=BASE_TS + n, text=text, episode_type="alert", importance=1.0
        )
        await client.publish_episode(episode)

    async def all_stored() -> Any:
        answer = await client.recall(
            agent,
            marker,
            k=100,
            budgets=RecallBudgets(canonical_k=100, eidolon_k=100, full_text_items=0),
            record_usage=False,
        )
        return answer if len(answer.items) == ranked else None

    # A text close to an earlier one reinforces it instead: enough stay their own.
    events = await _events_of(live, agent, count)
    admitted = sum(1 for e in events if e["action"] == "admit")
    assert admitted >= 20, [e["action"] for e in events]
    ranked = min(admitted, settings.recall.rerank.depth)  # what a recall returns at most
    await live.eventually(all_stored, timeout=60)
    # Every budget within its documented ceiling; the 20 items recall ranks (its
    # rerank depth) carry ~1.2 MB of text: more than a Kafka record may hold.
    budgets = RecallBudgets(
        canonical_k=100, eidolon_k=100, bm25_k=100, token_budget=200_000, full_text_items=100
    )
    answer = await client.recall(
        agent, marker, k=100, budgets=budgets, record_usage=False, timeout=20
    )
    assert answer.budget["truncated"] == 1
    limit = settings.recall_limits.max_reply_bytes
    assert answer.budget["max_reply_bytes"] == limit
    kept = len(answer.items)
    assert 0 < kept < ranked
    assert answer.budget["items"] == kept
    assert answer.budget["dropped_items"] == ranked - kept
    assert answer.items[0].text

    records = await read_topic(
        settings.bootstrap_servers, client.reply_topic, until=lambda rs: False, timeout=2
    )
    biggest = max(len(r.value) for r in records)
    assert limit // 2 < biggest <= limit


async def test_a_megabyte_correlation_id_is_one_dead_letter_and_no_reply(live: Live) -> None:
    client, settings, read_topic = live.client, live.settings, live.read_topic
    agent = f"corr-{uuid.uuid4().hex[:6]}"
    # Just under the producer's 1 MiB record limit.
    raw = _request(agent, reply_to=client.reply_topic, correlation_id="c" * 1_000_000)
    await client.publish_raw(client.topics.recall_requests, agent, raw)

    mine = await _letters_of(live, agent, 1)
    assert [(d["reason"], d["field"]) for d in mine] == [("oversize", "correlation_id")]
    replies = await read_topic(
        settings.bootstrap_servers, client.reply_topic, until=lambda rs: False, timeout=2
    )
    assert all(len(r.value) < 100_000 for r in replies)
    assert not [r for r in replies if b"ccccccccccccccccccccccccccccc" in r.value]
