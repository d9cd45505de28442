"""How many times the fold talks to Redis to ingest one batch.

Issue 35 asks the fold to load the agents' state in one pipelined read and commit
once, so the round trips of a batch stop growing with its agents and events. This
counts them through the worker's composition (`compose`, real Redis) with the fold
bench's counter (`bench.fold.redis_traffic`): every `send_packed_command` of a
redis-py connection is one request on the wire (a pipeline or a transaction is one).
Each case journals its inputs first, then counts only the apply loop folding them.

Before issue 35 a batch of 64 events over 8 agents cost 204 requests, 220 over 16
agents and 332 for 128 events: opening each entry read its agent's name and key (the
composition here used no key cache, unlike a worker), and each agent of a batch paid
its own look for aggregates and held outcomes. Now all three cost the same: 68 over
the four journal partitions, then 60 once the candidates' held outcomes, recorded
decisions and field states came in one read (`IngestView`), then 56 once scripts in
a transaction went as EVAL with their body (no SCRIPT EXISTS before it), then 52 once
the published outbox entries were trimmed and the emptied lists unlisted in one
script. `python -m pytest
tests/integration/test_round_trips.py -s` prints the counts.
"""

from __future__ import annotations

import uuid

import pytest
from redis.asyncio import Redis

from bench.fold import redis_traffic
from grimoire.agents.ports import InputMessage, MemorySink
from grimoire.infra.settings import Settings
from grimoire.streams.journal.entry import EntryKind
from grimoire.tables.redis_client import create_redis
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import EpisodeV1
from tests.support.composed import compose_in_process, fold
from tests.support.stored import drop_deployment

pytestmark = pytest.mark.integration

BASE_TS = 1_790_000_000_000


async def _round_trips(settings: Settings, agents: int, events: int) -> int:
    """Requests the apply loop sends to fold `events` all-distinct episodes of
    `agents` agents, journaled beforehand, as one batch per journal partition."""
    prefix = f"rt{uuid.uuid4().hex[:8]}"
    configured = settings.with_values(topic_prefix=prefix, auth_enabled=False)
    redis: Redis = create_redis(configured.redis.url, 8)
    sink = MemorySink()
    try:
        composed = await compose_in_process(configured, redis, sink, "round-trips")
        topics = TopicNames(prefix)
        # Every agent known and folded once, so the batch counted is a steady one.
        warm = [
            InputMessage(
                EpisodeV1(
                    agent_id=f"agent-{a}", ts=BASE_TS, event_id="warm", text=f"agent {a} starts"
                ).dumps_json(),
                topics.episodes,
                0,
                a,
            )
            for a in range(agents)
        ]
        await composed.handlers.sequencer.append(EntryKind.EPISODE, warm)
        await fold(composed.handlers.applier, sink.as_consumed(topics.journal))
        before = len(sink.as_consumed(topics.journal))
        batch = [
            InputMessage(
                EpisodeV1(
                    agent_id=f"agent-{i % agents}",
                    ts=BASE_TS + (1 + i) * 12_000,
                    event_id=f"ev-{i}",
                    text=f"event {i}: {uuid.UUID(int=i * 7919 + 17).hex} unlike any other",
                ).dumps_json(),
                topics.episodes,
                0,
                agents + i,
            )
            for i in range(events)
        ]
        await composed.handlers.sequencer.append(EntryKind.EPISODE, batch)
        fresh = sink.as_consumed(topics.journal)[before:]
        assert len(fresh) == events
        with redis_traffic() as sent:
            await fold(composed.handlers.applier, fresh)
        return sent["requests"]
    finally:
        await drop_deployment(redis, prefix)
        await redis.aclose()


async def test_a_batch_costs_the_same_round_trips_whatever_its_agents_and_events(
    settings: Settings,
) -> None:
    base = await _round_trips(settings, agents=8, events=64)
    more_agents = await _round_trips(settings, agents=16, events=64)
    more_events = await _round_trips(settings, agents=8, events=128)
    print(f"round trips: 64 events/8 agents {base}, 64/16 {more_agents}, 128/8 {more_events}")
    assert more_agents <= base
    assert more_events <= base
