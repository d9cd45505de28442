"""Turning a rejection into a dead-letter record."""

from __future__ import annotations

import logging

import orjson

from grimoire.agents.ports import UNKNOWN_AGENT, EventSink, InputMessage, payload_preview
from grimoire.agents.ports.workers import DeadLetterTally
from grimoire.streams.inbound.events import Rejection
from grimoire.topics.schemas import DeadLetterV1

logger = logging.getLogger(__name__)

# A detail may quote the offending value (an unknown kind, a key, a role): kept
# short so a dead letter (and an error reply) stays a small record whatever the
# input held. The payload preview is bounded the same way (ports.payload_preview).
MAX_DETAIL_CHARS = 512


def bounded_detail(detail: str) -> str:
    if len(detail) <= MAX_DETAIL_CHARS:
        return detail
    return detail[: MAX_DETAIL_CHARS - 1] + "…"


async def dead_letter(
    sink: EventSink, topic: str, message: InputMessage, rejection: Rejection
) -> None:
    record = DeadLetterV1(
        reason=rejection.reason,
        detail=bounded_detail(rejection.detail),
        field=rejection.field,
        agent_id=rejection.agent_id,
        source_topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        payload=payload_preview(message.value),
    )
    logger.info(
        "dead-letter %s from %s[%s]@%s: %s",
        rejection.reason,
        message.topic,
        message.partition,
        message.offset,
        bounded_detail(rejection.detail),
    )
    await sink.send(topic, rejection.agent_id or UNKNOWN_AGENT, record.dumps_json())


class CountedDeadLetters:
    """An EventSink that counts what it sends to the dead-letter topic by reason
    (for metrics); counting never stands in the way of the dead letter itself."""

    def __init__(self, inner: EventSink, dead_letters_topic: str, tally: DeadLetterTally) -> None:
        self._inner = inner
        self._topic = dead_letters_topic
        self._tally = tally

    async def send(
        self, topic: str, key: str, value: bytes, *, partition: int | None = None
    ) -> None:
        await self._inner.send(topic, key, value, partition=partition)
        if topic != self._topic:
            return
        try:
            reason = str(orjson.loads(value).get("reason") or "unknown")
            await self._tally.count(reason)
        except Exception:
            logger.warning("a dead letter could not be counted", exc_info=True)

    async def flush(self) -> None:
        await self._inner.flush()
