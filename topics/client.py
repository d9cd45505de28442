"""The client SDK: publish events and `await recall(...)` on a private reply topic.

The reply topic has one partition and is read by a plain assigned consumer (no
consumer-group join), so the first reply arrives in milliseconds.

With a tenant key (`api_key`), every record the client publishes carries it as the
`grimoire-api-key` header (never in the payload), and the reply topic is the key's
own: `{prefix}.replies.<key id>-<client id>`. Where workers check keys, a request
naming a reply topic that is not its key's is refused and answered nowhere, so a
client can neither read another's answers nor have errors written to its topic by
someone else (docs/security.md).

Light on purpose: `pip install 'grimoire[client]'` brings aiokafka and orjson only, so
everything imported here (and by `declarations`, `schemas`, `options`) must stay free of
Faust, Redis, numpy and the embedding stack (tests/integration/test_light_client.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Final

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from grimoire.streams.exceptions import GrimoireError
from grimoire.streams.trust.tenancy import parse_token
from grimoire.topics.declarations import TopicNames, ensure_topics
from grimoire.topics.offsets import true_end_offsets
from grimoire.topics.options import RecallBudgets, RecallFilters, RecallMode, RecallState
from grimoire.topics.schemas import (
    CommandV1,
    EpisodeV1,
    FactQueryV1,
    FactV1,
    MaintenanceCommandV1,
    OutcomeV1,
    RecallItemV1,
    RecallRequestV1,
    ToolEventV1,
    TranscriptV1,
)
from grimoire.topics.security import KafkaSecurity

__all__ = [
    "API_KEY_HEADER",
    "CLADE_COMMANDS",
    "ClientError",
    "FactNeighbour",
    "FactVersion",
    "GrimoireClient",
    "RecallAnswer",
    "RecallFailed",
    "RecallTimeout",
    "RecallUnauthorized",
    "clade_command",
    "key_owns_reply_topic",
    "keyed_client_id",
]

logger = logging.getLogger(__name__)


class ClientError(GrimoireError):
    """Root of the SDK's errors."""


class RecallTimeout(ClientError):
    pass


class RecallFailed(ClientError):
    """The worker rejected the request; `str(exc)` carries its reason."""


class RecallUnauthorized(RecallFailed):
    """The worker refused the request's tenant key (none, wrong, revoked, or one
    that does not reach the agent)."""


# How the worker's error reply names a refused key (streams/inbound/validators.py).
_UNAUTHORIZED = "unauthorized"

#: The Kafka record header a producer's tenant key (`gmk_…`) travels in.
API_KEY_HEADER: Final = "grimoire-api-key"
# Between a key id (hex) and the client's own name in a reply topic: not a hex
# digit, so one key id is never a prefix of another's part.
_OWNER_SEPARATOR: Final = "-"


def keyed_client_id(api_key: str | None, client_id: str) -> str:
    """The client part of a reply topic's name: `<key id>-<client id>` for a client
    with a well-formed tenant key (the topic is then that key's), `client_id` as it
    is otherwise."""
    parsed = parse_token(api_key) if api_key else None
    if parsed is None:
        return client_id
    owned = f"{parsed[0]}{_OWNER_SEPARATOR}"
    return client_id if client_id.startswith(owned) else f"{owned}{client_id}"


def key_owns_reply_topic(key_id: str, reply_to: str, reply_namespace: str) -> bool:
    """Whether `reply_to` is one of the key's reply topics:
    `{reply_namespace}<key id>-<anything>`."""
    return reply_to.startswith(f"{reply_namespace}{key_id}{_OWNER_SEPARATOR}")


@dataclass(frozen=True, slots=True)
class RecallAnswer:
    correlation_id: str
    agent_id: str
    items: tuple[RecallItemV1, ...]
    watermark: int | None
    timings_ms: dict[str, float]
    budget: dict[str, int]
    mode: str | None = None
    as_of: int | None = None
    learning: dict[str, Any] | None = None  # the weights used, with `explain`


