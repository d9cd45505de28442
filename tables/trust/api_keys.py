"""Tenant API keys: their store and the check every request goes through.

A key is created once (`create` returns the token, the only time the secret
exists outside the caller's hands), listed, and revoked; only the secret's SHA-256
is stored (`grimoire.streams.trust.tenancy`). Keys live in the key store's Redis
under the key-store segment, next to the agents' journal keys: they are not memory
state, so a wipe or a replay of the memory state keeps them
(`Keyspace.is_keystore_key`).

Keys (built by `grimoire.tables.keyspace.Keyspace`):
  `{prefix}:keystore:api-key:{key id}`  hash: secret_sha256, scope (JSON), label,
                                         created_ms, revoked (0/1)
  `{prefix}:keystore:api-keys`           set of every key id (what `list` reads)

`ApiKeyStore` is the protocol, `RedisApiKeyStore` the Redis implementation,
`grimoire.tables.testing.api_keys.InMemoryApiKeyStore` the reference one, and
`Authenticator` the check in front of either, with a short cache so a request
does not cost a round trip (a revocation takes effect within its `ttl_s`). Besides
the check of a token against one agent (`check`), it says who a token is
(`identify`: the key's id and scope, or why it is refused), for what is judged on
the key rather than on one agent: whose reply topic a request names, which agents'
series a scrape of `/metrics` may show.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson
from redis.asyncio import Redis

from grimoire.streams.trust.tenancy import (
    ApiKeyRecord,
    AuthDecision,
    AuthOutcome,
    TenantScope,
    decide,
    format_token,
    parse_token,
    secret_digest,
)
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.ports.trust import ApiKeyStore

__all__ = [
    "SURFACE_HTTP",
    "SURFACE_KAFKA",
    "Authenticator",
    "Identity",
    "RedisApiKeyStore",
    "RedisAuthMetrics",
    "decode_record",
    "encode_record",
    "new_api_key",
    "refusal_fields",
]

logger = logging.getLogger(__name__)

# Keys a worker keeps in its cache at most (a deployment has few keys; the bound
# only matters against a caller cycling through many real ones).
_MAX_CACHED: Final = 4096

#: Where a request came in, as the refusal counters name it.
SURFACE_KAFKA: Final = "kafka"
SURFACE_HTTP: Final = "http"


def new_api_key(scope: TenantScope, label: str, *, now_ms: int) -> tuple[ApiKeyRecord, str]:
    """A fresh key: its record (digest only) and the token to show once."""
    if scope.empty:
        raise ValueError("a key must reach at least one agent, a prefix, or be admin")
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    record = ApiKeyRecord(
        key_id=key_id,
        secret_sha256=secret_digest(secret),
        scope=scope,
        label=label,
        created_ms=now_ms,
    )
    return record, format_token(key_id, secret)


def encode_record(record: ApiKeyRecord) -> dict[str, str]:
    """A record as the fields of its hash."""
    scope = {
        "agent_ids": sorted(record.scope.agent_ids),
        "agent_prefix": record.scope.agent_prefix,
        "admin": record.scope.admin,
    }
    return {
        "key_id": record.key_id,
        "secret_sha256": record.secret_sha256,
        "scope": orjson.dumps(scope).decode(),
        "label": record.label,
        "created_ms": str(record.created_ms),
        "revoked": "1" if record.revoked else "0",
    }


def decode_record(fields: Mapping[Any, Any]) -> ApiKeyRecord | None:
    """A record from its hash's fields; None for an absent or unreadable hash."""
    values = {text_of(k): text_of(v) for k, v in fields.items()}
    try:
        scope = orjson.loads(values["scope"])
        return ApiKeyRecord(
            key_id=values["key_id"],
            secret_sha256=values["secret_sha256"],
            scope=TenantScope(
                agent_ids=frozenset(str(a) for a in scope.get("agent_ids") or ()),
                agent_prefix=scope.get("agent_prefix"),
                admin=bool(scope.get("admin")),
            ),
            label=values.get("label", ""),
            created_ms=int(values.get("created_ms", "0")),
            revoked=values.get("revoked") == "1",
        )
    except (KeyError, ValueError, TypeError, AttributeError, orjson.JSONDecodeError):
        if values:
            logger.warning("unreadable API key record %r", values.get("key_id"))
        return None


# Create the key's hash unless the id is taken (64 random bits: a collision is a
# retry, never an overwrite). The index of ids is another key (another slot on a
# cluster), added to first: an id indexed without a hash (a crash in between, or a
# collision) is skipped by `list`, while a hash never goes unindexed.
_CREATE: Final = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""

# Revoke only what exists: an HSET alone would create a stray hash for a wrong id.
_REVOKE: Final = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'revoked', '1')
return 1
"""


class RedisApiKeyStore:
    """`ApiKeyStore` in Redis: one hash per key and a set of key ids. Give it the
    key-store Redis (`GRIMOIRE_KEYSTORE_URL`, by default the memory Redis); it reads
    bytes or text alike."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._keys = Keyspace(prefix)
        self._create = redis.register_script(_CREATE)
        self._revoke = redis.register_script(_REVOKE)

    async def create(
        self, scope: TenantScope, label: str, *, now_ms: int
    ) -> tuple[ApiKeyRecord, str]:
        for _ in range(8):
            record, token = new_api_key(scope, label, now_ms=now_ms)
            fields = encode_record(record)
            args = [part for item in fields.items() for part in item]
            await self._redis.sadd(self._keys.api_key_index, record.key_id)
            created = await self._create(keys=[self._keys.api_key(record.key_id)], args=args)
            if int(created):
                logger.info("API key %s created (%s)", record.key_id, scope.describe())
                return record, token
        raise RuntimeError("could not find a free API key id")

    async def get(self, key_id: str) -> ApiKeyRecord | None:
        fields = await self._redis.hgetall(self._keys.api_key(key_id))
        return decode_record(fields) if fields else None

    async def revoke(self, key_id: str) -> bool:
        revoked = bool(int(await self._revoke(keys=[self._keys.api_key(key_id)])))
        if revoked:
            logger.info("API key %s revoked", key_id)
        return revoked

    async def list(self) -> list[ApiKeyRecord]:
        ids = sorted(text_of(i) for i in await self._redis.smembers(self._keys.api_key_index))
        if not ids:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for key_id in ids:
                pipe.hgetall(self._keys.api_key(key_id))
            rows = await pipe.execute()
        records = [r for r in (decode_record(row) for row in rows if row) if r is not None]
        return sorted(records, key=lambda r: (r.created_ms, r.key_id))


