"""Requests answered on the caller's reply topic (recall, fact queries): what one
that cannot be answered gets.

A request that does not parse, or whose tenant key does not reach its agent, is
dead-lettered (its key redacted) and, where it names a valid place to reply,
answered with an error so the caller need not time out. With tenant keys on, a
request must also name one of its key's reply topics (`auth.authorize_request`),
and an error reply goes only to a topic the request's key owns (`auth.may_reply`):
a request without a good key is dead-lettered and answered nowhere, so nobody can
have the workers write to another client's reply topic.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from grimoire.agents.auth import authorize_request, may_reply, redacted
from grimoire.agents.dead_letters import bounded_detail, dead_letter
from grimoire.agents.ports import UNKNOWN_AGENT, InputMessage
from grimoire.agents.ports.replies import AddressedRequest, ReplyingHandler
from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.inbound.events import Rejection, decode_object
from grimoire.streams.inbound.recall_request import reply_address
from grimoire.streams.inbound.validators import Fields, InputLimits

__all__ = ["ErrorReply", "ReplyingHandler", "admitted", "reply_error"]

logger = logging.getLogger(__name__)


RequestT = TypeVar("RequestT", bound=AddressedRequest)

# The error reply's payload from the request's fields, its correlation id and the
# error text; may raise InvalidEvent (no reply is sent then).
ErrorReply = Callable[[Fields, str, str], bytes]


async def admitted(
    handler: ReplyingHandler, parsed: RequestT | Rejection, message: InputMessage
) -> RequestT | None:
    """`parsed` when it may be answered; None when it was rejected or its key was
    refused: then it is dead-lettered and answered with the handler's error reply."""
    rejection: Rejection | None
    authenticator = handler.authenticator
    if isinstance(parsed, Rejection):
        rejection = parsed
    elif authenticator is None or not authenticator.enabled:
        return parsed
    else:
        # Checked on a valid request only: its agent id and reply address are
        # known, so the refusal can be answered where the caller listens (when
        # its key owns that topic).
        rejection = await authorize_request(
            authenticator,
            handler.auth_metrics,
            message,
            decode_object(message.value),
            parsed.agent_id,
            parsed.reply_to,
            handler.topics.reply_namespace,
        )
        if rejection is None:
            return parsed
    await dead_letter(handler.sink, handler.topics.dead_letters, redacted(message), rejection)
    await handler.reply_rejection(message, rejection)
    return None


async def reply_error(
    handler: ReplyingHandler,
    message: InputMessage,
    rejection: Rejection,
    limits: InputLimits,
    payload: ErrorReply,
) -> None:
    """Answer a bad request when it names a valid place to reply. The reply address
    is validated as a good request's is: a bad `reply_to` or `correlation_id` gets
    no reply at all (its dead letter says why), so an error reply can neither land
    outside the reply namespace nor echo a megabyte of correlation id (which the
    producer refuses). With tenant keys on, only a topic the request's key owns
    gets one."""
    try:
        data = Fields(decode_object(message.value), limits)
        reply_to, correlation_id = reply_address(data, handler.topics.reply_namespace)
        error = payload(
            data, correlation_id, f"{rejection.reason}: {bounded_detail(rejection.detail)}"
        )
    except InvalidEvent:
        return
    allowed = await may_reply(
        handler.authenticator, message, data.data, reply_to, handler.topics.reply_namespace
    )
    if not allowed:
        logger.info("no error reply to %s: the request's key does not own it", reply_to)
        return
    await handler.sink.send(reply_to, rejection.agent_id or UNKNOWN_AGENT, error)
