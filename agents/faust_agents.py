"""The Faust agents: thin loops around the handlers.

Topology (every topic keyed and co-partitioned by agent id):

    episodes, tool-events, transcripts, outcomes, maintenance, commands, facts
        → sequencer agents (one per topic) → journal
    journal → the apply agent (the only writer of agents' state)
    recall-requests → the recall agent (a read; its uses go to the journal)
    fact-queries → the fact query agent (a read)
    each ingest worker's block timer → maintenance (a command per agent of the
        journal partitions it holds, when something is due)

A worker's roles (agents/roles.py) pick which of these it runs: `ingest` the
sequencers, the apply agent and the timer; `recall` the two reads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import faust

from grimoire.agents.handlers.facts import FactQueryHandler
from grimoire.agents.handlers.recall import RecallHandler
from grimoire.agents.journal.apply import JournalApplier
from grimoire.agents.journal.sequencer import Sequencer
from grimoire.agents.ports import InputMessage
from grimoire.agents.ports.workers import HandlerSource
from grimoire.agents.roles import ALL_ROLES, WorkerRole
from grimoire.streams.journal.entry import EntryKind
from grimoire.topics.declarations import TopicNames, partition_of
from grimoire.topics.schemas import MaintenanceCommandV1

__all__ = ["FaustSink", "HandlerSource", "Handlers", "WorkerTopology", "register_agents"]

logger = logging.getLogger(__name__)

_MAX_BACKOFF_S = 5.0
_SLOW_APPLY_S = 0.5
# The block timer issues its maintenance commands over this share of the block.
_FANOUT_SHARE = 0.5
_MIN_FANOUT_PAUSE_S = 0.001


@dataclass(frozen=True, slots=True)
class Handlers:
    sequencer: Sequencer
    applier: JournalApplier
    recall: RecallHandler
    facts: FactQueryHandler | None = None  # reads of facts (None: not answered)


@dataclass(frozen=True, slots=True)
class WorkerTopology:
    """The settings the Faust agents are laid out by."""

    topic_prefix: str
    partitions: int
    embed_batch_size: int
    embed_batch_within_s: float
    journal_batch_size: int
    recall_concurrency: int
    maintenance_enabled: bool
    block_interval_s: float
    # What this worker serves (agents/roles.py); every role joins the same group.
    roles: frozenset[WorkerRole] = ALL_ROLES


class FaustSink:
    """EventSink over the Faust app's producer: raw bytes out, keyed by agent id.

    Values are already serialized, so they skip Faust's per-topic codec layer
    and go straight to the producer, which batches them (a memory event per
    candidate made that layer a visible share of the worker's CPU)."""

    def __init__(self, app: faust.App) -> None:
        self._app = app

    async def send(
        self, topic: str, key: str, value: bytes, *, partition: int | None = None
    ) -> None:
        await self._app.producer.send(topic, key.encode(), value, partition, None, None)

    async def flush(self) -> None:
        await self._app.producer.flush()


def _message(event: Any) -> InputMessage:
    msg = event.message
    value = event.value if isinstance(event.value, bytes) else bytes(event.value or b"")
    return InputMessage(
        value=value,
        topic=msg.topic,
        partition=msg.partition,
        offset=msg.offset,
        headers=_headers(getattr(msg, "headers", None)),
    )


def _headers(raw: Any) -> tuple[tuple[str, bytes], ...]:
    """Faust hands headers as a list of (name, value) pairs, a mapping, or None."""
    if not raw:
        return ()
    pairs = raw.items() if isinstance(raw, Mapping) else raw
    found: list[tuple[str, bytes]] = []
    for name, value in pairs:
        key = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
        if isinstance(value, str):
            value = value.encode()
        found.append((key, bytes(value or b"")))
    return tuple(found)


async def _with_retry(
    what: str,
    action: Callable[[], Awaitable[Any]],
    *,
    attempts: int | None = None,
    stopping: Callable[[], bool] = lambda: False,
    on_failure: Callable[[BaseException], Awaitable[None]] | None = None,
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
        except Exception as exc:
            tried += 1
            if attempts is not None and tried >= attempts:
                logger.exception("%s failed %d times; giving up", what, tried)
                return False
            if stopping():
                # Shutting down: what failed stays uncommitted and is read again
                # by whoever owns the partition next; waiting here would hold up
                # the worker's exit for as long as the outage lasts.
                logger.warning("%s failed while stopping; left for the next owner", what)
                raise asyncio.CancelledError() from exc
            logger.exception("%s failed; retrying in %.1fs", what, backoff)
            if on_failure is not None:
                await on_failure(exc)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)


def register_agents(app: faust.App, runtime: HandlerSource, settings: WorkerTopology) -> None:
    names = TopicNames(settings.topic_prefix)

    def stopping() -> bool:
        return bool(app.should_stop)

    def raw_topic(name: str) -> Any:
        return app.topic(
            name,
            key_serializer="raw",
            value_serializer="raw",
            partitions=settings.partitions,
        )

    def sequencer_agent(kind: EntryKind, topic_name: str) -> None:
        async def sequence(stream: Any) -> AsyncIterator[None]:
            async for events in stream.take_events(
                settings.embed_batch_size, within=settings.embed_batch_within_s
            ):
                batch = [_message(event) for event in events]

                async def process(batch: list[InputMessage] = batch) -> None:
                    handlers = await runtime.handlers()
                    await handlers.sequencer.append(kind, batch)

                await _with_retry(
                    f"journaling {len(batch)} {kind} inputs", process, stopping=stopping
                )
                yield None

        app.agent(raw_topic(topic_name), name=f"grimoire.sequence.{kind.value}")(sequence)

    async def apply(stream: Any) -> AsyncIterator[None]:
        # One loop for the worker's journal partitions: per partition, entries are
        # applied in order, and nothing else writes an agent's state.
        async for events in stream.take_events(
            settings.journal_batch_size, within=settings.embed_batch_within_s
        ):
            batch = [_message(event) for event in events]
            by_partition: dict[int, list[InputMessage]] = {}
            for message in batch:
                by_partition.setdefault(message.partition or 0, []).append(message)

            async def process(by_partition: dict[int, list[InputMessage]] = by_partition) -> None:
                handlers = await runtime.handlers()
                for partition in sorted(by_partition):
                    await runtime.catch_up(partition, by_partition[partition][0].offset or 0)
                # Partitions hold disjoint agents, so their folds run side by side
                # (each in its own order): their embedding requests meet in the
                # embedder's queue and share model calls, as one batch would.
                outcomes = await asyncio.gather(
                    *(handlers.applier.apply(by_partition[p]) for p in sorted(by_partition)),
                    return_exceptions=True,
                )
                # Every fold has stopped before a failure is retried: a retry
                # beside a fold still running would be a second writer.
                for outcome in outcomes:
                    if isinstance(outcome, BaseException):
                        raise outcome
                await runtime.applied_through(
                    {p: messages[-1].offset or 0 for p, messages in by_partition.items()}
                )

            async def recover(failure: BaseException) -> None:
                await runtime.recover(failure, _assigned(app, names.journal))

            started = time.perf_counter()
            await _with_retry(
                f"applying {len(batch)} journal entries",
                process,
                stopping=stopping,
                on_failure=recover,
            )
            took = time.perf_counter() - started
            if took > _SLOW_APPLY_S:
                # Everything behind this batch on its partitions waited this long.
                logger.warning(
                    "applying %d journal entries (%s) took %.2fs",
                    len(batch),
                    ", ".join(f"p{p}: {len(m)}" for p, m in sorted(by_partition.items())),
                    took,
                )
            yield None

    if WorkerRole.INGEST in settings.roles:
        sequencer_agent(EntryKind.EPISODE, names.episodes)
        sequencer_agent(EntryKind.TOOL_EVENT, names.tool_events)
        sequencer_agent(EntryKind.TRANSCRIPT, names.transcripts)
        sequencer_agent(EntryKind.OUTCOME, names.outcomes)
        sequencer_agent(EntryKind.COMMAND, names.commands)
        sequencer_agent(EntryKind.FACT, names.facts)
        sequencer_agent(EntryKind.CLADE, names.clade)
        if settings.maintenance_enabled:
            sequencer_agent(EntryKind.MAINTENANCE, names.maintenance)
        app.agent(raw_topic(names.journal), name="grimoire.apply")(apply)
        if settings.maintenance_enabled:
            register_block_timer(app, runtime, settings)

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

    async def warm_up() -> None:
        # Load the model and check the index before the first event arrives, so
        # the first recall does not pay for it. A failure here (Redis not up yet)
        # must not crash the worker: the agents build the handlers on first use.
        async def build() -> None:
            await runtime.handlers()

        await _with_retry("warming up", build, stopping=stopping)

    app.task(warm_up)

    async def fact_queries(stream: Any) -> AsyncIterator[None]:
        # A read, like a recall: retried briefly, then answered with an error.
        async for event in stream.events():
            message = _message(event)

            async def process(message: InputMessage = message) -> None:
                handlers = await runtime.handlers()
                if handlers.facts is not None:
                    await handlers.facts.handle(message)

            if not await _with_retry("fact query", process, attempts=3):

                async def answer_failure(message: InputMessage = message) -> None:
                    handlers = await runtime.handlers()
                    if handlers.facts is not None:
                        await handlers.facts.reply_failure(message, "internal_error")

                await _with_retry("fact query failure reply", answer_failure, attempts=3)
            yield None

    if WorkerRole.RECALL in settings.roles:
        app.agent(
            raw_topic(names.recall_requests),
            name="grimoire.recall",
            concurrency=settings.recall_concurrency,
        )(recall)
        app.agent(raw_topic(names.fact_queries), name="grimoire.fact_queries")(fact_queries)


def _assigned(app: faust.App, topic: str) -> list[int]:
    """The partitions of `topic` this worker owns now."""
    return sorted(tp.partition for tp in app.assignor.assigned_actives() if tp.topic == topic)


def register_block_timer(app: faust.App, runtime: HandlerSource, settings: WorkerTopology) -> None:
    """Every ingest worker's block timer fans a command out per agent of the journal
    partitions it holds, keyed by agent id; each is journaled, and what runs is
    decided at its place in the journal, from the agent's tick (a late or duplicate
    command finds nothing due). The pressure it stamps is the lag of the worker
    that folds those agents, and the fan-out's reads split with the partitions."""
    names = TopicNames(settings.topic_prefix)

    # Per agent: the watermark and pressure of the last command sent. An agent
    # whose watermark has not moved has nothing newly due (its tick is a function
    # of it), unless its last pass was put off under pressure: it is skipped.
    last_sent: dict[str, tuple[int, str]] = {}

    async def block_timer() -> None:
        owned = set(_assigned(app, names.journal))
        if not owned:
            return
        pressure = runtime.pressure()
        moved: list[str] = []
        async for agent_id, watermark in runtime.known_agents():
            # During a rebalance two workers may both send for a partition (the
            # second command finds nothing due) or neither (the next tick sends).
            if partition_of(agent_id, settings.partitions) not in owned:
                continue
            previous = last_sent.get(agent_id)
            if previous is not None and previous == (watermark, "normal"):
                continue
            moved.append(agent_id)
            last_sent[agent_id] = (watermark, pressure)
        # Under normal load, only the agents with something due: in a fleet most
        # agents' ticks cross no decay band and no curator or compaction period,
        # and a command that finds nothing still travels the broker, the journal
        # and the apply loop. Under pressure every command goes out, as the one
        # that records the postponement.
        agents = moved if pressure != "normal" else await runtime.maintenance_wanted(moved)
        # Spread over the first part of the block: all at once, every agent's pass
        # would land on the apply loops together and hold up ingest behind them.
        # When a command is issued decides nothing (what runs is decided at its
        # place in the journal, from the agent's tick).
        pause = settings.block_interval_s * _FANOUT_SHARE / max(1, len(agents))
        for index, agent_id in enumerate(agents):
            command = MaintenanceCommandV1(
                agent_id=agent_id, issued_by=runtime.worker_id, pressure=pressure
            )
            await app.producer.send(
                names.maintenance, agent_id.encode(), command.dumps_json(), None, None, None
            )
            if index + 1 < len(agents) and pause >= _MIN_FANOUT_PAUSE_S:
                await asyncio.sleep(pause)
        logger.debug(
            "block timer: %d maintenance commands (%d agents moved)", len(agents), len(moved)
        )

    app.timer(interval=settings.block_interval_s)(block_timer)
