"""Tenant keys: who may read or command which agents.

An API key is a token `gmk_<key id>.<secret>` handed out once. Only the secret's
SHA-256 is stored: the secret is 256 random bits (`secrets.token_urlsafe(32)`), so
a slow password hash would add latency to every request and no security (nobody
can enumerate 2^256 candidates against a leaked digest). The key id is not secret:
it names the key in listings, logs and revocations.

A key's scope names the agents it reaches: a set of exact agent ids, an agent-id
prefix (a fleet owner: `fleet-a/` reaches `fleet-a/golem-1`), or everything
(`admin`, the operator's key). Agent ids are matched exactly, as everywhere else
(`TENV1` and `tenV1` are two agents).

`decide` is the one judgement: a record (or None for an unknown key), the secret
the caller presented, the agent asked for → ok, unauthenticated (no key, unknown
key, wrong secret, revoked key) or forbidden (a good key, another tenant's agent).
The digests are compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

__all__ = [
    "TOKEN_PREFIX",
    "ApiKeyRecord",
    "AuthDecision",
    "AuthOutcome",
    "TenantScope",
    "decide",
    "format_token",
    "parse_token",
    "secret_digest",
]

TOKEN_PREFIX: Final = "gmk_"

# A key id is hex (`secrets.token_hex(8)`, 16 digits; up to 64 accepted so a longer
# id in a later version still parses); a secret is URL-safe base64
# (`secrets.token_urlsafe(32)`, 43 characters). Neither holds `.`, which separates them.
_KEY_ID: Final = re.compile(r"[0-9a-f]{1,64}")
_SECRET: Final = re.compile(r"[A-Za-z0-9_-]{16,256}")
# Anything longer is not a token of ours; refuse it before matching.
_MAX_TOKEN_CHARS: Final = 4 + 64 + 1 + 256
# Compared against when there is no record, so an unknown key id costs the same
# work as a wrong secret.
_NO_DIGEST: Final = "0" * 64


@dataclass(frozen=True, slots=True)
class TenantScope:
    """The agents one key reaches: `agent_ids` exactly, any id starting with
    `agent_prefix`, or every agent (`admin`)."""

    agent_ids: frozenset[str] = frozenset()
    agent_prefix: str | None = None
    admin: bool = False

    def __post_init__(self) -> None:
        # An empty prefix would reach every agent without saying `admin`.
        if self.agent_prefix == "":
            raise ValueError("an agent prefix must not be empty (use admin for every agent)")
        if not isinstance(self.agent_ids, frozenset):
            object.__setattr__(self, "agent_ids", frozenset(self.agent_ids))

    def allows(self, agent_id: str) -> bool:
        if self.admin:
            return True
        if agent_id in self.agent_ids:
            return True
        return self.agent_prefix is not None and agent_id.startswith(self.agent_prefix)

    @property
    def empty(self) -> bool:
        """Whether the scope reaches no agent at all."""
        return not (self.admin or self.agent_ids or self.agent_prefix is not None)

    def describe(self) -> str:
        """A one-line summary for listings and logs."""
        if self.admin:
            return "admin"
        parts = sorted(self.agent_ids)
        if self.agent_prefix is not None:
            parts.append(f"{self.agent_prefix}*")
        return ",".join(parts) or "nothing"


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """What is stored of a key: never the secret, only its digest."""

    key_id: str
    secret_sha256: str
    scope: TenantScope
    label: str
    created_ms: int
    revoked: bool = False


class AuthOutcome(StrEnum):
    OK = "ok"
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"


@dataclass(frozen=True, slots=True)
class AuthDecision:
    """The verdict on one request. `key_id` names the key presented when it was
    found (None when there was none, it was unknown, or auth is off)."""

    outcome: AuthOutcome
    key_id: str | None
    detail: str

    @property
    def ok(self) -> bool:
        return self.outcome is AuthOutcome.OK


def parse_token(token: str) -> tuple[str, str] | None:
    """`gmk_<key id>.<secret>` → (key id, secret); None for anything else."""
    if not isinstance(token, str) or len(token) > _MAX_TOKEN_CHARS:
        return None
    if not token.startswith(TOKEN_PREFIX):
        return None
    key_id, dot, secret = token[len(TOKEN_PREFIX) :].partition(".")
    if not dot or _KEY_ID.fullmatch(key_id) is None or _SECRET.fullmatch(secret) is None:
        return None
    return key_id, secret


def format_token(key_id: str, secret: str) -> str:
    token = f"{TOKEN_PREFIX}{key_id}.{secret}"
    if parse_token(token) != (key_id, secret):
        raise ValueError("a key id is lowercase hex and a secret URL-safe base64")
    return token


def secret_digest(secret: str) -> str:
    """The stored form of a secret: SHA-256, lowercase hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def decide(record: ApiKeyRecord | None, token_secret: str | None, agent_id: str) -> AuthDecision:
    """Whether the holder of `token_secret` for the key `record` may reach `agent_id`."""
    if token_secret is None:
        return AuthDecision(AuthOutcome.UNAUTHENTICATED, None, "no API key")
    presented = secret_digest(token_secret)
    stored = _NO_DIGEST if record is None else record.secret_sha256
    matches = hmac.compare_digest(presented.encode(), stored.encode())
    if record is None:
        return AuthDecision(AuthOutcome.UNAUTHENTICATED, None, "unknown API key")
    if not matches:
        return AuthDecision(AuthOutcome.UNAUTHENTICATED, record.key_id, "wrong API key secret")
    if record.revoked:
        return AuthDecision(AuthOutcome.UNAUTHENTICATED, record.key_id, "API key revoked")
    if not record.scope.allows(agent_id):
        return AuthDecision(
            AuthOutcome.FORBIDDEN, record.key_id, f"API key does not reach agent {agent_id!r}"
        )
    return AuthDecision(AuthOutcome.OK, record.key_id, "ok")
