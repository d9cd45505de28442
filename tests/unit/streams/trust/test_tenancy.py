"""grimoire.streams.trust.tenancy: scopes, the token format, and the one decision
every request goes through (ok / unauthenticated / forbidden)."""

from __future__ import annotations

import secrets

import pytest

from grimoire.streams.trust.tenancy import (
    TOKEN_PREFIX,
    ApiKeyRecord,
    AuthDecision,
    AuthOutcome,
    TenantScope,
    decide,
    format_token,
    parse_token,
    secret_digest,
)

SECRET = "s" * 43
KEY_ID = "0123456789abcdef"


def record(scope: TenantScope, *, revoked: bool = False, secret: str = SECRET) -> ApiKeyRecord:
    return ApiKeyRecord(
        key_id=KEY_ID,
        secret_sha256=secret_digest(secret),
        scope=scope,
        label="test",
        created_ms=1,
        revoked=revoked,
    )


@pytest.mark.parametrize(
    ("scope", "agent", "allowed"),
    [
        (TenantScope(agent_ids=frozenset({"golem-1"})), "golem-1", True),
        (TenantScope(agent_ids=frozenset({"golem-1"})), "golem-2", False),
        (TenantScope(agent_ids=frozenset({"golem-1"})), "golem-10", False),  # exact, no prefix
        (TenantScope(agent_ids=frozenset({"golem-1", "golem-2"})), "golem-2", True),
        (TenantScope(agent_ids=frozenset({"TENV1"})), "tenV1", False),  # case matters
        (TenantScope(agent_prefix="fleet-a/"), "fleet-a/golem-1", True),
        (TenantScope(agent_prefix="fleet-a/"), "fleet-a/", True),
        (TenantScope(agent_prefix="fleet-a/"), "fleet-b/golem-1", False),
        (TenantScope(agent_prefix="fleet-a/"), "fleet-a", False),
        (TenantScope(agent_prefix="fleet-a/"), "x-fleet-a/golem", False),  # head only
        (TenantScope(agent_ids=frozenset({"solo"}), agent_prefix="f/"), "solo", True),
        (TenantScope(agent_ids=frozenset({"solo"}), agent_prefix="f/"), "f/one", True),
        (TenantScope(admin=True), "anyone", True),
        (TenantScope(admin=True), "fleet-z/x", True),
        (TenantScope(), "golem-1", False),
    ],
)
def test_scope_rules(scope: TenantScope, agent: str, allowed: bool) -> None:
    assert scope.allows(agent) is allowed


def test_an_empty_prefix_is_refused_and_admin_must_be_said() -> None:
    with pytest.raises(ValueError, match="admin"):
        TenantScope(agent_prefix="")
    assert TenantScope().empty
    assert not TenantScope(admin=True).empty
    assert not TenantScope(agent_prefix="p").empty


def test_a_scope_takes_any_iterable_of_ids_as_a_frozenset() -> None:
    scope = TenantScope(agent_ids={"a", "b"})  # type: ignore[arg-type]
    assert scope.agent_ids == frozenset({"a", "b"})
    assert hash(scope) == hash(TenantScope(agent_ids=frozenset({"b", "a"})))


@pytest.mark.parametrize(
    ("scope", "shown"),
    [
        (TenantScope(admin=True), "admin"),
        (TenantScope(agent_ids=frozenset({"b", "a"})), "a,b"),
        (TenantScope(agent_prefix="f/"), "f/*"),
        (TenantScope(), "nothing"),
    ],
)
def test_describe(scope: TenantScope, shown: str) -> None:
    assert scope.describe() == shown


