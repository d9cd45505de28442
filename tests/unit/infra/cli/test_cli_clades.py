"""`grimoire clade join|leave|list|members|entries` and `grimoire publish|unpublish`
as a person runs them, with the Kafka client replaced by a recording fake
(`common.gateway`) and the clade stores by the in-memory ones
(`clades._stores`): what is parsed, what would be sent, what is printed (one JSON
object a line) and the exit code (0 done, 1 nothing there, 2 a bad argument)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from grimoire.infra.cli import clades, common, parser
from grimoire.infra.cli.clades import CladeStores
from grimoire.tables.ports.clade import Published
from grimoire.tables.testing.clade_store import InMemoryCladeRegistry, InMemoryPublishedStore
from tests.support.cli import assert_help, exit_status, patch_opener, run_json
from tests.support.gateway import RecordingGateway

AGENT = "fleet-a/golem-1"
MEMORY = "01a0c450-6c00-710a-a93a-843f1b1d5b63"
KEY = "gmk_0123456789abcdef." + "s" * 43

MEMORIES: dict[tuple[str, str], dict[str, Any]] = {
    (AGENT, MEMORY): {
        "id": MEMORY, "agent_id": AGENT, "kind": "warning", "layer": "contemplation",
        "text": "the archive node drops RPC calls", "confidence": 0.8, "ts": 1_790_000_000_000,
    },
}  # fmt: skip


async def read(agent_id: str, memory_id: str) -> dict[str, Any] | None:
    found = MEMORIES.get((agent_id, memory_id))
    return None if found is None else dict(found)


@pytest.fixture
def stores(monkeypatch: pytest.MonkeyPatch) -> CladeStores:
    fake = CladeStores(InMemoryCladeRegistry(), InMemoryPublishedStore(), read)
    return patch_opener(monkeypatch, clades, "_stores", fake)


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch) -> RecordingGateway:
    fake = RecordingGateway()
    keys: list[str | None] = []

    @contextlib.asynccontextmanager
    async def opened(settings: object, api_key: str | None) -> AsyncIterator[RecordingGateway]:
        keys.append(api_key)
        yield fake

    monkeypatch.setattr(common, "gateway", opened)
    monkeypatch.delenv("GRIMOIRE_API_KEY", raising=False)
    fake.opened_with = keys  # type: ignore[attr-defined]
    return fake


def test_the_commands_are_listed_in_help_order() -> None:
    order = list(parser.ORDER)
    assert order.index("publish") == order.index("unpin") + 1
    assert order.index("unpublish") == order.index("publish") + 1
    assert order.index("clade") == order.index("keys") + 1


@pytest.mark.parametrize(
    "argv",
    [
        ["clade"], ["clade", "join"], ["clade", "leave"], ["clade", "list"],
        ["clade", "members"], ["clade", "entries"], ["publish"], ["unpublish"],
    ],
    ids=" ".join,
)  # fmt: skip
def test_every_command_has_help(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert_help(capsys, argv)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["clade"], "join"),
        (["clade", "join", "ops"], "AGENT"),
        (["clade", "members"], "CLADE"),
        (["clade", "entries", "ops", "--limit", "many"], "invalid int value"),
        (["publish", AGENT], "MEMORY_ID"),
        (["unpublish"], "AGENT"),
    ],
)
def test_unparseable_arguments_exit_2_with_usage(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert exit_status(argv) == 2
    assert message in capsys.readouterr().err


# ---- membership ----------------------------------------------------------------------


def test_join_leave_list_and_members(
    stores: CladeStores, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_json(capsys, "clade", "join", "ops", AGENT) == (
        0, [{"clade": "ops", "agent_id": AGENT, "member": True, "changed": True}], "",
    )  # fmt: skip
    assert run_json(capsys, "clade", "join", "ops", AGENT)[1][0]["changed"] is False
    run_json(capsys, "clade", "join", "ops", "golem-2")
    run_json(capsys, "clade", "join", "db", "golem-2")
    assert run_json(capsys, "clade", "list") == (
        0, [{"clade": "db", "members": 1}, {"clade": "ops", "members": 2}], "",
    )  # fmt: skip
    assert run_json(capsys, "clade", "members", "ops")[1] == [
        {"clade": "ops", "members": [AGENT, "golem-2"]}
    ]
    assert run_json(capsys, "clade", "leave", "ops", "golem-2")[1] == [
        {"clade": "ops", "agent_id": "golem-2", "member": False, "changed": True}
    ]
    assert run_json(capsys, "clade", "leave", "ops", "golem-2")[1][0]["changed"] is False


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["clade", "join", "_ops", AGENT], "not a clade name"),
        (["clade", "leave", "a/b", AGENT], "not a clade name"),
        (["clade", "members", "a b"], "not a clade name"),
        (["clade", "entries", "ops!"], "not a clade name"),
        (["clade", "join", "ops", "has space"], "not an agent id"),
        (["clade", "entries", "ops", "--limit", "0"], "--limit"),
    ],
)
def test_bad_names_are_refused_with_exit_2(
    stores: CladeStores, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, printed, err = run_json(capsys, *argv)
    assert (code, printed) == (2, [])
    assert err.startswith("grimoire clade: ") and message in err and err.count("\n") == 1


def test_entries_print_what_the_members_published_to_the_clade(
    stores: CladeStores, capsys: pytest.CaptureFixture[str]
) -> None:
    async def share() -> None:
        await stores.registry.join("ops", AGENT)
        await stores.published.mark(AGENT, Published(MEMORY, (("ops", ("golem-2",)),)))
        await stores.published.mark(AGENT, Published("gone", (("ops", ("golem-2",)),)))
        await stores.published.mark(AGENT, Published("elsewhere", (("db", ()),)))

    asyncio.run(share())
    code, printed, err = run_json(capsys, "clade", "entries", "ops")
    assert (code, err) == (0, "")
    assert printed == [
        {
            "agent_id": AGENT, "memory_id": MEMORY, "kind": "warning", "layer": "contemplation",
            "text": "the archive node drops RPC calls", "confidence": 0.8,
            "ts": 1_790_000_000_000,
        }
    ]  # fmt: skip
    code, printed, err = run_json(capsys, "clade", "entries", "nobody")
    assert (code, printed, err) == (0, [], "")


# ---- publish and unpublish -----------------------------------------------------------


def test_publish_sends_the_command_with_the_key(
    stores: CladeStores,
    gateway: RecordingGateway,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, printed, err = run_json(
        capsys, "publish", AGENT, MEMORY, "--clade", "ops", "--api-key", KEY
    )
    assert (code, err) == (0, "")
    (command,) = gateway.commands
    assert (command.agent_id, command.command, command.memory_id, command.clade) == (
        AGENT,
        "publish",
        MEMORY,
        "ops",
    )
    assert command.event_id is not None and command.event_id.startswith("cli-")
    assert gateway.opened_with == [KEY]  # type: ignore[attr-defined]
    assert printed == [
        {
            "accepted": True, "command": "publish", "agent_id": AGENT,
            "event_id": command.event_id, "memory_id": MEMORY, "clade": "ops",
        }
    ]  # fmt: skip


def test_unpublish_needs_no_memory_and_no_clade(
    stores: CladeStores, gateway: RecordingGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    code, printed, _ = run_json(capsys, "unpublish", AGENT, "long-gone")
    assert code == 0
    (command,) = gateway.commands
    assert (command.command, command.memory_id, command.clade) == ("unpublish", "long-gone", None)
    assert printed[0]["clade"] is None


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["publish", AGENT, "m-missing"], 1, "has no memory"),
        (["publish", "has space", MEMORY], 2, "not an agent id"),
        (["publish", AGENT, MEMORY, "--clade", ".x"], 2, "not a clade name"),
        (["unpublish", AGENT, " "], 2, "MEMORY_ID"),
        (["unpublish", AGENT, "a b"], 2, "whitespace"),
    ],
)
def test_publishing_refuses_before_sending(
    stores: CladeStores,
    gateway: RecordingGateway,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    code: int,
    message: str,
) -> None:
    exit_code, printed, err = run_json(capsys, *argv)
    assert (exit_code, printed) == (code, [])
    assert err.startswith(f"grimoire {argv[0]}: ") and message in err
    assert gateway.commands == []
