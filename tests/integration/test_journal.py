"""The journal through the real broker, worker and Redis (issue "the log is the truth").

One worker of its own (maintenance on, a prefix of its own, so the wipe and the
replay touch nothing of the other tests):

- one agent's episodes, tool events, transcripts, outcomes, recalls and maintenance
  commands, sent all at once, leave exactly the field state an in-process fold of the
  journal gives (inputs of every kind interleave in one order, and one loop writes);
- an outcome published before the memory it names takes effect once it is written;
- wipe the memory state (not the key store), replay the journal: every agent's digest
  is the same, and 50 recall requests get byte-identical item lists;
- every agent's witness chain verifies, before and after.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from redis.asyncio import Redis

from grimoire.agents.folding import FORGOTTEN_CHAIN, fold_rules
from grimoire.agents.handlers.ingest import IngestHandler
from grimoire.agents.handlers.outcomes import OutcomeHandler
from grimoire.agents.handlers.usage import StoreUsage
from grimoire.agents.journal.apply import JournalApplier
from grimoire.agents.journal.witness import PublishedWitness
from grimoire.agents.maintenance.handler import MaintenanceHandler
from grimoire.agents.ports import InputMessage, MemorySink
from grimoire.infra.replay import read_partition, replay
from grimoire.infra.settings import Settings
from grimoire.streams.journal.entry import decode_entry
from grimoire.streams.model.field_state import FieldState
from grimoire.tables.journal.keystore import RedisKeyStore
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.memory.agent_state import AgentStateStore
from grimoire.tables.memory.store import RedisMemoryStore
from grimoire.tables.memory.wipe import wipe_memory_state
from grimoire.tables.testing.applied_marks import InMemoryAppliedMarks
from grimoire.tables.testing.maintenance_ledger import InMemoryMaintenanceLedger
from grimoire.tables.testing.memory_store import InMemoryMemoryStore
from grimoire.tables.testing.witness_log import InMemoryWitnessLog
from grimoire.tables.trust.agent_keys import agent_keys, agent_members, agent_memory_ids
from grimoire.tables.trust.digest import agent_digest
from grimoire.tables.trust.witness_store import RedisWitnessLog, Witness, audit
from grimoire.topics.client import GrimoireClient
from grimoire.topics.declarations import TopicNames
from grimoire.topics.offsets import true_end_offsets
from grimoire.topics.schemas import CommandV1, EpisodeV1, OutcomeV1
from tests.support.embedders import FakeEmbedder
from tests.support.handlers import mid
from tests.support.history import BASE_TS, BLOCK_MS, episode_at, line_at, tool_call_at
from tests.support.journal import journal_name_of
from tests.support.live import Live
from tests.support.rebuild import assert_rebuilt, replay_journal, stop_and_wipe
from tests.support.stored import settled_digests
from tests.support.workers import add_worker, prefixed_settings, workers_fixture

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def journal_settings(settings: Settings) -> Settings:
    # Maintenance by the commands the tests send alone.
    return prefixed_settings(settings, "jr", timer=False, maintenance_enabled=True)


journal_worker = workers_fixture("journal_worker", process="journal_settings")


@pytest.fixture(scope="module")
def deployed(journal_settings: Settings, journal_worker: dict[str, Any]) -> Settings:
    """`live` on this module's deployment, its worker running."""
    return journal_settings


async def _journal(settings: Settings) -> list[InputMessage]:
    """Every journal record, partition by partition, in offset order."""
    topic = TopicNames(settings.broker.topic_prefix).journal
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers)
    await consumer.start()
    out: list[InputMessage] = []
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        ends = await true_end_offsets(consumer, tps)
        for tp in tps:
            async for batch in read_partition(consumer, tp, end=ends[tp]):
                out.extend(batch)
    finally:
        await consumer.stop()
    return out