@dataclass(frozen=True, slots=True)
class FactVersion:
    """One version of a fact as a fact query answers it (entity names normalised;
    blocks for validity, event-time ms for when it was known and superseded)."""

    fact_id: str
    subject: str
    predicate: str
    object: str
    object_is_entity: bool
    valid_from: int
    valid_until: int | None
    known_from: int
    superseded_at: int | None
    source_event_id: str
    # 1.0 for what the agent asserted itself; an inherited fact carries the
    # successor discount (an older worker's reply has none: 1.0).
    confidence: float = 1.0

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> FactVersion:
        fields = {name: data.get(name) for name in cls.__slots__ if name != "confidence"}
        return cls(**fields, confidence=float(data.get("confidence", 1.0)))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class FactNeighbour:
    entity: str
    hops: int
    via: tuple[str, ...]  # the facts that reach it from the layer before


def _answer(payload: dict[str, Any]) -> RecallAnswer:
    items = tuple(RecallItemV1.from_wire(item) for item in payload.get("items") or ())
    return RecallAnswer(
        correlation_id=payload["correlation_id"],
        agent_id=payload.get("agent_id", ""),
        items=items,
        watermark=payload.get("watermark"),
        timings_ms=payload.get("timings_ms") or {},
        budget=payload.get("budget") or {},
        mode=payload.get("mode"),
        as_of=payload.get("as_of"),
        learning=payload.get("learning"),
    )


#: What a `publish` or `unpublish` command may be.
CLADE_COMMANDS: Final = ("publish", "unpublish")


