"""`grimoire mcp`: its flags become the server's options, and over stdio the real
process speaks MCP on stdout (logs stay on stderr)."""

from __future__ import annotations

import socket
import sys
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp_types import TextContent

from grimoire.infra import cli
from grimoire.infra.mcp import READ_WRITE_TOOLS, McpOptions
from grimoire.infra.mcp import server as mcp_server


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []

    def fake_run(options: McpOptions, **how: Any) -> None:
        runs.append({"options": options, **how})

    monkeypatch.setattr(mcp_server, "run_server", fake_run)
    monkeypatch.delenv("GRIMOIRE_API_URL", raising=False)
    monkeypatch.delenv("GRIMOIRE_API_KEY", raising=False)
    return runs


def test_defaults_are_stdio_against_the_local_api(served: list[dict[str, Any]]) -> None:
    assert cli.main(["mcp"]) == 0
    assert served == [
        {
            "options": McpOptions(api_url="http://127.0.0.1:8080"),
            "transport": "stdio",
            "host": "127.0.0.1",
            "port": 8765,
        }
    ]


def test_every_flag_reaches_the_server(served: list[dict[str, Any]]) -> None:
    argv = [
        "mcp",
        "--transport",
        "http",
        "--host",
        "0.0.0.0",
        "--port",
        "9000",
        "--api",
        "http://api:8080",
        "--key",
        "gmk_a.b",
        "--agent",
        "fleet/golem-1",
        "--allow-destructive",
    ]
    assert cli.main(argv) == 0
    assert served == [
        {
            "options": McpOptions(
                api_url="http://api:8080",
                api_key="gmk_a.b",
                agent_id="fleet/golem-1",
                allow_destructive=True,
            ),
            "transport": "http",
            "host": "0.0.0.0",
            "port": 9000,
        }
    ]


def test_the_url_and_key_come_from_the_environment(
    served: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRIMOIRE_API_URL", "http://env-api:1")
    monkeypatch.setenv("GRIMOIRE_API_KEY", "gmk_env.key")
    assert cli.main(["mcp"]) == 0
    options = served[0]["options"]
    assert (options.api_url, options.api_key) == ("http://env-api:1", "gmk_env.key")


def test_an_unknown_transport_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["mcp", "--transport", "sse"])
    assert exited.value.code == 2
    assert "--transport" in capsys.readouterr().err


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.timeout(60)
async def test_the_stdio_process_lists_tools_and_reports_an_unreachable_api() -> None:
    port = _closed_port()
    command = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "grimoire.infra.cli",
            "mcp",
            "--agent",
            "golem-1",
            "--api",
            f"http://127.0.0.1:{port}",
        ],
    )
    async with Client(command) as client:
        tools = sorted(tool.name for tool in (await client.list_tools()).tools)
        result = await client.call_tool("recall", {"query": "rpc"})
    assert tools == sorted(READ_WRITE_TOOLS)
    assert result.is_error
    block = result.content[0]
    assert isinstance(block, TextContent)
    assert "could not be reached (POST /v1/agents/golem-1/recall)" in block.text