_EVERY_AGENT: Final = TenantScope(admin=True)
_NO_AGENT: Final = TenantScope()


@dataclass(frozen=True, slots=True)
class Identity:
    """Who presented a token: the key's id and scope when it authenticates
    (`refused` None), else the unauthenticated decision saying why (no key, a
    malformed, unknown, wrong or revoked one) and a scope that reaches nothing.
    With checks off, everyone is an identity reaching every agent."""

    refused: AuthDecision | None
    key_id: str | None
    scope: TenantScope

    @property
    def authenticated(self) -> bool:
        return self.refused is None

    @property
    def admin(self) -> bool:
        return self.refused is None and self.scope.admin

    def decision_for(self, agent_id: str) -> AuthDecision:
        """What `Authenticator.check` answers for this token and `agent_id`."""
        if self.refused is not None:
            return self.refused
        if self.scope.allows(agent_id):
            return AuthDecision(AuthOutcome.OK, self.key_id, "ok")
        return AuthDecision(
            AuthOutcome.FORBIDDEN, self.key_id, f"API key does not reach agent {agent_id!r}"
        )


class Authenticator:
    """Checks a presented token against an agent id.

    Records are cached per key id for `ttl_s` seconds (on `clock`): a revocation, or
    a scope change, is effective everywhere within that time. Unknown ids are never
    cached, so a key is usable the moment it was created. With `enabled=False`
    every check passes (local development)."""

    def __init__(
        self,
        store: ApiKeyStore,
        *,
        enabled: bool,
        ttl_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_s < 0:
            raise ValueError("the cache TTL is not negative")
        self._store = store
        self._enabled = enabled
        self._ttl_s = ttl_s
        self._clock = clock
        self._cache: OrderedDict[str, tuple[float, ApiKeyRecord]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self._enabled

    @property
    def store(self) -> ApiKeyStore:
        return self._store

    async def check(self, token: str | None, agent_id: str) -> AuthDecision:
        if not self._enabled:
            return AuthDecision(AuthOutcome.OK, None, "authentication disabled")
        if token is None or token == "":
            return decide(None, None, agent_id)
        parsed = parse_token(token)
        if parsed is None:
            return AuthDecision(AuthOutcome.UNAUTHENTICATED, None, "malformed API key")
        key_id, secret = parsed
        return decide(await self._record(key_id), secret, agent_id)

    async def identify(self, token: str | None) -> Identity:
        """Who presents `token` (one cached read, as `check`)."""
        if not self._enabled:
            return Identity(None, None, _EVERY_AGENT)
        if token is None or token == "":
            return Identity(decide(None, None, ""), None, _NO_AGENT)
        parsed = parse_token(token)
        if parsed is None:
            refused = AuthDecision(AuthOutcome.UNAUTHENTICATED, None, "malformed API key")
            return Identity(refused, None, _NO_AGENT)
        key_id, secret = parsed
        record = await self._record(key_id)
        # The one judgement of a secret and a revocation: against no agent in
        # particular, so a good key comes back ok or forbidden, both authenticated.
        judged = decide(record, secret, "")
        if record is None or judged.outcome is AuthOutcome.UNAUTHENTICATED:
            return Identity(judged, judged.key_id, _NO_AGENT)
        return Identity(None, record.key_id, record.scope)

    def invalidate(self, key_id: str | None = None) -> None:
        """Forget a cached key (or all): the next check reads the store."""
        if key_id is None:
            self._cache.clear()
        else:
            self._cache.pop(key_id, None)

    async def _record(self, key_id: str) -> ApiKeyRecord | None:
        now = self._clock()
        cached = self._cache.get(key_id)
        if cached is not None and cached[0] > now:
            self._cache.move_to_end(key_id)
            return cached[1]
        record = await self._store.get(key_id)
        if record is None:
            self._cache.pop(key_id, None)
            return None
        self._cache[key_id] = (now + self._ttl_s, record)
        self._cache.move_to_end(key_id)
        while len(self._cache) > _MAX_CACHED:
            self._cache.popitem(last=False)
        return record


def refusal_fields(decision: AuthDecision, surface: str) -> tuple[str, str]:
    """The metrics-hash fields one refusal increments: its outcome
    (`auth_unauthenticated` / `auth_forbidden`) and its surface (`auth_refused_kafka`
    / `auth_refused_http`)."""
    return f"auth_{decision.outcome.value}", f"auth_refused_{surface}"


class RedisAuthMetrics:
    """Refusals counted in the deployment's metrics hash (`Keyspace.metrics`, the
    memory Redis): HINCRBY, so every worker and the HTTP API add to one count."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self._redis = redis
        self._keys = Keyspace(prefix)

    async def refused(self, decision: AuthDecision, surface: str) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            for name in refusal_fields(decision, surface):
                pipe.hincrby(self._keys.metrics, name, 1)
            await pipe.execute()