async def _fold_in_process(settings: Settings, redis: Redis, agent_id: str) -> FieldState:
    """The agent's field state as an in-process fold of the journal gives it: the
    reference stores in memory, the deployment's key store to open the entries."""
    store = InMemoryMemoryStore(dims=FakeEmbedder.dims)
    sink = MemorySink()
    topics = TopicNames(settings.broker.topic_prefix)

    async def live(_: str) -> int:
        return 0

    class NoCommands:
        async def apply_command(self, message: InputMessage) -> Sequence[Any]:
            return []

    rules = fold_rules(
        ingest=IngestHandler(store, FakeEmbedder(), sink, topics),
        outcomes=OutcomeHandler(store, sink, topics),
        maintenance=MaintenanceHandler(
            ledgers=InMemoryMaintenanceLedger(),
            field_states=store,
            runners={},
            sink=sink,
            topics=topics,
            worker_id="reference",
            block_interval_ms=int(settings.worker.block_interval_s * 1000),
            live_count=live,
        ),
        usage=StoreUsage(store),
        commands=NoCommands(),
        witness=PublishedWitness(Witness(InMemoryWitnessLog()), sink, topics),
    )
    applier = JournalApplier(
        keys=RedisKeyStore(redis, settings.broker.topic_prefix),
        marks=InMemoryAppliedMarks(),
        rules=rules,
        sink=sink,
        topics=topics,
    )
    journal = await _journal(settings)
    by_partition: dict[int, list[InputMessage]] = {}
    for message in journal:
        by_partition.setdefault(message.partition or 0, []).append(message)
    for partition in sorted(by_partition):
        await applier.apply(by_partition[partition])
    return (await store.load_fields([agent_id]))[agent_id]


def _agent_entries(journal: Sequence[InputMessage], name: str) -> int:
    return sum(1 for m in journal if decode_entry(m.value).journal == name)


async def _send_everything_at_once(client: GrimoireClient, agent: str) -> int:
    """Inputs of every kind for `agent`, concurrently; how many were published."""
    episodes = [
        episode_at(
            agent,
            i,
            f"pool depth {i} stable on venue {i % 3}, gas {20 + i} gwei",
            tags=[f"venue/{i % 3}"],
            affect={"pleasure": (i % 5 - 2) / 4, "arousal": 0.3},
        )
        for i in range(24)
    ]
    tools = [
        tool_call_at(
            agent,
            i,
            "swap",
            error=f"execution reverted: slippage {i}",
            result=f"filled {i}",
            paths=[f"/venues/{i % 3}.json"],
        )
        for i in range(10)
    ]
    lines = [
        line_at(
            agent,
            i,
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": f"should we rebalance venue {i % 3} now, step {i}"
                + (", as we did yesterday" if i % 3 == 0 else ""),
            },
            turn_id=f"t-{i // 2}",
            # Actors and time words: recall's actor and time matches in play.
            actor_id="dana" if i % 2 == 0 else "relayer",
        )
        for i in range(8)
    ]
    outcomes = [
        OutcomeV1(
            agent_id=agent,
            ts=BASE_TS + 200_000 + i,
            outcome="positive" if i % 2 else "negative",
            memory_ids=[mid(agent, f"ep-{i * 3}", BASE_TS + i * 3 * BLOCK_MS)],
            event_id=f"out-{i}",
        )
        for i in range(5)
    ]
    jobs: list[Any] = [client.publish_episode(e) for e in episodes]
    jobs += [client.publish_tool_event(t) for t in tools]
    jobs += [client.publish_transcript(line) for line in lines]
    jobs += [client.publish_outcome(o) for o in outcomes]
    jobs += [client.request_maintenance(agent) for _ in range(3)]
    jobs += [client.recall(agent, f"venue {i} slippage", k=3, timeout=30) for i in range(6)]
    await asyncio.gather(*jobs)
    return len(episodes) + len(tools) + len(lines) + len(outcomes) + 3


async def test_one_writer_folds_every_kind_of_input_in_journal_order(live: Live) -> None:
    redis = live.redis
    agent = f"fold-{uuid.uuid4().hex[:6]}"
    published = await _send_everything_at_once(live.client, agent)

    async def journaled() -> bool:
        journal = await _journal(live.settings)
        if not journal:  # nothing journaled: no journal secret yet either
            return False
        name = await journal_name_of(redis, live.prefix, agent)
        return _agent_entries(journal, name) >= published

    await live.eventually(journaled, timeout=60, interval=0.5)
    expected = await _fold_in_process(live.settings, redis, agent)
    assert expected.tick is not None and expected.focus
    state = AgentStateStore(redis, live.prefix)

    async def folded() -> bool:
        return await state.field(agent) == await _fold_in_process(live.settings, redis, agent)

    await live.eventually(folded, timeout=60, interval=1.0)
    verdict = await audit(RedisWitnessLog(redis, live.prefix), agent)
    assert verdict.ok and verdict.count > published // 2


