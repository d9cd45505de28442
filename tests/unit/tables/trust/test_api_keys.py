"""The Authenticator (tables/trust/api_keys.py) over the reference store: tokens
checked against agents, switched off for local development, a short cache whose
TTL bounds how long a revocation takes, and the record codec the Redis store uses.
The store contract itself is tests/integration/test_api_keys_contract.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from grimoire.streams.trust.tenancy import (
    AuthDecision,
    AuthOutcome,
    TenantScope,
    format_token,
    parse_token,
)
from grimoire.tables.testing.api_keys import InMemoryApiKeyStore, InMemoryAuthMetrics
from grimoire.tables.trust.api_keys import (
    SURFACE_HTTP,
    SURFACE_KAFKA,
    Authenticator,
    decode_record,
    encode_record,
    new_api_key,
    refusal_fields,
)

ONE = TenantScope(agent_ids=frozenset({"golem-1"}))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_created_key_reaches_its_agents_only() -> None:
    store = InMemoryApiKeyStore()
    _, token = await store.create(ONE, "t", now_ms=1)
    auth = Authenticator(store, enabled=True)
    assert (await auth.check(token, "golem-1")).ok
    refused = await auth.check(token, "golem-2")
    assert refused.outcome is AuthOutcome.FORBIDDEN


@pytest.mark.parametrize(
    ("token", "detail"),
    [
        (None, "no API key"),
        ("", "no API key"),
        ("gmk_nothex.abc", "malformed"),
        ("Bearer something", "malformed"),
        (format_token("00" * 8, "s" * 43), "unknown"),
    ],
)
async def test_missing_malformed_and_unknown_tokens_are_unauthenticated(
    token: str | None, detail: str
) -> None:
    auth = Authenticator(InMemoryApiKeyStore(), enabled=True)
    decision = await auth.check(token, "golem-1")
    assert decision.outcome is AuthOutcome.UNAUTHENTICATED
    assert detail in decision.detail


async def test_a_wrong_secret_for_a_real_key_id_is_unauthenticated() -> None:
    store = InMemoryApiKeyStore()
    record, token = await store.create(ONE, "t", now_ms=1)
    key_id, _ = parse_token(token) or ("", "")
    decision = await Authenticator(store, enabled=True).check(
        format_token(key_id, "w" * 43), "golem-1"
    )
    assert (decision.outcome, decision.key_id) == (AuthOutcome.UNAUTHENTICATED, record.key_id)


async def test_switched_off_everything_passes_without_reading_the_store() -> None:
    store = InMemoryApiKeyStore()
    auth = Authenticator(store, enabled=False)
    for token in (None, "garbage", format_token("00" * 8, "s" * 43)):
        decision = await auth.check(token, "anyone")
        assert decision == AuthDecision(AuthOutcome.OK, None, decision.detail)
    assert store.reads == 0
    assert not auth.enabled


async def test_records_are_cached_for_the_ttl_and_a_revocation_lands_after_it() -> None:
    store = InMemoryApiKeyStore()
    clock = Clock()
    record, token = await store.create(ONE, "t", now_ms=1)
    auth = Authenticator(store, enabled=True, ttl_s=2.0, clock=clock)
    assert (await auth.check(token, "golem-1")).ok
    assert (await auth.check(token, "golem-1")).ok
    assert store.reads == 1
    assert await store.revoke(record.key_id)
    clock.now += 1.9  # still cached: the revocation is not seen yet
    assert (await auth.check(token, "golem-1")).ok
    clock.now += 0.2
    refused = await auth.check(token, "golem-1")
    assert refused.outcome is AuthOutcome.UNAUTHENTICATED
    assert "revoked" in refused.detail
    assert store.reads == 2


async def test_a_zero_ttl_reads_every_time_and_invalidate_drops_the_cache() -> None:
    store = InMemoryApiKeyStore()
    record, token = await store.create(ONE, "t", now_ms=1)
    auth = Authenticator(store, enabled=True, ttl_s=0.0)
    await auth.check(token, "golem-1")
    await auth.check(token, "golem-1")
    assert store.reads == 2
    cached = Authenticator(store, enabled=True, ttl_s=60.0)
    await cached.check(token, "golem-1")
    await store.revoke(record.key_id)
    cached.invalidate(record.key_id)
    assert not (await cached.check(token, "golem-1")).ok
    cached.invalidate()
    assert not (await cached.check(token, "golem-1")).ok


async def test_unknown_ids_are_never_cached() -> None:
    # An absence cached for the TTL would let a flood of made-up ids fill the
    # cache; a lookup of an unknown id is one cheap read.
    store = InMemoryApiKeyStore()
    auth = Authenticator(store, enabled=True, ttl_s=60.0)
    unknown = format_token("ff" * 8, "s" * 43)
    await auth.check(unknown, "golem-1")
    await auth.check(unknown, "golem-1")
    assert store.reads == 2


async def test_identify_names_a_good_key_and_its_scope_whatever_the_agent() -> None:
    store = InMemoryApiKeyStore()
    record, token = await store.create(ONE, "t", now_ms=1)
    admin, admin_token = await store.create(TenantScope(admin=True), "ops", now_ms=2)
    auth = Authenticator(store, enabled=True)
    who = await auth.identify(token)
    assert (who.authenticated, who.admin, who.key_id, who.scope) == (
        True,
        False,
        record.key_id,
        ONE,
    )
    # The same verdicts as `check`, for any agent.
    for agent in ("golem-1", "golem-2"):
        assert who.decision_for(agent) == await auth.check(token, agent)
    boss = await auth.identify(admin_token)
    assert (boss.admin, boss.key_id) == (True, admin.key_id)


@pytest.mark.parametrize("case", ["none", "malformed", "unknown", "wrong", "revoked"])
async def test_identify_refuses_what_check_refuses(case: str) -> None:
    store = InMemoryApiKeyStore()
    record, token = await store.create(ONE, "t", now_ms=1)
    if case == "revoked":
        await store.revoke(record.key_id)
    presented = {
        "none": None,
        "malformed": "gmk_nothex.abc",
        "unknown": format_token("00" * 8, "s" * 43),
        "wrong": format_token(record.key_id, "w" * 43),
        "revoked": token,
    }[case]
    auth = Authenticator(store, enabled=True, ttl_s=0.0)
    who = await auth.identify(presented)
    assert not who.authenticated and not who.admin
    assert who.refused == await auth.check(presented, "golem-1")
    assert who.decision_for("golem-1") == who.refused
    assert not who.scope.allows("golem-1")


async def test_switched_off_everyone_is_identified_as_reaching_every_agent() -> None:
    store = InMemoryApiKeyStore()
    who = await Authenticator(store, enabled=False).identify(None)
    assert who.authenticated and who.admin and who.decision_for("anyone").ok
    assert store.reads == 0


def test_a_negative_ttl_is_refused() -> None:
    with pytest.raises(ValueError):
        Authenticator(InMemoryApiKeyStore(), enabled=True, ttl_s=-1)


def test_a_key_reaching_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one agent"):
        new_api_key(TenantScope(), "nothing", now_ms=1)


def test_a_new_key_stores_only_the_digest() -> None:
    record, token = new_api_key(ONE, "label", now_ms=5)
    key_id, secret = parse_token(token) or ("", "")
    assert key_id == record.key_id and len(key_id) == 16
    assert len(secret) == 43  # token_urlsafe(32)
    fields = encode_record(record)
    assert secret not in "".join(fields.values())
    assert fields["secret_sha256"] == record.secret_sha256


@pytest.mark.parametrize(
    "scope",
    [
        ONE,
        TenantScope(agent_ids=frozenset({"a", "b/c", "d=e"})),
        TenantScope(agent_prefix="fleet-a/"),
        TenantScope(admin=True),
    ],
)
@pytest.mark.parametrize("revoked", [False, True])
def test_the_record_codec_round_trips_text_and_bytes(scope: TenantScope, revoked: bool) -> None:
    record, _ = new_api_key(scope, "a label, with ünïcode", now_ms=1_767_225_600_000)
    if revoked:
        record = replace(record, revoked=True)
    fields = encode_record(record)
    assert decode_record(fields) == record
    as_bytes = {k.encode(): v.encode() for k, v in fields.items()}
    assert decode_record(as_bytes) == record


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"key_id": "k"},
        {"key_id": "k", "secret_sha256": "d", "scope": "not json"},
        {"key_id": "k", "secret_sha256": "d", "scope": "[]"},
        {"key_id": "k", "secret_sha256": "d", "scope": '{"agent_prefix": ""}'},
        {"key_id": "k", "secret_sha256": "d", "scope": "{}", "created_ms": "soon"},
    ],
)
def test_an_unreadable_record_decodes_to_none(fields: dict[str, str]) -> None:
    assert decode_record(fields) is None


@pytest.mark.parametrize(
    ("outcome", "surface", "expected"),
    [
        (
            AuthOutcome.UNAUTHENTICATED,
            SURFACE_KAFKA,
            ("auth_unauthenticated", "auth_refused_kafka"),
        ),
        (AuthOutcome.FORBIDDEN, SURFACE_HTTP, ("auth_forbidden", "auth_refused_http")),
    ],
)
async def test_refusals_are_counted_by_outcome_and_surface(
    outcome: AuthOutcome, surface: str, expected: tuple[str, str]
) -> None:
    decision = AuthDecision(outcome, None, "")
    assert refusal_fields(decision, surface) == expected
    metrics = InMemoryAuthMetrics()
    await metrics.refused(decision, surface)
    await metrics.refused(decision, surface)
    assert dict(metrics.counts) == {name: 2 for name in expected}
