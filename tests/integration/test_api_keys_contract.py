"""The API key store contract, run against the Redis store (on a client that
decodes and one that does not: the key store's Redis hands out bytes) and the
reference in-memory one: a created key is found by id with only its secret's
digest stored, listings are oldest first and never carry a secret, revocation
keeps the record and refuses its token, and ids never collide.

Redis alone: the keys sit in the key-store segment, so a wipe of the memory state
keeps them, and nothing but the key's hash and the index is written."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from grimoire.agents.ports import MemorySink
from grimoire.infra.runtime import compose
from grimoire.infra.settings import Settings
from grimoire.streams.trust.tenancy import (
    AuthDecision,
    AuthOutcome,
    TenantScope,
    decide,
    parse_token,
    secret_digest,
)
from grimoire.tables.journal.keystore import RedisKeyStore
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.ports.trust import ApiKeyStore
from grimoire.tables.redis_client import create_redis
from grimoire.tables.testing.api_keys import InMemoryApiKeyStore
from grimoire.tables.trust.api_keys import (
    SURFACE_KAFKA,
    Authenticator,
    RedisApiKeyStore,
    RedisAuthMetrics,
)
from tests.support.contract import scratch_redis
from tests.support.embedders import FakeEmbedder

ONE = TenantScope(agent_ids=frozenset({"golem-1", "golem-2"}))
FLEET = TenantScope(agent_prefix="fleet-a/")
ADMIN = TenantScope(admin=True)


@pytest.fixture(params=["memory", "redis", "redis-decoded"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[ApiKeyStore]:
    kind: str = request.param
    if kind == "memory":
        yield InMemoryApiKeyStore()
        return
    settings: Settings = request.getfixturevalue("settings")
    redis = (
        Redis.from_url(settings.redis.url, decode_responses=True)
        if kind == "redis-decoded"
        else create_redis(settings.redis.url, 8)
    )
    try:
        yield RedisApiKeyStore(redis, f"ak{uuid.uuid4().hex[:8]}")
    finally:
        await redis.aclose()


async def test_a_created_key_is_found_by_id_and_its_token_checks(store: ApiKeyStore) -> None:
    record, token = await store.create(ONE, "golem owners", now_ms=1_000)
    parsed = parse_token(token)
    assert parsed is not None
    key_id, secret = parsed
    assert key_id == record.key_id
    assert record.secret_sha256 == secret_digest(secret)
    assert (record.scope, record.label, record.created_ms, record.revoked) == (
        ONE,
        "golem owners",
        1_000,
        False,
    )
    assert await store.get(key_id) == record
    assert decide(await store.get(key_id), secret, "golem-2").ok


@pytest.mark.parametrize("scope", [ONE, FLEET, ADMIN])
async def test_every_kind_of_scope_is_kept(store: ApiKeyStore, scope: TenantScope) -> None:
    record, _ = await store.create(scope, "", now_ms=1)
    stored = await store.get(record.key_id)
    assert stored is not None
    assert stored.scope == scope


async def test_an_unknown_id_is_none_and_cannot_be_revoked(store: ApiKeyStore) -> None:
    assert await store.get("00" * 8) is None
    assert await store.revoke("00" * 8) is False
    assert await store.get("00" * 8) is None  # a revoke creates nothing
    assert await store.list() == []


async def test_a_key_reaching_nothing_is_refused(store: ApiKeyStore) -> None:
    with pytest.raises(ValueError):
        await store.create(TenantScope(), "", now_ms=1)
    assert await store.list() == []


async def test_revoking_keeps_the_record_and_refuses_its_token(store: ApiKeyStore) -> None:
    record, token = await store.create(ONE, "", now_ms=1)
    other, other_token = await store.create(ONE, "", now_ms=2)
    assert await store.revoke(record.key_id) is True
    assert await store.revoke(record.key_id) is True  # harmless again
    stored = await store.get(record.key_id)
    assert stored is not None and stored.revoked
    assert stored.secret_sha256 == record.secret_sha256
    auth = Authenticator(store, enabled=True, ttl_s=0)
    refused = await auth.check(token, "golem-1")
    assert (refused.outcome, refused.key_id) == (AuthOutcome.UNAUTHENTICATED, record.key_id)
    assert (await auth.check(other_token, "golem-1")).ok  # the others keep working
    assert {r.key_id: r.revoked for r in await store.list()} == {
        record.key_id: True,
        other.key_id: False,
    }


async def test_listing_is_oldest_first_and_never_holds_a_secret(store: ApiKeyStore) -> None:
    made = [await store.create(FLEET, f"k{n}", now_ms=n) for n in (30, 10, 20)]
    listed = await store.list()
    assert [r.created_ms for r in listed] == [10, 20, 30]
    assert [r.label for r in listed] == ["k10", "k20", "k30"]
    secrets_ = [parse_token(token)[1] for _, token in made]  # type: ignore[index]
    shown = repr(listed)
    assert not any(secret in shown for secret in secrets_)


async def test_keys_created_at_once_all_differ(store: ApiKeyStore) -> None:
    made = await asyncio.gather(*(store.create(ONE, "", now_ms=1) for _ in range(32)))
    assert len({record.key_id for record, _ in made}) == 32
    assert len({token for _, token in made}) == 32
    assert len(await store.list()) == 32


async def test_the_keys_live_in_the_key_store_and_survive_a_wipe(settings: Settings) -> None:
    async with scratch_redis(settings, "ak", connections=2) as (redis, prefix):
        keys = Keyspace(prefix)
        store = RedisApiKeyStore(redis, prefix)
        record, token = await store.create(FLEET, "fleet", now_ms=1)
        await redis.hset(keys.memory("fleet-a/x", "m1"), mapping={"agent_id": "fleet-a/x"})
        found = [name async for name in redis.scan_iter(match=keys.deployment_pattern)]
        assert sorted(n for n in found if keys.is_keystore_key(n)) == sorted(
            [keys.api_key(record.key_id).encode(), keys.api_key_index.encode()]
        )
        # The stored hash holds the digest, never the secret.
        _, secret = parse_token(token) or ("", "")
        stored = await redis.hgetall(keys.api_key(record.key_id))
        assert not any(secret.encode() in value for value in stored.values())
        # What a rebuild's wipe does: every key of the deployment but the key store's.
        await redis.delete(*(n for n in found if not keys.is_keystore_key(n)))
        assert await store.get(record.key_id) == record
        auth = Authenticator(store, enabled=True)
        assert (await auth.check(token, "fleet-a/x")).ok


async def test_refusals_are_counted_in_the_metrics_hash(settings: Settings) -> None:
    async with scratch_redis(settings, "ak", connections=2) as (redis, prefix):
        metrics = RedisAuthMetrics(redis, prefix)
        await metrics.refused(AuthDecision(AuthOutcome.FORBIDDEN, "k", ""), SURFACE_KAFKA)
        await metrics.refused(AuthDecision(AuthOutcome.UNAUTHENTICATED, None, ""), SURFACE_KAFKA)
        counts = await redis.hgetall(Keyspace(prefix).metrics)
        assert counts == {
            b"auth_forbidden": b"1",
            b"auth_unauthenticated": b"1",
            b"auth_refused_kafka": b"2",
        }


@pytest.mark.parametrize("enabled", [False, True])
async def test_the_worker_checks_keys_from_the_key_store_redis(
    settings: Settings, enabled: bool
) -> None:
    # compose() hands one Authenticator, over the key store's Redis and the
    # deployment's prefix, to the recall handler and the sequencer.
    prefix = f"ak{uuid.uuid4().hex[:8]}"
    configured = settings.with_values(auth_enabled=enabled, topic_prefix=prefix)
    redis: Redis = create_redis(settings.redis.url, 4)
    keystore = create_redis(settings.redis.url, 2)
    try:
        composed = await compose(
            configured,
            prefix=prefix,
            redis=redis,
            keys=RedisKeyStore(keystore, prefix),
            embedder=FakeEmbedder(),
            sink=MemorySink(),
            worker_id="test",
            keystore_redis=keystore,
        )
        recall, sequencer = composed.handlers.recall, composed.handlers.sequencer
        assert recall.authenticator is sequencer.authenticator
        assert recall.authenticator is not None
        assert recall.authenticator.enabled is enabled
        _, token = await RedisApiKeyStore(keystore, prefix).create(FLEET, "", now_ms=1)
        assert (await recall.authenticator.check(token, "fleet-a/x")).ok
        assert (await recall.authenticator.check(token, "fleet-b/x")).ok is not enabled
    finally:
        await redis.aclose()
        await keystore.aclose()