async def test_an_outcome_before_its_memory_takes_effect_once_it_is_written(live: Live) -> None:
    client, redis = live.client, live.redis
    agent = f"early-{uuid.uuid4().hex[:6]}"
    memory = mid(agent, "late-1", BASE_TS)
    store = RedisMemoryStore(redis, live.prefix, 384)
    await client.publish_outcome(
        OutcomeV1(
            agent_id=agent,
            ts=BASE_TS + 10,
            outcome="positive",
            memory_ids=[memory],
            event_id="o-early",
        )
    )

    async def held() -> Any:
        return await redis.hlen(store.keys.pending_outcomes(agent))

    await live.eventually(held, timeout=30)  # applied first: held for the memory
    await client.publish_episode(
        EpisodeV1(
            agent_id=agent,
            ts=BASE_TS,
            event_id="late-1",
            tick=1,
            text="the bridge relayer stalled for three blocks",
        )
    )

    async def written() -> Any:
        doc = await redis.hgetall(store.key(agent, memory))
        return doc if doc and await redis.hlen(store.keys.pending_outcomes(agent)) == 0 else None

    doc = await live.eventually(written, timeout=30)
    assert float(doc[b"strength"]) == 2.0
    usage = await redis.hgetall(store.keys.usage(agent, memory))
    assert usage[b"last_accessed"] == str(BASE_TS + 10).encode()


async def test_a_wiped_store_replays_to_the_same_digests_and_answers(
    live: Live, journal_worker: dict[str, Any]
) -> None:
    client, redis = live.client, live.redis
    agents = [f"replay-{n}-{uuid.uuid4().hex[:4]}" for n in range(3)]
    for agent in agents:
        await _send_everything_at_once(client, agent)
    prefix = live.prefix
    topics = [
        "slippage",
        "gas",
        "pool depth",
        "when did we rebalance",  # a "when" question
        "what did dana say about the rebalance",  # names an actor
        "rebalance in September 2026",  # names a window
        "filled",
    ]
    questions = [
        (agents[i % 3], f"{topic} venue {i % 3}", i % 2 == 0)
        for i, topic in enumerate((topics * 8)[:50])
    ]
    # Quiet: every input applied (digests stop moving).
    before = await settled_digests(redis, prefix, agents, live.eventually, quiet_s=3.0)

    async def ask() -> list[bytes]:
        # No garbage collection first: the lexical lane scores from the
        # agent's own counts, never from the index's statistics, which
        # count rewritten documents until they are purged.
        answers = []
        for agent, query, explain in questions:
            answer = await client.recall(
                agent, query, k=5, explain=explain, record_usage=False, timeout=30
            )
            answers.append(orjson.dumps([item.asdict() for item in answer.items]))
        return answers

    answers = await ask()
    assert len(answers) == 50 and sum(len(a) > 2 for a in answers) > 40
    await stop_and_wipe(redis, live.settings, journal_worker["process"])
    assert [(await agent_digest(redis, prefix, a)).sha256 for a in agents] != before
    await replay_journal(live.settings)
    await assert_rebuilt(redis, prefix, agents, before)

    await add_worker(journal_worker, "process", live.settings)
    assert await ask() == answers


