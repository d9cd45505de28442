"""Tenant keys on the Kafka side: which key a record presents, whether it reaches
the agent it names, and keeping the secret out of what is stored or published.

A recall request or command carries its key as the payload's `api_key` field or
as a `grimoire-api-key` record header (the payload wins when both are there). A
refused record becomes an `unauthorized` rejection (dead-lettered by the caller,
and counted in the metrics hash). The secret never travels further: dead-letter
previews are redacted and commands are journaled without their `api_key`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

import orjson

from grimoire.agents.ports import InputMessage
from grimoire.streams.inbound.events import Rejection
from grimoire.streams.inbound.validators import UNAUTHORIZED
from grimoire.streams.trust.tenancy import TOKEN_PREFIX, AuthDecision, AuthOutcome
from grimoire.tables.trust.api_keys import SURFACE_KAFKA, Authenticator, AuthMetrics

__all__ = [
    "API_KEY_FIELD",
    "API_KEY_HEADER",
    "authorize",
    "presented_key",
    "redacted",
    "without_api_key",
]

logger = logging.getLogger(__name__)

API_KEY_FIELD: Final = "api_key"
API_KEY_HEADER: Final = "grimoire-api-key"

# A token's secret, wherever it sits in a payload (also in one that is not JSON):
# the key id stays readable, the secret does not.
_SECRET_IN_TOKEN: Final = re.compile(
    re.escape(TOKEN_PREFIX.encode()) + rb"([0-9a-f]{1,64})\.[A-Za-z0-9_-]+"
)


def presented_key(data: Mapping[str, Any], message: InputMessage) -> object:
    """The key a record presents: the payload's `api_key` (whatever its type: the
    check refuses a non-string), else the header, else None."""
    value = data.get(API_KEY_FIELD)
    if value is not None:
        return value
    for name, raw in message.headers:
        if name.lower() == API_KEY_HEADER:
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                return raw
    return None


async def authorize(
    authenticator: Authenticator | None,
    metrics: AuthMetrics | None,
    message: InputMessage,
    data: Mapping[str, Any],
    agent_id: str,
) -> Rejection | None:
    """None when the record may act for `agent_id` (or checks are off); otherwise
    the `unauthorized` rejection to dead-letter, already counted."""
    if authenticator is None or not authenticator.enabled:
        return None
    key = presented_key(data, message)
    if key is None or isinstance(key, str):
        decision = await authenticator.check(key, agent_id)
    else:
        decision = AuthDecision(AuthOutcome.UNAUTHENTICATED, None, "'api_key' must be a string")
    if decision.ok:
        return None
    if metrics is not None:
        try:
            await metrics.refused(decision, SURFACE_KAFKA)
        except Exception:
            # A counter must not turn a refusal into a retried batch.
            logger.warning("could not count a refused %s record", message.topic, exc_info=True)
    return Rejection(
        UNAUTHORIZED, f"{decision.outcome.value}: {decision.detail}", API_KEY_FIELD, agent_id
    )


def redacted(message: InputMessage) -> InputMessage:
    """`message` with every token secret in its value masked (for dead letters)."""
    masked = _SECRET_IN_TOKEN.sub(TOKEN_PREFIX.encode() + rb"\1.***", message.value)
    return message if masked == message.value else replace(message, value=masked)


def without_api_key(raw: bytes, data: Mapping[str, Any]) -> bytes:
    """The payload as it is journaled: without its `api_key` (`data` is `raw`
    decoded); unchanged bytes when it carries none."""
    if API_KEY_FIELD not in data:
        return raw
    return orjson.dumps({k: v for k, v in data.items() if k != API_KEY_FIELD})