def test_a_fresh_token_round_trips() -> None:
    key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    token = format_token(key_id, secret)
    assert token.startswith(TOKEN_PREFIX)
    assert token == f"gmk_{key_id}.{secret}"
    assert parse_token(token) == (key_id, secret)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "gmk_",
        "gmk_.",
        f"gmk_{KEY_ID}",  # no secret
        f"gmk_{KEY_ID}.",
        f"gmk_.{SECRET}",  # no key id
        f"gmx_{KEY_ID}.{SECRET}",  # another prefix
        f"GMK_{KEY_ID}.{SECRET}",
        f"{KEY_ID}.{SECRET}",
        f"gmk_{KEY_ID.upper()}.{SECRET}",  # ids are lowercase hex
        f"gmk_xyz.{SECRET}",
        f"gmk_{KEY_ID}.{SECRET}.extra",  # a dot in the secret
        f"gmk_{KEY_ID}.short",  # too short to be ours
        f"gmk_{KEY_ID}.{SECRET} ",  # whitespace
        f"gmk_{KEY_ID}.{'é' * 43}",
        f"gmk_{KEY_ID}.{'s' * 10_000}",  # oversized
        f"Bearer gmk_{KEY_ID}.{SECRET}",
    ],
)
def test_malformed_tokens_parse_to_none(token: str) -> None:
    assert parse_token(token) is None


def test_parse_refuses_what_is_not_a_string() -> None:
    assert parse_token(None) is None  # type: ignore[arg-type]
    assert parse_token(b"gmk_00.secret") is None  # type: ignore[arg-type]


def test_format_refuses_what_would_not_parse_back() -> None:
    with pytest.raises(ValueError):
        format_token("not-hex", SECRET)
    with pytest.raises(ValueError):
        format_token(KEY_ID, "has.dot.in.it.and.is.long.enough")


def test_the_digest_is_sha256_hex() -> None:
    assert secret_digest("abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


AGENTS = TenantScope(agent_ids=frozenset({"golem-1"}))
FLEET = TenantScope(agent_prefix="fleet-a/")


@pytest.mark.parametrize(
    ("stored", "secret", "agent", "outcome", "key_id", "detail"),
    [
        (record(AGENTS), SECRET, "golem-1", AuthOutcome.OK, KEY_ID, "ok"),
        (record(FLEET), SECRET, "fleet-a/g", AuthOutcome.OK, KEY_ID, "ok"),
        (record(TenantScope(admin=True)), SECRET, "x", AuthOutcome.OK, KEY_ID, "ok"),
        (record(AGENTS), SECRET, "golem-2", AuthOutcome.FORBIDDEN, KEY_ID, "does not reach"),
        (record(FLEET), SECRET, "fleet-b/g", AuthOutcome.FORBIDDEN, KEY_ID, "does not reach"),
        (record(AGENTS), "w" * 43, "golem-1", AuthOutcome.UNAUTHENTICATED, KEY_ID, "wrong"),
        (None, SECRET, "golem-1", AuthOutcome.UNAUTHENTICATED, None, "unknown"),
        (record(AGENTS), None, "golem-1", AuthOutcome.UNAUTHENTICATED, None, "no API key"),
        (None, None, "golem-1", AuthOutcome.UNAUTHENTICATED, None, "no API key"),
        (
            record(AGENTS, revoked=True),
            SECRET,
            "golem-1",
            AuthOutcome.UNAUTHENTICATED,
            KEY_ID,
            "revoked",
        ),
        # A revoked key's holder learns it is revoked, never whether it reached the agent.
        (
            record(AGENTS, revoked=True),
            SECRET,
            "golem-2",
            AuthOutcome.UNAUTHENTICATED,
            KEY_ID,
            "revoked",
        ),
        # A wrong secret says nothing about the key's scope either.
        (record(AGENTS), "w" * 43, "golem-2", AuthOutcome.UNAUTHENTICATED, KEY_ID, "wrong"),
    ],
)
def test_decide(
    stored: ApiKeyRecord | None,
    secret: str | None,
    agent: str,
    outcome: AuthOutcome,
    key_id: str | None,
    detail: str,
) -> None:
    decision = decide(stored, secret, agent)
    assert decision.outcome is outcome
    assert decision.ok is (outcome is AuthOutcome.OK)
    assert decision.key_id == key_id
    assert detail in decision.detail
    if secret is not None:
        assert secret not in decision.detail


def test_a_decision_says_ok_only_for_ok() -> None:
    assert AuthDecision(AuthOutcome.OK, None, "").ok
    assert not AuthDecision(AuthOutcome.FORBIDDEN, "k", "").ok
    assert not AuthDecision(AuthOutcome.UNAUTHENTICATED, None, "").ok
    assert AuthOutcome.FORBIDDEN == "forbidden"  # the wire and metrics spelling