async def test_forgetting_an_agent_leaves_nothing_of_it(live: Live) -> None:
    client, redis = live.client, live.redis
    forgotten, kept = (f"{name}-{uuid.uuid4().hex[:6]}" for name in ("gone", "kept"))
    prefix = live.prefix
    for agent in (forgotten, kept):
        for i in range(6):
            await client.publish_episode(
                EpisodeV1(agent_id=agent, ts=BASE_TS + i * 12_000, tick=i, event_id=f"e-{i}",
                          text=f"confidential ledger line {i} of {agent}")
            )  # fmt: skip
    log = RedisWitnessLog(redis, prefix)

    async def both_stored() -> bool:  # each input applied leaves one link
        return min([await log.length(a) for a in (forgotten, kept)]) >= 6

    await live.eventually(both_stored, timeout=60, interval=0.5)
    kept_before = (await agent_digest(redis, prefix, kept)).sha256
    await client.send_command(CommandV1(agent_id=forgotten, command="forget"))

    async def erased() -> bool:
        keys = await agent_keys(redis, prefix, forgotten)
        members = await agent_members(redis, prefix, forgotten)
        return not keys and not members

    await live.eventually(erased, timeout=60, interval=0.5)
    keys = Keyspace(prefix)
    leftovers = [
        k async for k in redis.scan_iter(match=f"{prefix}:*", count=1000)
        if forgotten.encode() in k
    ]  # fmt: skip
    assert leftovers == []
    assert not await redis.hexists(keys.journal_sequences, forgotten)
    assert (await agent_digest(redis, prefix, kept)).sha256 == kept_before
    # The journal still holds the entries, sealed, and no key opens them.
    store = RedisKeyStore(redis, prefix)
    name = await journal_name_of(redis, prefix, forgotten)
    journal = await _journal(live.settings)
    entries = [decode_entry(m.value) for m in journal if decode_entry(m.value).journal == name]
    # The journal names the forgotten agent nowhere in clear, and the key store no
    # longer knows whose name it was.
    assert not any(forgotten.encode() in m.value for m in journal)
    assert await store.agent_named(name) is None
    assert len(entries) == 7  # six episodes and the forget command
    for entry in entries:
        assert b"confidential" not in entry.ciphertext
        assert await store.key(forgotten, entry.key_id) is None
    # The deployment's chain records the forgetting, by a hash of the id.
    chain = await RedisWitnessLog(redis, prefix).records(FORGOTTEN_CHAIN)
    assert [r.op for r in chain][-1] == "forget"
    assert forgotten not in str(chain)
    # A replay into a new prefix rebuilds nothing of it, and the same of the other.
    fresh = f"{prefix}r"
    await replay(live.settings, into_prefix=fresh, progress=False)
    assert await agent_keys(redis, fresh, forgotten) == []
    assert (await agent_digest(redis, fresh, kept)).sha256 == kept_before


async def test_a_retracted_event_is_gone_from_recall_and_witnessed(live: Live) -> None:
    client, redis = live.client, live.redis
    agent = f"retract-{uuid.uuid4().hex[:6]}"
    prefix = live.prefix
    for i, text in enumerate(["the oracle price feed froze at block nine",
                              "the keeper bot rebalanced the vault"]):  # fmt: skip
        await client.publish_episode(
            EpisodeV1(agent_id=agent, ts=BASE_TS + i, tick=i, event_id=f"r-{i}", text=text)
        )
    store = RedisMemoryStore(redis, prefix, 384)
    wrong = mid(agent, "r-0", BASE_TS)
    log = RedisWitnessLog(redis, prefix)

    async def applied() -> bool:  # each input applied leaves one link
        return await log.length(agent) >= 2

    await live.eventually(applied, timeout=120, interval=0.5)
    before = await client.recall(agent, "oracle price feed froze", k=3, timeout=30)
    assert wrong in {item.id for item in before.items}
    await client.send_command(CommandV1(agent_id=agent, command="retract", source_event_id="r-0"))

    async def retracted() -> Any:
        return await redis.hget(store.key(agent, wrong), "retracted") == b"1"

    await live.eventually(retracted, timeout=120, interval=0.5)
    answer = await client.recall(agent, "oracle price feed froze", k=3, timeout=30)
    assert wrong not in {item.id for item in answer.items}
    ops = [r.op for r in await RedisWitnessLog(redis, prefix).records(agent)]
    assert "retract.memory" in ops and ops[-1] == "retract"
    assert (await audit(RedisWitnessLog(redis, prefix), agent)).ok


