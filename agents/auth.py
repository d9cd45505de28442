"""Tenant keys on the Kafka side: which key a record presents, whether it reaches
the agent it names, whether the reply topic a request names is its key's, and
keeping the secret out of what is stored or published.

Every input (episodes, tool events, transcripts, outcomes, facts, commands, recall
requests, fact queries) carries its key as the `grimoire-api-key` record header
(what the SDK and the HTTP API send) or as the payload's `api_key` field (the
payload wins when both are there). A refused record becomes an `unauthorized`
rejection (dead-lettered by the caller, and counted in the metrics hash). The
secret never travels further: dead-letter previews are redacted and inputs are
journaled without their `api_key`.

A request answered on a reply topic (recall, fact query) must also name one of its
key's reply topics, `{reply namespace}<key id>-…` (an admin key may name any in the
namespace): otherwise anyone could have the workers write answers, or error
replies, to another client's topic. An error reply goes only where that holds
(`may_reply`), so a request without a good key is answered nowhere.
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
from grimoire.streams.trust.tenancy import TOKEN_PREFIX, AuthDecision, AuthOutcome, TenantScope
from grimoire.tables.ports.trust import AuthMetrics
from grimoire.tables.trust.api_keys import SURFACE_KAFKA, Authenticator, Identity
from grimoire.topics.client import API_KEY_HEADER, key_owns_reply_topic

__all__ = [
    "API_KEY_FIELD",
    "API_KEY_HEADER",
    "Identities",
    "authorize",
    "authorize_request",
    "identity_of",
    "may_reply",
    "presented_key",
    "redacted",
    "without_api_key",
]

logger = logging.getLogger(__name__)

API_KEY_FIELD: Final = "api_key"
REPLY_TO_FIELD: Final = "reply_to"

#: Who each token presented in one batch is: a batch of one producer's records
#: costs one look-up of its key, whatever the authenticator's cache holds (an
#: unknown key is never cached there).
Identities = dict[str, Identity]

# A token's secret, wherever it sits in a payload (also in one that is not JSON):
# the key id stays readable, the secret does not.
_SECRET_IN_TOKEN: Final = re.compile(
    re.escape(TOKEN_PREFIX.encode()) + rb"([0-9a-f]{1,64})\.[A-Za-z0-9_-]+"
)
_NOT_A_STRING: Final = Identity(
    AuthDecision(AuthOutcome.UNAUTHENTICATED, None, "'api_key' must be a string"),
    None,
    TenantScope(),
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


async def identity_of(
    authenticator: Authenticator, key: object, identities: Identities | None = None
) -> Identity:
    """Who presents `key` (as `presented_key` found it), looked up once per batch
    when `identities` is the batch's memo."""
    if key is not None and not isinstance(key, str):
        return _NOT_A_STRING
    token = key or ""
    if identities is not None and token in identities:
        return identities[token]
    found = await authenticator.identify(token or None)
    if identities is not None:
        identities[token] = found
    return found


async def authorize(
    authenticator: Authenticator | None,
    metrics: AuthMetrics | None,
    message: InputMessage,
    data: Mapping[str, Any],
    agent_id: str,
    *,
    identities: Identities | None = None,
) -> Rejection | None:
    """None when the record may act for `agent_id` (or checks are off); otherwise
    the `unauthorized` rejection to dead-letter, already counted."""
    if authenticator is None or not authenticator.enabled:
        return None
    identity = await identity_of(authenticator, presented_key(data, message), identities)
    decision = identity.decision_for(agent_id)
    if decision.ok:
        return None
    return await _refused(metrics, decision, message, agent_id, API_KEY_FIELD)


async def authorize_request(
    authenticator: Authenticator | None,
    metrics: AuthMetrics | None,
    message: InputMessage,
    data: Mapping[str, Any],
    agent_id: str,
    reply_to: str,
    reply_namespace: str,
) -> Rejection | None:
    """As `authorize`, for a request answered on `reply_to`: its key must also own
    that reply topic (an admin key owns every one in the namespace)."""
    if authenticator is None or not authenticator.enabled:
        return None
    identity = await identity_of(authenticator, presented_key(data, message))
    if identity.refused is not None:
        return await _refused(metrics, identity.refused, message, agent_id, API_KEY_FIELD)
    if not _owns(identity, reply_to, reply_namespace):
        decision = AuthDecision(
            AuthOutcome.FORBIDDEN,
            identity.key_id,
            f"reply_to {reply_to!r} is not a reply topic of API key {identity.key_id} "
            f"({reply_namespace}{identity.key_id}-<client id>)",
        )
        return await _refused(metrics, decision, message, agent_id, REPLY_TO_FIELD)
    decision = identity.decision_for(agent_id)
    if decision.ok:
        return None
    return await _refused(metrics, decision, message, agent_id, API_KEY_FIELD)


async def may_reply(
    authenticator: Authenticator | None,
    message: InputMessage,
    data: Mapping[str, Any],
    reply_to: str,
    reply_namespace: str,
) -> bool:
    """Whether an error reply to this request may go to `reply_to`: always with
    checks off; otherwise only when its key authenticates and owns that topic, so
    nobody without a key has anything written to another client's reply topic."""
    if authenticator is None or not authenticator.enabled:
        return True
    identity = await identity_of(authenticator, presented_key(data, message))
    return identity.authenticated and _owns(identity, reply_to, reply_namespace)


def _owns(identity: Identity, reply_to: str, reply_namespace: str) -> bool:
    if identity.admin:
        return True
    return identity.key_id is not None and key_owns_reply_topic(
        identity.key_id, reply_to, reply_namespace
    )


async def _refused(
    metrics: AuthMetrics | None,
    decision: AuthDecision,
    message: InputMessage,
    agent_id: str,
    field: str,
) -> Rejection:
    """The refusal's rejection, counted."""
    if metrics is not None:
        try:
            await metrics.refused(decision, SURFACE_KAFKA)
        except Exception:
            # A counter must not turn a refusal into a retried batch.
            logger.warning("could not count a refused %s record", message.topic, exc_info=True)
    return Rejection(UNAUTHORIZED, f"{decision.outcome.value}: {decision.detail}", field, agent_id)


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
