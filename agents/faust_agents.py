"""The Faust agents: thin loops that decode Kafka events and call the handlers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import faust

from grimoire.agents.handlers.ingest import IngestHandler
from grimoire.agents.handlers.outcomes import OutcomeHandler
from grimoire.agents.handlers.recall import RecallHandler
from grimoire.agents.maintenance.handler import MaintenanceHandler
from grimoire.agents.ports import InputMessage
from grimoire.streams.model.records import EventType
from grimoire.topics.declarations import TopicNames
from grimoire.topics.schemas import MaintenanceCommandV1

__all__ = ["FaustSink", "HandlerSource", "Handlers", "WorkerTopology", "register_agents"]

logger = logging.getLogger(__name__)

_MAX_BACKOFF_S = 5.0


@dataclass(frozen=True, slots=True)
class Handlers:
    ingest: IngestHandler
    recall: RecallHandler
    outcomes: OutcomeHandler
    maintenance: MaintenanceHandler


class HandlerSource(Protocol):
    """What the Faust agents need from the composition root: the handlers (built
    lazily, on first use) and the agents the block timer fans commands out to."""

    worker_id: str

    async def handlers(self) -> Handlers: ...

    def known_agents(self) -> AsyncIterator[str]: ...


@dataclass(frozen=True, slots=True)
class WorkerTopology:
    """The settings the Faust agents are laid out by."""

    topic_prefix: str
    partitions: int
    embed_batch_size: int
    embed_batch_within_s: float
    recall_concurrency: int
    maintenance_enabled: bool
    block_interval_s: float


class FaustSink:
    """EventSink over the Faust app's producer: raw bytes out, keyed by agent id.

    Values are already serialized, so they skip Faust's per-topic codec layer
    and go straight to the producer, which batches them (a memory event per
    candidate made that layer a visible share of the worker's CPU)."""

    def __init__(self, app: faust.App) -> None:
        self._app = app

    async def send(self, topic: str, key: str, value: bytes) -> None:
        await self._app.producer.send(topic, key.encode(), value, None, None, None)


def _message(event: Any) -> InputMessage:
    msg = event.message
    value = event.value if isinstance(event.value, bytes) else bytes(event.value or b"")
    return InputMessage(value=value, topic=msg.topic, partition=msg.partition, offset=msg.offset)


async def _with_retry(
    what: str, action: Callable[[], Awaitable[Any]], *, attempts: int | None = None
) -> bool:
    """Retry infrastructure failures: skipping would lose events, crashing would stall
    the partition. Bad input never reaches here (it is dead-lettered inside the
    handler). With `attempts`, gives up after that many and returns False."""
    backoff = 0.1
    tried = 0
    while True:
        try:
            await action()
            return True
        except asyncio.CancelledError:
            raise
        except Exception:
            tried += 1
            if attempts is not None and tried >= attempts:
                logger.exception("%s failed %d times; giving up", what, tried)
                return False
            logger.exception("%s failed; retrying in %.1fs", what, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)


def register_agents(app: faust.App, runtime: HandlerSource, settings: WorkerTopology) -> None:
    names = TopicNames(settings.topic_prefix)

    def raw_topic(name: str) -> Any:
        return app.topic(
            name,
            key_serializer="raw",
            value_serializer="raw",
            partitions=settings.partitions,
        )

    def ingest_agent(event_type: EventType, topic_name: str) -> None:
        async def ingest(stream: Any) -> AsyncIterator[None]:
            async for events in stream.take_events(
                settings.embed_batch_size, within=settings.embed_batch_within_s
            ):
                batch = [_message(event) for event in events]

                async def process(batch: list[InputMessage] = batch) -> None:
                    handlers = await runtime.handlers()
                    await handlers.ingest.handle(event_type, batch)

                await _with_retry(f"ingest of {len(batch)} {event_type} events", process)
                yield None

        app.agent(raw_topic(topic_name), name=f"grimoire.ingest.{event_type.value}")(ingest)

    ingest_agent(EventType.EPISODE, names.episodes)
    ingest_agent(EventType.TOOL, names.tool_events)
    ingest_agent(EventType.TRANSCRIPT, names.transcripts)

    async def recall(stream: Any) -> AsyncIterator[None]:
        async for event in stream.events():
            message = _message(event)

            async def process(message: InputMessage = message) -> None:
                handlers = await runtime.handlers()
                await handlers.recall.handle(message)

            # A recall is worth retrying briefly, never at the cost of every later
            # request on the partition: after that the caller gets an error reply.
            if not await _with_retry("recall", process, attempts=3):

                async def answer_failure(message: InputMessage = message) -> None:
                    handlers = await runtime.handlers()
                    await handlers.recall.reply_failure(message, "internal_error")

                await _with_retry("recall failure reply", answer_failure, attempts=3)
            yield None

    async def outcomes(stream: Any) -> AsyncIterator[None]:
        async for event in stream.events():
            message = _message(event)

            async def process(message: InputMessage = message) -> None:
                handlers = await runtime.handlers()
                await handlers.outcomes.handle(message)

            await _with_retry("outcome", process)
            yield None

    app.agent(raw_topic(names.outcomes), name="grimoire.outcomes")(outcomes)

    if settings.maintenance_enabled:
        register_maintenance(app, runtime, settings, raw_topic(names.maintenance))

    async def warm_up() -> None:
        # Load the model and check the index before the first event arrives, so
        # the first recall does not pay for it.
        await runtime.handlers()

    app.task(warm_up)

    app.agent(
        raw_topic(names.recall_requests),
        name="grimoire.recall",
        concurrency=settings.recall_concurrency,
    )(recall)


def register_maintenance(
    app: faust.App, runtime: HandlerSource, settings: WorkerTopology, topic: Any
) -> None:
    """The leader's block timer fans commands out by agent id; the worker owning
    an agent's partition runs them, so one agent is maintained by one worker."""
    names = TopicNames(settings.topic_prefix)

    async def maintenance(stream: Any) -> AsyncIterator[None]:
        async for event in stream.events():
            message = _message(event)

            async def process(message: InputMessage = message) -> None:
                handlers = await runtime.handlers()
                await handlers.maintenance.handle(message)

            # A failed pass stays due (its ledger is not advanced); retrying it
            # here would only hold up the other agents on the partition.
            await _with_retry("maintenance", process, attempts=2)
            yield None

    app.agent(topic, name="grimoire.maintenance")(maintenance)

    async def block_timer() -> None:
        sent = 0
        async for agent_id in runtime.known_agents():
            command = MaintenanceCommandV1(agent_id=agent_id, issued_by=runtime.worker_id)
            await app.producer.send(
                names.maintenance, agent_id.encode(), command.dumps_json(), None, None, None
            )
            sent += 1
        logger.debug("block timer: %d maintenance commands", sent)

    app.timer(interval=settings.block_interval_s, on_leader=True)(block_timer)