async def test_a_worker_rebuilds_a_lost_store_from_the_journal(live: Live) -> None:
    client, redis = live.client, live.redis
    agent = f"lost-{uuid.uuid4().hex[:6]}"
    prefix = live.prefix
    log = RedisWitnessLog(redis, prefix)
    texts = [f"the sequencer {word} at height {i}" for i, word in
             enumerate(["stalled", "recovered", "forked", "rejoined", "halted"])]  # fmt: skip
    for i, text in enumerate(texts[:4]):
        await client.publish_episode(
            EpisodeV1(agent_id=agent, ts=BASE_TS + i * 12_000, tick=i, event_id=f"l-{i}",
                      text=text)
        )  # fmt: skip

    async def applied(n: int) -> Any:
        return await log.length(agent) >= n

    await live.eventually(lambda: applied(4), timeout=60, interval=0.5)
    before = await agent_memory_ids(redis, prefix, agent)
    # Redis came back without the memory state (the key store is elsewhere).
    await wipe_memory_state(redis, prefix)
    await client.publish_episode(
        EpisodeV1(agent_id=agent, ts=BASE_TS + 60_000, tick=5, event_id="l-4", text=texts[4])
    )

    async def rebuilt() -> Any:
        ids = await agent_memory_ids(redis, prefix, agent)
        return ids if set(before) <= set(ids) and await log.length(agent) >= 5 else None

    await live.eventually(rebuilt, timeout=120, interval=1.0)
    verdict = await audit(log, agent)
    assert verdict.ok and verdict.count == 5
    answer = await client.recall(agent, "sequencer halted", k=3, timeout=30)
    assert answer.items


async def test_a_configuration_change_rules_the_next_event_and_replays(live: Live) -> None:
    """Ingest off, an event, ingest on with top_k 1, two events: the first event is
    skipped, the others are written, a recall answers one item by default, and a
    replay of the journal into a new prefix reaches the same configuration and the
    same memories."""
    client, redis = live.client, live.redis
    agent = f"config-{uuid.uuid4().hex[:6]}"
    prefix = live.prefix

    async def configure(update: dict[str, Any]) -> None:
        await client.send_command(CommandV1(agent_id=agent, command="configure", config=update))

    async def episode(n: int, text: str) -> None:
        await client.publish_episode(
            EpisodeV1(
                agent_id=agent,
                ts=BASE_TS + n,
                tick=n,
                event_id=f"c-{n}",
                text=text,
                episode_type="alert",
                importance=0.9,
            )
        )

    log = RedisWitnessLog(redis, prefix)

    # Commands and events travel on different topics: the journal orders them
    # as they arrive, so each step waits for the one before to be applied.
    async def links(count: int) -> None:
        async def applied() -> bool:
            return await log.length(agent) >= count

        await live.eventually(applied, timeout=120, interval=0.2)

    await configure({"ingest_enabled": False})
    await links(1)
    await episode(0, "the bridge relayer stalled at epoch four")
    await links(2)
    await configure({"ingest_enabled": True, "top_k": 1})
    await links(3)
    await episode(1, "alert: the rollup sequencer posted batch 812 forty minutes late")
    await episode(2, "alert: the liquidation bot missed a margin call on vault 9")
    await links(5)
    ops = [(r.op, r.ids) for r in await log.records(agent)]
    assert [op for op, _ in ops] == ["configure", "ingest", "configure", "ingest", "ingest"]
    decided = await redis.hgetall(Keyspace(prefix).decided(agent))
    assert set(decided) == {
        mid(agent, "c-1", BASE_TS + 1).encode(),
        mid(agent, "c-2", BASE_TS + 2).encode(),
    }  # c-0 was skipped: never decided
    stored = set(await agent_memory_ids(redis, prefix, agent))
    assert set(decided.values()) == {b"admit"} and len(stored) == 2
    answer = await client.recall(agent, "sequencer batch posted late", timeout=30)
    assert len(answer.items) == 1  # top_k
    wider = await client.recall(agent, "sequencer batch posted late", k=5, timeout=30)
    assert len(wider.items) == 2
    config = await redis.get(Keyspace(prefix).agent_config(agent))
    assert orjson.loads(config or b"{}") == {"top_k": 1}

    other = f"{prefix}cfg"
    await replay(live.settings, into_prefix=other, progress=False)
    assert await redis.get(Keyspace(other).agent_config(agent)) == config
    assert set(await agent_memory_ids(redis, other, agent)) == stored
