"""Every Kafka input is authenticated when tenant keys are on, through the real
broker, a worker of its own (tenant keys on, a prefix of its own) and Redis.

For each input kind the sequencer journals (episode, tool event, transcript,
outcome, fact, command), a record with no key, a revoked key or another tenant's
key is dead-lettered `unauthorized`, counted in `/metrics`, and never journaled;
the tenant's own key is journaled. A recall request and a fact query are refused
the same way; a refused one is answered only on its key's own reply topic (another
tenant's key gets `RecallUnauthorized`), so a request without a good key has
nothing written anywhere, and a request naming a reply topic that is not its key's
is refused with nothing written to that topic. `/metrics` names agents only to a
key that reaches them.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from redis.asyncio import Redis

from grimoire.infra.local.worker_process import start_worker, stop_worker
from grimoire.infra.settings import Settings
from grimoire.streams.journal.entry import EntryKind, decode_entry
from grimoire.streams.trust.tenancy import TenantScope
from grimoire.tables.redis_client import create_redis
from grimoire.tables.trust.api_keys import RedisApiKeyStore
from grimoire.topics.client import API_KEY_HEADER, GrimoireClient, RecallUnauthorized
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import (
    CommandV1,
    EpisodeV1,
    FactQueryV1,
    FactV1,
    OutcomeV1,
    RecallRequestV1,
    ToolEventV1,
    TranscriptV1,
)
from tests.support.gateway import RecordingGateway
from tests.support.http_deps import bearer, in_process, keyed_deps
from tests.support.journal import journal_name_once_written
from tests.support.workers import prefixed_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
READY_S = 180.0
T0 = 1_790_000_000_000
# A record with a refused key, and what its dead letter's detail starts with.
REFUSED = {"none": "unauthenticated", "revoked": "unauthenticated", "rival": "forbidden"}

Coords = tuple[str, int, int]  # topic, partition, offset


@dataclass
class Deployment:
    settings: Settings
    topics: TopicNames
    redis: Redis
    tokens: dict[str, str]  # tenant, rival, revoked, admin
    agent: str  # the tenant's agent
    rival_agent: str
    producer: AIOKafkaProducer

    def client(self, key: str | None) -> GrimoireClient:
        return GrimoireClient(
            self.settings.bootstrap_servers,
            self.settings.broker.topic_prefix,
            partitions=self.settings.broker.partitions,
            api_key=self.tokens[key] if key else None,
        )

    async def produce(self, topic: str, payload: bytes, key: str | None) -> Coords:
        """One record keyed by the tenant's agent, with `key`'s token as its header."""
        headers = [(API_KEY_HEADER, self.tokens[key].encode())] if key else None
        sent = await self.producer.send_and_wait(
            topic, value=payload, key=self.agent.encode(), headers=headers
        )
        return (sent.topic, sent.partition, sent.offset)


@pytest.fixture(scope="module")
async def deployment(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Deployment]:
    mine = prefixed_settings(settings, "ia", auth_enabled=True)
    mine = mine.with_values(app_id=f"grimoire-{mine.broker.topic_prefix}")
    suffix = uuid.uuid4().hex[:6]
    fleet, rival_agent = f"tenant-{suffix}/", f"rival-{suffix}"
    redis = create_redis(mine.redis.url, 4)
    store = RedisApiKeyStore(redis, mine.broker.topic_prefix)
    tokens: dict[str, str] = {}
    _, tokens["tenant"] = await store.create(TenantScope(agent_prefix=fleet), "tenant", now_ms=1)
    _, tokens["rival"] = await store.create(
        TenantScope(agent_ids=frozenset({rival_agent})), "rival", now_ms=1
    )
    revoked, tokens["revoked"] = await store.create(
        TenantScope(agent_prefix=fleet), "revoked", now_ms=1
    )
    await store.revoke(revoked.key_id)
    _, tokens["admin"] = await store.create(TenantScope(admin=True), "operator", now_ms=1)
    log = tmp_path_factory.mktemp("input-auth") / "worker.log"
    process = start_worker(mine, log, cwd=ROOT)
    producer = AIOKafkaProducer(bootstrap_servers=mine.bootstrap_servers, linger_ms=1)
    await producer.start()
    try:
        # A keyless probe would never be answered here: the operator's key is.
        async with GrimoireClient(
            mine.bootstrap_servers,
            mine.broker.topic_prefix,
            partitions=mine.broker.partitions,
            api_key=tokens["admin"],
        ) as probe:
            await probe.wait_until_ready(timeout=READY_S)
        yield Deployment(
            settings=mine,
            topics=TopicNames(mine.broker.topic_prefix),
            redis=redis,
            tokens=tokens,
            agent=f"{fleet}golem-1",
            rival_agent=rival_agent,
            producer=producer,
        )
    except BaseException:
        sys.stderr.write(log.read_text(errors="replace")[-8000:])
        raise
    finally:
        await producer.stop()
        stop_worker(process)
        await redis.aclose()


@pytest.fixture
async def scrape(deployment: Deployment) -> AsyncIterator[Callable[..., Awaitable[str]]]:
    """GET /metrics of an API over the deployment's Redis (with a bearer key or not)."""
    prefix = deployment.settings.broker.topic_prefix
    deps = keyed_deps(
        deployment.redis,
        prefix,
        RecordingGateway(topics=deployment.topics),
        RedisApiKeyStore(deployment.redis, prefix),
        deployment.settings.with_values(http_metrics_cache_s=0.0),
    )
    async with in_process(deps, timeout=30) as http:

        async def get(key: str | None = None) -> str:
            headers = bearer(deployment.tokens[key]) if key else {}
            answer = await http.get("/metrics", headers=headers)
            assert answer.status_code == 200, answer.text
            return answer.text

        yield get