def clade_command(
    command: str,
    agent_id: str,
    memory_id: str,
    *,
    clade: str | None = None,
    event_id: str | None = None,
    ts: int | None = None,
    api_key: str | None = None,
) -> CommandV1:
    """The `publish` or `unpublish` command for one of the agent's memories (the
    worker's command parser judges the clade's name). Without `event_id`, a fresh
    one: publishing, withdrawing and publishing again are three commands, never
    one deduplicated. Without `ts`, now: the event time the shares carry."""
    if command not in CLADE_COMMANDS:
        raise ValueError(f"a clade command is one of {CLADE_COMMANDS}, got {command!r}")
    for name, value in (("agent_id", agent_id), ("memory_id", memory_id)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{command}: {name} must be a non-empty string, got {value!r}")
    if clade is not None and (not isinstance(clade, str) or not clade.strip()):
        raise ValueError(f"{command}: clade must be a clade's name or None, got {clade!r}")
    return CommandV1(
        agent_id=agent_id,
        command=command,
        memory_id=memory_id,
        clade=clade,
        ts=ts if ts is not None else int(time.time() * 1000),
        event_id=event_id or f"sdk-{uuid.uuid4().hex}",
        api_key=api_key,
    )


class GrimoireClient:
    def __init__(
        self,
        bootstrap_servers: str,
        topic_prefix: str = "grimoire",
        *,
        client_id: str | None = None,
        partitions: int = 4,
        api_key: str | None = None,
        security: KafkaSecurity | None = None,
    ) -> None:
        """`api_key` is the tenant key (`gmk_…`, from `grimoire keys create`) put on
        every record this client publishes (the `grimoire-api-key` header); needed
        where the workers check keys (`GRIMOIRE_AUTH_ENABLED`), and it names the
        reply topic (`{prefix}.replies.<key id>-<client id>`). `security`: SASL and
        TLS for a broker that wants them (None: plaintext)."""
        self._bootstrap = bootstrap_servers
        self._api_key = api_key
        self._security = security or KafkaSecurity()
        self.topics = TopicNames(topic_prefix)
        self.client_id = client_id or uuid.uuid4().hex[:12]
        self.reply_topic = self.topics.reply_topic(keyed_client_id(api_key, self.client_id))
        self._partitions = partitions
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._replies: TopicPartition | None = None

    async def __aenter__(self) -> GrimoireClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        topics = {name: self._partitions for name in self.topics.all_partitioned()}
        topics[self.reply_topic] = 1
        await ensure_topics(self._bootstrap, topics, security=self._security)
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self._bootstrap, linger_ms=1, **self._security.aiokafka_kwargs()
        )
        await self._producer.start()
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self._bootstrap,
            enable_auto_commit=False,
            fetch_max_wait_ms=20,
            **self._security.aiokafka_kwargs(),
        )
        await self._consumer.start()
        partition = TopicPartition(self.reply_topic, 0)
        # Positioned at the end, found by reading (tansu's ListOffsets undercounts): a
        # reply produced before the first fetch is not skipped, none from before is new.
        await true_end_offsets(self._consumer, [partition], paused=True)
        # Fetched only while a request waits for its reply: an idle client would
        # otherwise poll the broker every fetch wait (~100 fetches/s on tansu, a few
        # per cent of a core between the client and the broker, per client).
        # Resuming wakes the fetcher at once; the position stays where it was, so
        # nothing produced in between is skipped.
        self._replies = partition
        self._consumer.pause(partition)
        self._reader = asyncio.create_task(self._read_replies(), name="grimoire-replies")

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        for future in self._pending.values():
            future.cancel()
        if self._consumer is not None:
            await self._consumer.stop()
        if self._producer is not None:
            await self._producer.stop()

    async def _read_replies(self) -> None:
        assert self._consumer is not None
        async for message in self._consumer:
            try:
                payload = orjson.loads(message.value or b"")
            except orjson.JSONDecodeError:
                logger.warning("unreadable reply at offset %s", message.offset)
                continue
            future = self._pending.pop(str(payload.get("correlation_id")), None)
            if future is not None and not future.done():
                future.set_result(payload)

    async def wait_until_ready(
        self, *, timeout: float = 120.0, probe_agent: str = "_probe"
    ) -> None:
        """Block until a worker answers a recall: the whole pipeline is up. Where
        workers check keys, the client needs a key: a request without a good one
        is answered nowhere (a key that does not reach `probe_agent` is answered
        with a refusal, which counts as up)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise RecallTimeout(f"no worker answered within {timeout}s")
            try:
                await self.recall(probe_agent, "readiness probe", k=1, timeout=min(2.0, remaining))
                return
            except RecallUnauthorized:
                return  # refused, but answered: the pipeline is up
            except RecallTimeout:
                continue

    async def publish_raw(
        self,
        topic: str,
        key: str,
        value: bytes,
        *,
        wait: bool = True,
        api_key: str | None = None,
    ) -> None:
        """Publish bytes keyed by agent id, with `api_key` (default: the client's)
        as the `grimoire-api-key` header. With wait=False, return once the record
        is queued (the producer batches); `flush()` waits for everything queued."""
        assert self._producer is not None, "client not started"
        token = api_key or self._api_key
        headers = [(API_KEY_HEADER, token.encode())] if token else None
        if wait:
            await self._producer.send_and_wait(
                topic, value=value, key=key.encode(), headers=headers
            )
        else:
            await self._producer.send(topic, value=value, key=key.encode(), headers=headers)

    async def flush(self) -> None:
        assert self._producer is not None, "client not started"
        await self._producer.flush()

    async def publish_episode(self, episode: EpisodeV1) -> None:
        await self.publish_raw(self.topics.episodes, episode.agent_id, episode.dumps_json())

    async def publish_tool_event(self, event: ToolEventV1) -> None:
        await self.publish_raw(self.topics.tool_events, event.agent_id, event.dumps_json())

    async def publish_transcript(self, line: TranscriptV1) -> None:
        await self.publish_raw(self.topics.transcripts, line.agent_id, line.dumps_json())

    async def publish_outcome(self, outcome: OutcomeV1) -> None:
        await self.publish_raw(self.topics.outcomes, outcome.agent_id, outcome.dumps_json())

    async def send_command(self, command: CommandV1) -> None:
        """Retract a source event, forget an agent, pin, unpin, publish or unpublish a
        memory, configure the agent: applied at the command's place in the agent's
        journal (watch memory-events for it). A command's own `api_key` (the HTTP
        API's caller's) goes in its header instead of the client's; the payload
        never carries it."""
        if command.api_key is None:
            await self.publish_raw(self.topics.commands, command.agent_id, command.dumps_json())
            return
        key, command = command.api_key, replace(command, api_key=None)
        await self.publish_raw(
            self.topics.commands, command.agent_id, command.dumps_json(), api_key=key
        )

    async def publish(
        self,
        agent_id: str,
        memory_id: str,
        *,
        clade: str | None = None,
        event_id: str | None = None,
        ts: int | None = None,
        api_key: str | None = None,
    ) -> CommandV1:
        """Share one of the agent's memories with its clade siblings: a `publish`
        command, journaled and applied at its place (each sibling then holds a copy
        with provenance `clade`). `clade`: only that clade (one the agent belongs
        to); None: every clade it belongs to. Membership itself is the deployment's
        (an admin key, `PUT /v1/clades/{clade}/members/{agent}`), never a command.
        `api_key`: the command's own key instead of the client's. Returns the
        command as sent (its `event_id`: the one given, else a fresh one)."""
        return await self._clade_command(
            "publish", agent_id, memory_id, clade, event_id, ts, api_key
        )

    async def unpublish(
        self,
        agent_id: str,
        memory_id: str,
        *,
        clade: str | None = None,
        event_id: str | None = None,
        ts: int | None = None,
        api_key: str | None = None,
    ) -> CommandV1:
        """Withdraw a published memory: its siblings' copies are removed (from
        `clade` only, or from every clade it went to when None). The same
        arguments and answer as `publish`."""
        return await self._clade_command(
            "unpublish", agent_id, memory_id, clade, event_id, ts, api_key
        )

    async def _clade_command(
        self,
        command: str,
        agent_id: str,
        memory_id: str,
        clade: str | None,
        event_id: str | None,
        ts: int | None,
        api_key: str | None,
    ) -> CommandV1:
        sent = clade_command(
            command, agent_id, memory_id, clade=clade, event_id=event_id, ts=ts, api_key=api_key
        )
        await self.send_command(sent)
        return replace(sent, api_key=None)

    async def request_maintenance(self, agent_id: str, *, compact: bool = False) -> None:
        """Ask the worker owning the agent to run what is due now ("compact now" with
        `compact`); the block timer does this on its own every block interval."""
        command = MaintenanceCommandV1(
            agent_id=agent_id, reason="manual", force_compaction=compact or None
        )
        await self.publish_raw(self.topics.maintenance, agent_id, command.dumps_json())

    async def assert_fact(self, fact: FactV1) -> None:
        """Assert a fact: journaled, it closes the agent's active fact with the same
        subject and predicate. A `retract` command naming its `event_id` removes
        it and restores what it superseded."""
        await self.publish_raw(self.topics.facts, fact.agent_id, fact.dumps_json())

    async def facts_valid_at(
        self,
        agent_id: str,
        block: int,
        *,
        subject: str | None = None,
        predicate: str | None = None,
        timeout: float = 10.0,
    ) -> list[FactVersion]:
        """The agent's facts that hold at `block`, as known now."""
        payload = await self._fact_query(
            agent_id, "valid_at", timeout, block=block, subject=subject, predicate=predicate
        )
        return [FactVersion.from_wire(f) for f in payload.get("facts") or ()]

    async def facts_as_known_at(
        self,
        agent_id: str,
        ts_ms: int,
        *,
        block: int | None = None,
        subject: str | None = None,
        predicate: str | None = None,
        timeout: float = 10.0,
    ) -> list[FactVersion]:
        """What the agent knew at event time `ts_ms` (closures recorded later do
        not count); with `block`, only what held at that block as known then."""
        payload = await self._fact_query(
            agent_id,
            "as_known_at",
            timeout,
            ts=ts_ms,
            block=block,
            subject=subject,
            predicate=predicate,
        )
        return [FactVersion.from_wire(f) for f in payload.get("facts") or ()]

    async def fact_neighbours(
        self,
        agent_id: str,
        entity: str,
        hops: int = 1,
        *,
        block: int | None = None,
        timeout: float = 10.0,
    ) -> list[FactNeighbour]:
        """Entities within `hops` links of `entity` over active facts (or those
        valid at `block`), nearest first."""
        payload = await self._fact_query(
            agent_id, "neighbours", timeout, entity=entity, hops=hops, block=block
        )
        return [
            FactNeighbour(n["entity"], int(n["hops"]), tuple(n.get("via") or ()))
            for n in payload.get("neighbours") or ()
        ]

    async def _fact_query(
        self, agent_id: str, query: str, timeout: float, **fields: Any
    ) -> dict[str, Any]:
        correlation_id = uuid.uuid4().hex
        request = FactQueryV1(
            agent_id=agent_id,
            query=query,
            reply_to=self.reply_topic,
            correlation_id=correlation_id,
            **fields,
        )
        return await self._request(
            self.topics.fact_queries, agent_id, correlation_id, request.dumps_json(), timeout
        )

    async def _request(
        self, topic: str, agent_id: str, correlation_id: str, value: bytes, timeout: float
    ) -> dict[str, Any]:
        """Publish one request and await its reply on the reply topic: no reply within
        `timeout` raises `RecallTimeout`, an error reply `RecallFailed` (or
        `RecallUnauthorized` for a refused key)."""
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._awaiting(correlation_id, future)
        try:
            await self.publish_raw(topic, agent_id, value)
            payload = await asyncio.wait_for(future, timeout)
        except TimeoutError as exc:
            raise RecallTimeout(f"no reply for {correlation_id} within {timeout}s") from exc
        finally:
            self._settled(correlation_id)
        error = payload.get("error")
        if error:
            if str(error).startswith(_UNAUTHORIZED):
                raise RecallUnauthorized(error)
            raise RecallFailed(error)
        return payload

    def _awaiting(self, correlation_id: str, future: asyncio.Future[dict[str, Any]]) -> None:
        """A reply is awaited: the reply topic is fetched while any is."""
        if not self._pending and self._consumer is not None and self._replies is not None:
            self._consumer.resume(self._replies)
        self._pending[correlation_id] = future

    def _settled(self, correlation_id: str) -> None:
        self._pending.pop(correlation_id, None)
        if not self._pending and self._consumer is not None and self._replies is not None:
            self._consumer.pause(self._replies)

    async def recall(
        self,
        agent_id: str,
        query: str,
        *,
        k: int | None = None,
        as_of: int | None = None,
        filters: RecallFilters | None = None,
        budgets: RecallBudgets | None = None,
        state: RecallState | None = None,
        mode: RecallMode | None = None,
        explain: bool | None = None,
        expand_episodes: bool | None = None,
        record_usage: bool | None = None,
        serving_run_id: str | None = None,
        include_causal: bool | None = None,
        timeout: float = 10.0,
    ) -> RecallAnswer:
        """Ask and await the reply. `filters`, `budgets` and `state` are the typed options
        of `grimoire.topics.options`; None (or an empty one) leaves the worker's default.
        `k` is shorthand for `budgets.max_items`. `serving_run_id` names the run the
        answer is acted on in: the run's `run_ended` outcome credits what it returned
        and teaches the agent's rerank weights. A request the worker rejects raises
        `RecallFailed` with its reason; no answer within `timeout` raises `RecallTimeout`.
        """
        for name, value, expected in (
            ("filters", filters, RecallFilters),
            ("budgets", budgets, RecallBudgets),
            ("state", state, RecallState),
        ):
            # Typed only: a dict would go out unchecked, which is what the types replace.
            if value is not None and not isinstance(value, expected):
                raise TypeError(
                    f"recall({name}=...) takes a {expected.__name__}, got {type(value).__name__}"
                )
        correlation_id = uuid.uuid4().hex
        request = RecallRequestV1(
            agent_id=agent_id,
            query=query,
            reply_to=self.reply_topic,
            correlation_id=correlation_id,
            k=k,
            as_of=as_of,
            filters=_section(filters),
            budgets=_section(budgets),
            state=_section(state),
            mode=mode,
            explain=explain,
            expand_episodes=expand_episodes,
            record_usage=record_usage,
            serving_run_id=serving_run_id,
            include_causal=include_causal,
        )
        payload = await self._request(
            self.topics.recall_requests, agent_id, correlation_id, request.dumps_json(), timeout
        )
        return _answer(payload)


def _section(options: RecallFilters | RecallBudgets | RecallState | None) -> dict[str, Any] | None:
    """The wire object of one option section; an empty one is left out altogether."""
    return (options.to_wire() or None) if options is not None else None
