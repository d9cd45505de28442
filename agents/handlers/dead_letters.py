"""Turning a rejection into a dead-letter record."""

from __future__ import annotations

import logging

from grimoire.agents.ports import UNKNOWN_AGENT, EventSink, InputMessage, payload_preview
from grimoire.streams.inbound.events import Rejection
from grimoire.topics.schemas import DeadLetterV1

logger = logging.getLogger(__name__)


async def dead_letter(
    sink: EventSink, topic: str, message: InputMessage, rejection: Rejection
) -> None:
    record = DeadLetterV1(
        reason=rejection.reason,
        detail=rejection.detail,
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
        rejection.detail,
    )
    await sink.send(topic, rejection.agent_id or UNKNOWN_AGENT, record.dumps_json())
