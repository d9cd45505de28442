"""`grimoire keys create | revoke | list` on the reference key store: a token shown
once at creation and never again, scopes for agents, a prefix or everything, bad
input refused with a clear message, revocation of known keys only. The tests are
plain functions: each command runs its own event loop (asyncio.run)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from grimoire.infra import cli
from grimoire.infra.cli import common
from grimoire.streams.trust.tenancy import parse_token, secret_digest
from grimoire.tables.testing.api_keys import InMemoryApiKeyStore
from grimoire.tables.trust.api_keys import Authenticator
from tests.support.cli import patch_opener


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> InMemoryApiKeyStore:
    return patch_opener(monkeypatch, common, "api_keys", InMemoryApiKeyStore())


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[Any], str]:
    code = cli.main(["keys", *argv])
    out, err = capsys.readouterr()
    return code, [orjson.loads(line) for line in out.splitlines()], err


@pytest.mark.parametrize(
    ("argv", "scope"),
    [
        (
            ["--agent", "golem-1", "--agent", "golem-2"],
            {"agent_ids": ["golem-1", "golem-2"], "agent_prefix": None, "admin": False},
        ),
        (["--prefix", "fleet-a/"], {"agent_ids": [], "agent_prefix": "fleet-a/", "admin": False}),
        (["--admin"], {"agent_ids": [], "agent_prefix": None, "admin": True}),
    ],
)
def test_create_prints_the_token_once_with_the_key_id(
    store: InMemoryApiKeyStore,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    scope: dict[str, Any],
) -> None:
    code, (created,), err = run(capsys, "create", *argv, "--label", "ops team")
    assert code == 0
    assert created["scope"] == scope
    assert created["label"] == "ops team"
    key_id, secret = parse_token(created["token"]) or ("", "")
    assert key_id == created["key_id"]
    assert "cannot be shown again" in err
    (record,) = asyncio.run(store.list())
    assert record.secret_sha256 == secret_digest(secret)
    auth = Authenticator(store, enabled=True)
    agent = "golem-2" if "--agent" in argv else "fleet-a/x"
    assert asyncio.run(auth.check(created["token"], agent)).ok


def test_list_shows_every_key_and_never_a_secret(
    store: InMemoryApiKeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    _, (one,), _ = run(capsys, "create", "--agent", "a")
    _, (two,), _ = run(capsys, "create", "--admin", "--label", "root")
    code, listed, _ = run(capsys, "list")
    assert code == 0
    assert {k["key_id"] for k in listed} == {one["key_id"], two["key_id"]}
    for key in listed:
        assert set(key) == {"key_id", "label", "scope", "created_ms", "revoked"}
    text = orjson.dumps(listed).decode()
    for created in (one, two):
        _, secret = parse_token(created["token"]) or ("", "")
        assert secret not in text
        assert secret_digest(secret) not in text


def test_list_of_no_keys_prints_nothing(
    store: InMemoryApiKeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "list") == (0, [], "")


def test_revoke_marks_the_key_and_its_token_is_refused(
    store: InMemoryApiKeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    _, (created,), _ = run(capsys, "create", "--agent", "a")
    code, (revoked,), _ = run(capsys, "revoke", created["key_id"])
    assert code == 0
    assert revoked == {"key_id": created["key_id"], "revoked": True}
    _, (listed,), _ = run(capsys, "list")
    assert listed["revoked"] is True
    decision = asyncio.run(Authenticator(store, enabled=True).check(created["token"], "a"))
    assert not decision.ok and "revoked" in decision.detail


def test_revoking_an_unknown_key_fails_clearly(
    store: InMemoryApiKeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    code, printed, err = run(capsys, "revoke", "0123456789abcdef")
    assert (code, printed) == (1, [])
    assert "no API key '0123456789abcdef'" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--agent", "has space"], "not an agent id: 'has space'"),
        (["--agent", "ok", "--agent", "a:b"], "not an agent id: 'a:b'"),
        (["--prefix", "fleet{a}"], "--prefix must be"),
        (["--prefix", "x" * 200], "--prefix must be"),
    ],
)
def test_create_refuses_ids_no_agent_can_have(
    store: InMemoryApiKeyStore,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    code, printed, err = run(capsys, "create", *argv)
    assert (code, printed) == (2, [])
    assert message in err


@pytest.mark.parametrize(
    "argv",
    [
        ["create"],  # a scope is required
        ["create", "--agent", "a", "--admin"],  # one kind of scope
        ["create", "--prefix", "p", "--agent", "a"],
        ["revoke"],  # a key id is required
        ["nope"],
        [],
    ],
)
def test_keys_needs_a_known_action_and_one_scope(
    store: InMemoryApiKeyStore, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["keys", *argv])
    assert exited.value.code == 2
    capsys.readouterr()


def test_every_keys_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["keys"], ["keys", "create"], ["keys", "revoke"], ["keys", "list"]):
        with pytest.raises(SystemExit) as exited:
            cli.main([*argv, "--help"])
        assert exited.value.code == 0
        assert "usage: grimoire keys" in capsys.readouterr().out
