"""The operation commands of the HTTP API as `grimoire` commands: search, memory,
episodes, config get/set, retract, forget, pin/unpin, events and agents.

Each test runs `cli.main` as a person would, with the Kafka client replaced by a
recording fake (`common.gateway`) and the store reads either replaced (the RediSearch
reads) or run against the reference stores of `grimoire.tables.testing` (the
configuration): what is asserted is the argument parsing, what would be sent, what
is printed (one JSON object a line) and the exit code (0 done, 1 nothing there,
2 bad arguments, with a one-line reason on stderr)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from grimoire.infra import cli
from grimoire.infra.cli import commands, common, events, reads
from grimoire.streams.config.agent_config import AgentConfig
from grimoire.tables.testing.config_store import InMemoryConfigStore
from grimoire.topics.client import (
    RecallFailed,
    RecallTimeout,
    RecallUnauthorized,
)
from grimoire.topics.schemas import RecallItemV1
from tests.support.cli import assert_help, exit_status, patch_opener, run_json
from tests.support.gateway import RecordingGateway

AGENT = "fleet-a/golem-1"
MEMORY = "01a0c450-6c00-710a-a93a-843f1b1d5b63"


@dataclass
class FakeGateway(RecordingGateway):
    """What the commands send through Kafka, recorded; `api_keys` holds the key each
    client was opened with."""

    api_keys: list[str | None] = field(default_factory=list)

    def items(self, agent_id: str, options: dict[str, Any]) -> tuple[RecallItemV1, ...]:
        return tuple(
            RecallItemV1(
                id=f"m-{n}",
                agent_id=agent_id,
                kind="episode",
                layer="observation",
                gist=f"RPC timed out {n}",
                ts=1_790_000_000_000,
                score=0.9 - n / 10,
                lanes=["bm25"],
                source_event_id=f"e-{n}",
                scores={"relevance": 0.8} if options.get("explain") else None,
            )
            for n in range(2)
        )


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch) -> FakeGateway:
    fake = FakeGateway()

    @contextlib.asynccontextmanager
    async def opened(settings: object, api_key: str | None) -> AsyncIterator[FakeGateway]:
        fake.api_keys.append(api_key)
        yield fake

    monkeypatch.setattr(common, "gateway", opened)
    monkeypatch.delenv("GRIMOIRE_API_KEY", raising=False)
    return fake


@pytest.fixture
def configs(monkeypatch: pytest.MonkeyPatch) -> InMemoryConfigStore:
    return patch_opener(monkeypatch, commands, "_config_store", InMemoryConfigStore())


@pytest.fixture
def memories(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """The memories the read helpers find, by (agent, id); anything else is absent."""
    stored = {
        MEMORY: {
            "id": MEMORY,
            "agent_id": AGENT,
            "text": "RPC endpoint timed out twice on node seven, full text",
            "gist": "RPC endpoint timed out",
            "pinned": False,
        }
    }

    async def memory(
        settings: object, agent_id: str, memory_id: str, depth: int | None
    ) -> dict[str, Any] | None:
        found = stored.get(memory_id)
        if found is None or found["agent_id"] != agent_id:
            return None
        if depth is None:
            return dict(found)
        graph = {
            "depth": depth,
            "nodes": [
                {"id": memory_id, "type": "memory", "label": found["gist"]},
                {"id": "key:err:timeout", "type": "key", "label": "err:timeout", "degree": 1},
            ],
            "edges": [{"source": memory_id, "target": "key:err:timeout"}],
            "truncated": False,
        }
        return {**found, "graph": graph}

    async def exists(settings: object, agent_id: str, memory_id: str) -> bool:
        return await memory(settings, agent_id, memory_id, None) is not None

    monkeypatch.setattr(reads, "_memory", memory)
    monkeypatch.setattr(commands, "_memory_exists", exists)
    return stored


# ---- every command has --help; argparse refuses what it cannot parse -------------

COMMANDS = (
    ["agents"],
    ["search"],
    ["memory"],
    ["episodes"],
    ["config"],
    ["config", "get"],
    ["config", "set"],
    ["retract"],
    ["forget"],
    ["pin"],
    ["unpin"],
    ["events"],
)


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_every_command_has_help(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert_help(capsys, argv)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["search", "rpc"], "--agent"),
        (["search", "--agent", AGENT], "query"),
        (["search", "--agent", AGENT, "--k", "many", "rpc"], "invalid int value"),
        (["memory", "--agent", AGENT], "MEMORY_ID"),
        (["episodes"], "--agent"),
        (["config"], "get"),
        (["config", "set", "--agent", AGENT], "key=value"),
        (["retract", "--agent", AGENT], "--source-event-id"),
        (["pin", MEMORY], "--agent"),
        (["events", "--agent", AGENT, "--kind", "dream", "--json", "{}"], "invalid choice"),
        (["events", "--agent", AGENT, "--kind", "episode"], "--json"),
    ],
)
def test_unparseable_arguments_exit_2_with_usage(
    gateway: FakeGateway, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert exit_status(argv) == 2
    assert message in capsys.readouterr().err
    assert gateway.recalls == gateway.commands == gateway.published == []


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "--agent", "has space", "rpc"],
        ["memory", "--agent", "a:b", MEMORY],
        ["episodes", "--agent", "x" * 200],
        ["config", "get", "--agent", "{bad}"],
        ["config", "set", "--agent", "{bad}", "top_k=5"],
        ["retract", "--agent", "a b", "--source-event-id", "e-1"],
        ["forget", "--agent", "a b", "--yes"],
        ["pin", "--agent", "a b", MEMORY],
        ["events", "--agent", "a b", "--kind", "episode", "--json", "{}"],
    ],
)
def test_a_bad_agent_id_is_refused_before_anything_is_read_or_sent(
    gateway: FakeGateway, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, printed, err = run_json(capsys, *argv)
    assert (code, printed) == (2, [])
    assert err.startswith(f"grimoire {argv[0]}")
    assert "not an agent id" in err and err.count("\n") == 1
    assert gateway.recalls == gateway.commands == gateway.published == []


# ---- search ----------------------------------------------------------------------


def test_search_counts_no_usage_and_prints_one_line_per_item(
    gateway: FakeGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    code, printed, _ = run_json(
        capsys, "search", "--agent", AGENT, "--k", "2", "--explain", "rpc timeouts"
    )
    assert code == 0
    (asked,) = gateway.recalls
    assert asked["agent_id"] == AGENT and asked["query"] == "rpc timeouts"
    assert asked["record_usage"] is False
    assert asked["k"] == 2 and asked["explain"] is True
    assert [item["id"] for item in printed] == ["m-0", "m-1"]
    assert printed[0]["scores"] == {"relevance": 0.8}


def test_search_without_k_leaves_the_agents_default(
    gateway: FakeGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_json(capsys, "search", "--agent", AGENT, "rpc")[0] == 0
    (asked,) = gateway.recalls
    assert asked["k"] is None and asked["explain"] is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--k", "0", "rpc"], "k: 'k' must be >= 1"),
        (["--k", "100000", "rpc"], "k:"),
        (["   "], "query"),
    ],
)
def test_search_checks_the_request_with_the_workers_parser_first(
    gateway: FakeGateway, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, printed, err = run_json(capsys, "search", "--agent", AGENT, *argv)
    assert (code, printed) == (2, [])
    assert message in err
    assert gateway.recalls == []


@pytest.mark.parametrize(
    ("failure", "code", "message"),
    [
        (RecallTimeout("no reply"), 1, "no worker answered within"),
        (RecallUnauthorized("unauthorized: revoked"), 1, "refused the key"),
        (RecallFailed("invalid_value: unknown kinds"), 2, "unknown kinds"),
        (RecallFailed("internal_error: boom"), 1, "internal_error"),
    ],
)
def test_search_failures_are_one_line_and_an_exit_code(
    gateway: FakeGateway,
    capsys: pytest.CaptureFixture[str],
    failure: Exception,
    code: int,
    message: str,
) -> None:
    gateway.fail_with = failure
    exit_code, printed, err = run_json(capsys, "search", "--agent", AGENT, "rpc")
    assert (exit_code, printed) == (code, [])
    assert err.startswith("grimoire search: ") and message in err
    assert "Traceback" not in err


# ---- --api-key ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "--agent", AGENT, "rpc"],
        ["config", "set", "--agent", AGENT, "top_k=5"],
        ["retract", "--agent", AGENT, "--source-event-id", "e-1"],
        ["forget", "--agent", AGENT, "--yes"],
        ["pin", "--agent", AGENT, MEMORY],
        ["unpin", "--agent", AGENT, MEMORY],
    ],
)
def test_the_api_key_comes_from_the_flag_or_the_environment(
    gateway: FakeGateway,
    configs: InMemoryConfigStore,
    memories: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
) -> None:
    assert run_json(capsys, *argv)[0] == 0
    monkeypatch.setenv("GRIMOIRE_API_KEY", "gmk_fromenv.secret")
    assert run_json(capsys, *argv)[0] == 0
    assert run_json(capsys, *argv[:1], *argv[1:], "--api-key", "gmk_flag.secret")[0] == 0
    assert gateway.api_keys == [None, "gmk_fromenv.secret", "gmk_flag.secret"]


def test_recall_takes_an_api_key_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[tuple[Any, ...]] = []

    async def fake_recall(
        settings: object, agent_id: str, query: str, k: int, api_key: str | None = None
    ) -> None:
        asked.append((agent_id, query, k, api_key))

    monkeypatch.setattr(reads, "_recall", fake_recall)
    monkeypatch.setenv("GRIMOIRE_API_KEY", "gmk_env.s")
    assert cli.main(["recall", "--agent", AGENT, "rpc"]) == 0
    assert cli.main(["recall", "--agent", AGENT, "--api-key", "gmk_flag.s", "--k", "3", "q"]) == 0
    assert asked == [(AGENT, "rpc", 5, "gmk_env.s"), (AGENT, "q", 3, "gmk_flag.s")]


def test_the_key_is_not_shown_in_help(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GRIMOIRE_API_KEY", "gmk_secret.dontshow")
    with pytest.raises(SystemExit):
        cli.main(["search", "--help"])
    help_text = capsys.readouterr().out
    assert "$GRIMOIRE_API_KEY" in help_text and "dontshow" not in help_text


# ---- memory ------------------------------------------------------------------------


def test_memory_prints_its_full_text(
    memories: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, (found,), _ = run_json(capsys, "memory", "--agent", AGENT, MEMORY)
    assert code == 0
    assert found["id"] == MEMORY and found["text"].endswith("full text")
    assert "graph" not in found


def test_memory_with_graph_adds_its_neighbourhood(
    memories: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, (found,), _ = run_json(
        capsys, "memory", "--agent", AGENT, "--graph", "--depth", "2", MEMORY
    )
    assert code == 0
    assert found["graph"]["depth"] == 2
    assert {node["type"] for node in found["graph"]["nodes"]} == {"memory", "key"}
    assert found["graph"]["edges"] == [{"source": MEMORY, "target": "key:err:timeout"}]


@pytest.mark.parametrize("agent", [AGENT, "fleet-b/golem-1"])
def test_a_missing_or_another_agents_memory_exits_1(
    memories: dict[str, Any], capsys: pytest.CaptureFixture[str], agent: str
) -> None:
    memory_id = "nope" if agent == AGENT else MEMORY
    code, printed, err = run_json(capsys, "memory", "--agent", agent, memory_id)
    assert (code, printed) == (1, [])
    assert err == f"grimoire memory: agent {agent!r} has no memory {memory_id!r}\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--graph", "--depth", "0", MEMORY], "--depth must be within [1, 3], got 0"),
        (["--graph", "--depth", "4", MEMORY], "--depth must be within [1, 3], got 4"),
        ([" "], "MEMORY_ID must not be empty"),
    ],
)
def test_memory_refuses_bad_arguments(
    memories: dict[str, Any], capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, printed, err = run_json(capsys, "memory", "--agent", AGENT, *argv)
    assert (code, printed) == (2, [])
    assert message in err


def test_the_memory_helper_shapes_the_graph_as_the_http_route(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`_memory` itself, on stand-ins for the two inspection reads."""
    import asyncio

    from grimoire.tables.memory import inspect

    async def detail(redis: object, prefix: str, agent_id: str, memory_id: str) -> Any:
        return {"id": memory_id, "text": "full"} if agent_id == AGENT else None

    async def around(redis: object, prefix: str, agent_id: str, memory_id: str, **kw: Any) -> Any:
        assert kw == {"depth": 2}
        return inspect.Neighbourhood(
            nodes=(
                inspect.GraphNode(memory_id, "memory", "gist", kind="episode", status="live"),
                inspect.GraphNode("key:k", "key", "k", degree=3),
            ),
            edges=(inspect.GraphEdge(memory_id, "key:k"),),
        )

    monkeypatch.setattr(inspect, "memory_detail", detail)
    monkeypatch.setattr(inspect, "neighbourhood", around)
    patch_opener(monkeypatch, common, "memory_redis", object())
    settings = cli.Settings()
    assert asyncio.run(reads._memory(settings, AGENT, "m", None)) == {"id": "m", "text": "full"}
    assert asyncio.run(reads._memory(settings, "other", "m", 2)) is None
    found = asyncio.run(reads._memory(settings, AGENT, "m", 2))
    assert found is not None
    assert found["graph"] == {
        "depth": 2,
        "nodes": [
            {"id": "m", "type": "memory", "label": "gist", "kind": "episode", "status": "live"},
            {"id": "key:k", "type": "key", "label": "k", "degree": 3},
        ],
        "edges": [{"source": "m", "target": "key:k"}],
        "truncated": False,
    }