def sample(text: str, series: str) -> float:
    """One sample's value in a Prometheus text page (0 when it is absent)."""
    for line in text.splitlines():
        if line.startswith(f"{series} "):
            return float(line.split()[-1])
    return 0.0


KAFKA_REFUSALS = 'grimoire_auth_refusals_by_surface_total{surface="kafka"}'
UNAUTHORIZED_LETTERS = 'grimoire_dead_letters_total{reason="unauthorized"}'


async def counts(scrape: Callable[..., Awaitable[str]]) -> tuple[float, float]:
    text = await scrape()
    return sample(text, KAFKA_REFUSALS), sample(text, UNAUTHORIZED_LETTERS)


async def dead_letters(
    deployment: Deployment, read_topic: Any, wanted: dict[Coords, str]
) -> dict[Coords, dict[str, Any]]:
    """The dead letter of each record in `wanted` (by its coordinates), once all are in."""

    def found(records: list[Any]) -> dict[Coords, dict[str, Any]]:
        letters = {}
        for record in records:
            letter = orjson.loads(record.value)
            coords = (letter["source_topic"], letter["partition"], letter["offset"])
            if coords in wanted:
                letters[coords] = letter
        return letters

    records = await read_topic(
        deployment.settings.bootstrap_servers,
        deployment.topics.dead_letters,
        until=lambda rs: len(found(rs)) == len(wanted),
        timeout=60,
    )
    letters = found(records)
    assert set(letters) == set(wanted), "a refused record was not dead-lettered"
    return letters


async def journaled_sources(deployment: Deployment, read_topic: Any, until: Coords) -> set[Coords]:
    """The source of every journal entry of the tenant's agent, once `until` is in."""

    # The inputs were just produced: the first one journaled creates the secret.
    name = await journal_name_once_written(
        deployment.redis, deployment.settings.broker.topic_prefix, deployment.agent
    )

    def sources(records: list[Any]) -> set[Coords]:
        found = set()
        for record in records:
            entry = decode_entry(record.value)
            if entry.journal == name and entry.source is not None:
                source = entry.source
                found.add((source.topic, source.partition, source.offset))
        return found

    records = await read_topic(
        deployment.settings.bootstrap_servers,
        deployment.topics.journal,
        until=lambda rs: until in sources(rs),
        timeout=60,
    )
    return sources(records)


def payload_of(kind: EntryKind, agent: str, n: int, names: TopicNames) -> tuple[str, bytes]:
    """A well-formed input of `kind` for `agent`, and its topic."""
    ts, event = T0 + n, f"{kind.value}-{n}-{uuid.uuid4().hex[:6]}"
    record: Any
    if kind is EntryKind.EPISODE:
        topic, record = names.episodes, EpisodeV1(agent_id=agent, ts=ts, text=f"rpc {n} timed out")
    elif kind is EntryKind.TOOL_EVENT:
        topic = names.tool_events
        record = ToolEventV1(agent_id=agent, ts=ts, tool="rpc", error="timeout", event_id=event)
    elif kind is EntryKind.TRANSCRIPT:
        topic = names.transcripts
        line = {"role": "user", "content": f"why did rpc {n} time out?"}
        record = TranscriptV1(agent_id=agent, ts=ts, line=line, turn_id=event, event_id=event)
    elif kind is EntryKind.OUTCOME:
        topic = names.outcomes
        record = OutcomeV1(agent_id=agent, ts=ts, outcome="positive", run_id=event)
    elif kind is EntryKind.FACT:
        topic = names.facts
        record = FactV1(
            agent_id=agent, ts=ts, subject="node-7", predicate="state", object=f"s{n}",
            valid_from=n, event_id=event,
        )  # fmt: skip
    else:
        topic = names.commands
        record = CommandV1(agent_id=agent, command="configure", config={"top_k": 7}, event_id=event)
    return topic, record.dumps_json()


JOURNALED = [
    EntryKind.EPISODE,
    EntryKind.TOOL_EVENT,
    EntryKind.TRANSCRIPT,
    EntryKind.OUTCOME,
    EntryKind.FACT,
    EntryKind.COMMAND,
]


@pytest.mark.parametrize("kind", JOURNALED, ids=[k.value for k in JOURNALED])
async def test_an_input_without_its_tenant_s_key_is_dead_lettered_counted_and_not_journaled(
    deployment: Deployment,
    kind: EntryKind,
    read_topic: Any,
    scrape: Callable[..., Awaitable[str]],
    eventually: Any,
) -> None:
    refused_before, letters_before = await counts(scrape)
    sent: dict[str, Coords] = {}
    for n, key in enumerate(("none", "revoked", "rival", "tenant")):
        topic, payload = payload_of(kind, deployment.agent, n, deployment.topics)
        sent[key] = await deployment.produce(topic, payload, None if key == "none" else key)

    letters = await dead_letters(deployment, read_topic, {sent[key]: key for key in REFUSED})
    for key, outcome in REFUSED.items():
        letter = letters[sent[key]]
        assert (letter["reason"], letter["field"], letter["agent_id"]) == (
            "unauthorized",
            "api_key",
            deployment.agent,
        ), key
        assert letter["detail"].startswith(outcome), (key, letter["detail"])
    # The tenant's own record is journaled; the refused ones, read before it from
    # the same partition, never are.
    journaled = await journaled_sources(deployment, read_topic, until=sent["tenant"])
    assert not journaled & {sent[key] for key in REFUSED}

    async def counted() -> bool:
        return await counts(scrape) == (refused_before + 3, letters_before + 3)

    await eventually(counted, timeout=20)


async def _no_reply(
    deployment: Deployment, read_topic: Any, topic: str, correlations: set[str]
) -> None:
    """Nothing on `topic` answers any of `correlations` (read a moment after the
    requests' dead letters, which the worker sends before any reply)."""
    await asyncio.sleep(1.5)
    records = await read_topic(
        deployment.settings.bootstrap_servers, topic, until=lambda rs: False, timeout=2
    )
    answered = {orjson.loads(r.value).get("correlation_id") for r in records}
    assert not answered & correlations


@pytest.mark.parametrize("request_kind", ["recall", "fact_query"])
async def test_a_request_is_answered_only_for_its_key_and_only_on_its_key_s_topic(
    deployment: Deployment,
    request_kind: str,
    read_topic: Any,
    scrape: Callable[..., Awaitable[str]],
    eventually: Any,
) -> None:
    agent = deployment.agent
    topics = deployment.topics
    topic = topics.recall_requests if request_kind == "recall" else topics.fact_queries
    refused_before, letters_before = await counts(scrape)

    def request(reply_to: str, correlation_id: str) -> bytes:
        if request_kind == "recall":
            return RecallRequestV1(
                agent_id=agent, query="rpc timed out", reply_to=reply_to,
                correlation_id=correlation_id,
            ).dumps_json()  # fmt: skip
        return FactQueryV1(
            agent_id=agent, query="valid_at", block=1, reply_to=reply_to,
            correlation_id=correlation_id,
        ).dumps_json()  # fmt: skip

    async def ask(client: GrimoireClient) -> Any:
        if request_kind == "recall":
            return await client.recall(agent, "rpc timed out", k=3, timeout=20)
        return await client.facts_valid_at(agent, 1, timeout=20)

    async with deployment.client("tenant") as tenant, deployment.client("rival") as rival:
        # The tenant's own key: answered on its own reply topic.
        await ask(tenant)
        # Another tenant's key, on its own reply topic: refused there.
        with pytest.raises(RecallUnauthorized, match="forbidden"):
            await ask(rival)
        # No key, or a revoked one, naming the tenant's reply topic: nothing is
        # written there (not even an error); the tenant's key naming the rival's
        # reply topic: refused, nothing is written to the rival's.
        plan = {
            "none": (None, tenant.reply_topic),
            "revoked": ("revoked", tenant.reply_topic),
            "elsewhere": ("tenant", rival.reply_topic),
        }
        sent: dict[Coords, str] = {}
        correlations: dict[str, str] = {}
        for name, (key, reply_to) in plan.items():
            correlations[name] = f"{name}-{uuid.uuid4().hex}"
            coords = await deployment.produce(topic, request(reply_to, correlations[name]), key)
            sent[coords] = name
        letters = await dead_letters(deployment, read_topic, sent)
        by_name = {sent[coords]: letter for coords, letter in letters.items()}
        for name, letter in by_name.items():
            assert (letter["reason"], letter["agent_id"]) == ("unauthorized", agent), name
        assert by_name["none"]["detail"].startswith("unauthenticated")
        assert by_name["revoked"]["detail"].startswith("unauthenticated")
        assert by_name["elsewhere"]["detail"].startswith("forbidden")
        assert by_name["elsewhere"]["field"] == "reply_to"
        await _no_reply(
            deployment,
            read_topic,
            tenant.reply_topic,
            {correlations["none"], correlations["revoked"]},
        )
        await _no_reply(deployment, read_topic, rival.reply_topic, {correlations["elsewhere"]})

    async def counted() -> bool:
        # The rival's request and the three above, each refused and dead-lettered.
        return await counts(scrape) == (refused_before + 4, letters_before + 4)

    await eventually(counted, timeout=20)