# ---- episodes ----------------------------------------------------------------------


@pytest.fixture
def episodes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    asked: list[tuple[str, int, int]] = []

    async def listing(
        settings: object, agent_id: str, limit: int, offset: int
    ) -> list[dict[str, Any]]:
        asked.append((agent_id, limit, offset))
        rows = [
            {"episode_id": f"run:r-{n}", "members": 2, "first_ts": n, "last_ts": n + 1}
            for n in range(3)
        ]
        return rows[offset : offset + limit]

    async def one(settings: object, agent_id: str, episode_id: str) -> list[dict[str, Any]]:
        if (agent_id, episode_id) != (AGENT, "turn:t-1"):
            return []
        return [
            {"id": "m-1", "role": "trigger", "kind": "transcript", "gist": "disk full"},
            {"id": "m-2", "role": "action", "kind": "tool", "gist": "rm -rf /tmp"},
        ]

    monkeypatch.setattr(reads, "_episodes", listing)
    monkeypatch.setattr(reads, "_episode", one)
    return asked


def test_episodes_lists_one_line_each(
    episodes: list[tuple[str, int, int]], capsys: pytest.CaptureFixture[str]
) -> None:
    code, printed, _ = run_json(capsys, "episodes", "--agent", AGENT)
    assert code == 0
    assert [e["episode_id"] for e in printed] == ["run:r-0", "run:r-1", "run:r-2"]
    code, printed, _ = run_json(
        capsys, "episodes", "--agent", AGENT, "--limit", "1", "--offset", "1"
    )
    assert [e["episode_id"] for e in printed] == ["run:r-1"]
    assert episodes == [(AGENT, 50, 0), (AGENT, 1, 1)]


def test_one_episode_shows_its_members_with_roles(
    episodes: list[tuple[str, int, int]], capsys: pytest.CaptureFixture[str]
) -> None:
    code, (shown,), _ = run_json(capsys, "episodes", "--agent", AGENT, "--episode", "turn:t-1")
    assert code == 0
    assert shown["episode_id"] == "turn:t-1"
    assert [(m["id"], m["role"]) for m in shown["members"]] == [
        ("m-1", "trigger"),
        ("m-2", "action"),
    ]


def test_a_missing_episode_exits_1(
    episodes: list[tuple[str, int, int]], capsys: pytest.CaptureFixture[str]
) -> None:
    code, printed, err = run_json(capsys, "episodes", "--agent", AGENT, "--episode", "turn:zzz")
    assert (code, printed) == (1, [])
    assert err == f"grimoire episodes: agent {AGENT!r} has no episode 'turn:zzz'\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--limit", "0"], "--limit must be within [1, 500], got 0"),
        (["--limit", "501"], "--limit must be within [1, 500]"),
        (["--offset", "-1"], "--offset must be within"),
        (["--episode", ""], "--episode must not be empty"),
    ],
)
def test_episodes_refuses_bad_arguments(
    episodes: list[tuple[str, int, int]],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    code, printed, err = run_json(capsys, "episodes", "--agent", AGENT, *argv)
    assert (code, printed) == (2, [])
    assert message in err
    assert episodes == []


# ---- config ------------------------------------------------------------------------


def test_config_get_prints_every_setting(
    configs: InMemoryConfigStore, capsys: pytest.CaptureFixture[str]
) -> None:
    code, (shown,), _ = run_json(capsys, "config", "get", "--agent", AGENT)
    assert code == 0
    assert shown == {"agent_id": AGENT, "config": AgentConfig().to_wire()}
    configs.configs[AGENT] = AgentConfig(top_k=7, ingest_enabled=False)
    _, (shown,), _ = run_json(capsys, "config", "get", "--agent", AGENT)
    assert shown["config"]["top_k"] == 7 and shown["config"]["ingest_enabled"] is False


def test_config_set_parses_json_values_and_sends_a_configure_command(
    gateway: FakeGateway, configs: InMemoryConfigStore, capsys: pytest.CaptureFixture[str]
) -> None:
    configs.configs[AGENT] = AgentConfig(time_window_ms=60_000)
    code, (accepted,), _ = run_json(
        capsys,
        "config",
        "set",
        "--agent",
        AGENT,
        "ingest_enabled=false",
        "top_k=8",
        'layers=["observation"]',
        'lane_weights={"bm25": 2}',
        "time_window_ms=null",
    )
    assert code == 0
    (command,) = gateway.commands
    assert command.command == "configure" and command.agent_id == AGENT
    assert command.config == {
        "ingest_enabled": False,
        "top_k": 8,
        "layers": ["observation"],
        "lane_weights": {"bm25": 2},
        "time_window_ms": None,
    }
    assert accepted["accepted"] is True and accepted["event_id"] == command.event_id
    assert accepted["config"]["top_k"] == 8
    assert accepted["config"]["time_window_ms"] is None  # reset to the default
    assert accepted["config"]["lane_weights"] == {"bm25": 2.0}


def test_config_set_a_value_that_is_not_json_is_text(
    gateway: FakeGateway, configs: InMemoryConfigStore, capsys: pytest.CaptureFixture[str]
) -> None:
    code, printed, err = run_json(capsys, "config", "set", "--agent", AGENT, "top_k=many")
    assert (code, printed) == (2, [])
    assert "config.top_k: 'top_k' must be an integer (wrong_type)" in err


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (["top_k=0"], "config.top_k: 'top_k' must be 1..200"),
        (["top_k=true"], "config.top_k: 'top_k' must be an integer"),
        (["ingest_enabled=maybe"], "config.ingest_enabled: 'ingest_enabled' must be true or false"),
        (["layers=observation"], "config.layers: 'layers' must be a non-empty list"),
        (['layers=["dreams"]'], "unknown layer 'dreams'"),
        (['lane_weights={"vibes": 1}'], "unknown lane 'vibes'"),
        (["colour=blue"], "config.colour: unknown setting 'colour'"),
        (["top_k"], "expected key=value, got 'top_k'"),
        (["=5"], "expected key=value"),
        (["top_k=5", "top_k=6"], "'top_k' is given twice"),
    ],
)
def test_config_set_refuses_an_invalid_value_before_anything_is_sent(
    gateway: FakeGateway,
    configs: InMemoryConfigStore,
    capsys: pytest.CaptureFixture[str],
    pairs: list[str],
    message: str,
) -> None:
    code, printed, err = run_json(capsys, "config", "set", "--agent", AGENT, *pairs)
    assert (code, printed) == (2, [])
    assert err.startswith("grimoire config set: ") and message in err
    assert err.count("\n") == 1
    assert gateway.commands == []