async def test_metrics_name_agents_only_to_a_key_that_reaches_them(
    deployment: Deployment, scrape: Callable[..., Awaitable[str]], eventually: Any
) -> None:
    async with deployment.client("tenant") as tenant:
        await tenant.publish_episode(EpisodeV1(agent_id=deployment.agent, ts=T0, text="disk full"))

        async def ingested() -> bool:
            answer = await tenant.recall(deployment.agent, "disk full", k=1, record_usage=False)
            return bool(answer.items)

        await eventually(ingested, timeout=60)
    named = f'agent="{deployment.agent}"'

    async def listed() -> bool:
        return named in await scrape("admin")

    await eventually(listed, timeout=20)
    assert named in await scrape("tenant")
    for key in (None, "rival"):
        text = await scrape(key)
        assert 'agent="' not in text, key
        assert sample(text, KAFKA_REFUSALS) > 0  # the deployment-wide series stay


async def test_a_clade_copy_is_read_only_with_a_key_that_reaches_its_sibling(
    deployment: Deployment, eventually: Any
) -> None:
    """Clades under tenant keys (docs/clades.md): the tenant's agent publishes to a
    clade of the tenant's agents; the sibling's recall with the tenant's key returns
    the copy, with another tenant's key it is refused, and another tenant's agent
    (outside the clade) holds no copy. A publish with another tenant's key is
    dead-lettered, never journaled: nothing is shared."""
    from grimoire.streams.clade.copies import copy_id
    from grimoire.streams.model.ids import memory_id
    from grimoire.tables.clade.store import RedisCladeRegistry, RedisPublishedStore
    from grimoire.tables.keyspace import Keyspace

    d = deployment
    prefix = d.settings.broker.topic_prefix
    keys = Keyspace(prefix)
    origin = d.agent
    sibling = origin.rsplit("/", 1)[0] + "/golem-clade-2"
    clade = f"auth-{uuid.uuid4().hex[:6]}"
    registry = RedisCladeRegistry(d.redis, prefix)
    for agent in (origin, sibling):
        await registry.join(clade, agent)
    text = "never rotate the signing key during a deploy: half the fleet keeps the old one"
    async with d.client("tenant") as tenant, d.client("rival") as rival:
        ts = T0 + 50_000
        for agent, event_id, body, kind in (
            (sibling, "clade-hello", "the second golem reports for duty", "episode"),
            (origin, "clade-warn", text, "warning"),
        ):
            await tenant.publish_episode(
                EpisodeV1(agent_id=agent, ts=ts, text=body, event_id=event_id, kind=kind,
                          importance=0.9)
            )  # fmt: skip
        original = memory_id(origin, "clade-warn", 0, ts)

        async def decided() -> bool:
            return await d.redis.hexists(keys.decided(origin), original) and bool(
                await d.redis.hlen(keys.decided(sibling))
            )

        await eventually(decided, timeout=60)
        # another tenant's key cannot publish the tenant's memory
        await rival.publish(origin, original, event_id="rival-publish")
        await tenant.publish(origin, original, event_id="tenant-publish")
        copy = copy_id(sibling, origin, original)

        async def shared() -> bool:
            return bool(await d.redis.exists(keys.memory(sibling, copy)))

        await eventually(shared, timeout=60)
        answer = await tenant.recall(sibling, "may I rotate the signing key mid-deploy?", k=5)
        assert [i.origin for i in answer.items if i.id == copy] == [
            {"agent_id": origin, "memory_id": original}
        ]
        with pytest.raises(RecallUnauthorized, match="forbidden"):
            await rival.recall(sibling, "may I rotate the signing key mid-deploy?", k=5)
        mine = await rival.recall(d.rival_agent, "may I rotate the signing key mid-deploy?", k=5)
        assert all(item.origin is None for item in mine.items)
        assert not await d.redis.exists(
            keys.memory(d.rival_agent, copy_id(d.rival_agent, origin, original))
        )
        # only the tenant's publish was journaled and applied: one route, one recipient
        held = (await RedisPublishedStore(d.redis, prefix).published(origin))[original]
        assert held.recipients == (sibling,)