# ---- retract, forget, pin, unpin -----------------------------------------------------


def test_retract_sends_the_source_event_id(
    gateway: FakeGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    code, (accepted,), _ = run_json(capsys, "retract", "--agent", AGENT, "--source-event-id", "e-1")
    assert code == 0
    (command,) = gateway.commands
    assert (command.command, command.agent_id, command.source_event_id) == (
        "retract",
        AGENT,
        "e-1",
    )
    assert command.event_id is not None and command.event_id.startswith("cli-")
    assert accepted == {
        "accepted": True,
        "command": "retract",
        "agent_id": AGENT,
        "event_id": command.event_id,
        "source_event_id": "e-1",
    }


@pytest.mark.parametrize("source", ["has space", "", "x" * 500])
def test_retract_refuses_an_id_no_event_can_have(
    gateway: FakeGateway, capsys: pytest.CaptureFixture[str], source: str
) -> None:
    code, printed, err = run_json(capsys, "retract", "--agent", AGENT, "--source-event-id", source)
    assert (code, printed) == (2, [])
    assert err.startswith("grimoire retract: --source-event-id: ")
    assert gateway.commands == []


def test_forget_is_refused_without_yes(
    gateway: FakeGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    code, printed, err = run_json(capsys, "forget", "--agent", AGENT)
    assert (code, printed) == (2, [])
    assert "without --yes" in err
    assert gateway.commands == []


def test_forget_with_yes_sends_the_command(
    gateway: FakeGateway, capsys: pytest.CaptureFixture[str]
) -> None:
    code, (accepted,), _ = run_json(capsys, "forget", "--agent", AGENT, "--yes")
    assert code == 0
    (command,) = gateway.commands
    assert (command.command, command.agent_id) == ("forget", AGENT)
    assert accepted["accepted"] is True and accepted["command"] == "forget"


@pytest.mark.parametrize("action", ["pin", "unpin"])
def test_pin_and_unpin_send_the_memory_id(
    gateway: FakeGateway,
    memories: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    action: str,
) -> None:
    code, (accepted,), _ = run_json(capsys, action, "--agent", AGENT, MEMORY)
    assert code == 0
    (command,) = gateway.commands
    assert (command.command, command.agent_id, command.memory_id) == (action, AGENT, MEMORY)
    assert accepted["accepted"] is True and accepted["memory_id"] == MEMORY


@pytest.mark.parametrize("action", ["pin", "unpin"])
@pytest.mark.parametrize(("agent", "memory_id"), [(AGENT, "nope"), ("fleet-b/x", MEMORY)])
def test_pinning_a_memory_the_agent_does_not_have_exits_1_and_sends_nothing(
    gateway: FakeGateway,
    memories: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    action: str,
    agent: str,
    memory_id: str,
) -> None:
    code, printed, err = run_json(capsys, action, "--agent", agent, memory_id)
    assert (code, printed) == (1, [])
    assert err == f"grimoire {action}: agent {agent!r} has no memory {memory_id!r}\n"
    assert gateway.commands == []


def test_each_command_is_a_new_one(
    gateway: FakeGateway, memories: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    for action in ("pin", "unpin", "pin"):
        run_json(capsys, action, "--agent", AGENT, MEMORY)
    assert len({command.event_id for command in gateway.commands}) == 3


# ---- events ------------------------------------------------------------------------


def test_the_event_kinds_are_the_http_routes() -> None:
    from grimoire.infra.http.events import EVENT_KINDS

    assert tuple(EVENT_KINDS) == events._EVENT_KINDS


@pytest.mark.parametrize(
    ("kind", "event", "topic"),
    [
        (
            "episode",
            {"ts": 1_790_000_000_000, "text": "RPC timed out", "event_id": "e-1"},
            "episodes",
        ),
        ("tool_event", {"ts": 1_790_000_000_000, "tool": "rpc", "error": "timeout"}, "tool_events"),
        (
            "transcript",
            {"ts": 1_790_000_000_000, "line": {"role": "user", "content": "disk is full"}},
            "transcripts",
        ),
    ],
)
def test_events_publishes_a_checked_event_to_its_topic(
    gateway: FakeGateway,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    event: dict[str, Any],
    topic: str,
) -> None:
    code, (accepted,), _ = run_json(
        capsys, "events", "--agent", AGENT, "--kind", kind, "--json", orjson.dumps(event).decode()
    )
    assert code == 0
    ((sent_to, key, raw),) = gateway.published
    assert sent_to == getattr(gateway.topics, topic) and key == AGENT
    assert orjson.loads(raw) == {**event, "agent_id": AGENT}
    assert accepted["accepted"] is True and accepted["kind"] == kind
    assert accepted["event_id"]
    assert isinstance(accepted["candidates"], list)
    if kind == "episode":
        assert accepted["event_id"] == "e-1" and len(accepted["candidates"]) == 1


def test_events_reads_a_file_or_standard_input(
    gateway: FakeGateway,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io

    event = {"ts": 1_790_000_000_000, "text": "from a file"}
    path = tmp_path / "event.json"
    path.write_bytes(orjson.dumps(event))
    assert (
        run_json(capsys, "events", "--agent", AGENT, "--kind", "episode", "--json", f"@{path}")[0]
        == 0
    )

    class Stdin:
        buffer = io.BytesIO(orjson.dumps({**event, "text": "from stdin"}))

    monkeypatch.setattr("sys.stdin", Stdin())
    assert run_json(capsys, "events", "--agent", AGENT, "--kind", "episode", "--json", "-")[0] == 0
    texts = [orjson.loads(raw)["text"] for _, _, raw in gateway.published]
    assert texts == ["from a file", "from stdin"]


@pytest.mark.parametrize(
    ("kind", "given", "message"),
    [
        ("episode", "{not json", "--json is not JSON"),
        ("episode", "[1, 2]", "--json must be a JSON object"),
        ("episode", '{"ts": 1790000000000}', "text"),
        ("episode", '{"ts": "soon", "text": "x"}', "ts"),
        ("episode", '{"ts": 1790000000000, "text": "x", "agent_id": "other"}', "agent_id"),
        ("tool_event", '{"ts": 1790000000000}', "tool"),
        ("transcript", '{"ts": 1790000000000, "line": "hello"}', "line"),
        ("episode", "@/nonexistent/event.json", "cannot read /nonexistent/event.json"),
    ],
)
def test_events_refuses_what_the_worker_would_dead_letter(
    gateway: FakeGateway,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    given: str,
    message: str,
) -> None:
    code, printed, err = run_json(
        capsys, "events", "--agent", AGENT, "--kind", kind, "--json", given
    )
    assert (code, printed) == (2, [])
    assert err.startswith("grimoire events: ") and message in err
    assert err.count("\n") == 1
    assert gateway.published == []


# ---- agents ------------------------------------------------------------------------


def test_agents_lists_one_line_each(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def known(settings: object) -> list[str]:
        return ["a", "fleet-a/golem-1"]

    monkeypatch.setattr(reads, "_agents", known)
    assert run_json(capsys, "agents") == (
        0,
        [{"agent_id": "a"}, {"agent_id": "fleet-a/golem-1"}],
        "",
    )


# ---- services down: a message, not a traceback ---------------------------------------


def test_an_unreachable_store_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def down(*args: object) -> Any:
        import redis.exceptions

        raise redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:1.")

    monkeypatch.setattr(reads, "_memory", down)
    code, printed, err = run_json(capsys, "memory", "--agent", AGENT, MEMORY)
    assert (code, printed) == (1, [])
    assert (
        err == "grimoire memory: the store is unavailable: Error 111 connecting to 127.0.0.1:1.\n"
    )


def test_an_unreachable_broker_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from aiokafka.errors import KafkaConnectionError

    @contextlib.asynccontextmanager
    async def down(settings: object, api_key: str | None) -> AsyncIterator[None]:
        raise KafkaConnectionError("Unable to bootstrap")
        yield

    monkeypatch.setattr(common, "gateway", down)
    code, printed, err = run_json(capsys, "forget", "--agent", AGENT, "--yes")
    assert (code, printed) == (1, [])
    assert err.startswith("grimoire forget: cannot reach the broker at ")
    assert err.count("\n") == 1


def test_a_bug_is_not_hidden_as_an_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(*args: object) -> Any:
        raise KeyError("a bug")

    monkeypatch.setattr(reads, "_memory", broken)
    with pytest.raises(KeyError):
        cli.main(["memory", "--agent", AGENT, MEMORY])
