"""The long-running servers and the local stack: `services`, `serve`, `up`,
`smoke`, `demo` and `mcp`.

Each hands over to its own module (infra/local/, infra/http/server.py,
infra/demo/, infra/mcp/), imported only when the command runs; what stays here is
turning flags and environment variables into that module's options."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from grimoire.infra.cli import common
from grimoire.infra.settings import Settings

if TYPE_CHECKING:
    from grimoire.infra.local.up import UpOptions

__all__ = ["COMMANDS", "run_mcp", "run_serve"]


def run_serve(settings: Settings, host: str | None, port: int | None) -> int:
    """`grimoire serve`: the HTTP API until interrupted."""
    from grimoire.infra.http.server import run_server

    # uvicorn re-raises the signal it shut down on, once it has closed everything.
    with contextlib.suppress(KeyboardInterrupt):
        run_server(settings, host=host or settings.http.host, port=port or settings.http.port)
    return 0


def run_mcp(args: argparse.Namespace) -> int:
    """`grimoire mcp`: serve until interrupted. On stdio, stdout is the protocol's:
    logs go to stderr (where `configure_logging` already sends them)."""
    from grimoire.infra.mcp.server import McpOptions, run_server

    options = McpOptions(
        api_url=args.api or os.environ.get("GRIMOIRE_API_URL") or "http://127.0.0.1:8080",
        # A key on the command line is visible to other users in `ps`: the environment
        # is the better place, the flag is for a quick local try.
        api_key=args.key or os.environ.get("GRIMOIRE_API_KEY") or None,
        agent_id=args.agent,
        allow_destructive=args.allow_destructive,
    )
    # Ctrl-C is how a person stops it: no traceback for that.
    with contextlib.suppress(KeyboardInterrupt):
        run_server(options, transport=args.transport, host=args.host, port=args.port)
    return 0


def _run_serve(settings: Settings, args: argparse.Namespace) -> int:
    return run_serve(settings, args.host, args.port)


def _run_mcp(_settings: Settings, args: argparse.Namespace) -> int:
    return run_mcp(args)


def _up_options(args: argparse.Namespace, state: str) -> UpOptions:
    from grimoire.infra.local.up import UpOptions

    return UpOptions(
        state_dir=Path(os.environ.get("GRIMOIRE_STATE_DIR", ".grimoire")) / state,
        kafka_port=args.kafka_port,
        redis_port=args.redis_port,
        http_port=args.http_port,
        mcp_port=args.mcp_port,
        tenant_prefix=getattr(args, "tenant_prefix", ""),
        durable=not getattr(args, "memory", True),
    )


def _run_services(_settings: Settings, args: argparse.Namespace) -> int:
    from grimoire.infra.local import services as local_services

    return local_services.main([args.action])


def _run_up(settings: Settings, args: argparse.Namespace) -> int:
    from grimoire.infra.local.up import run_up

    return run_up(settings.with_values(auth_enabled=not args.no_auth), _up_options(args, "run"))


def _run_smoke(settings: Settings, args: argparse.Namespace) -> int:
    from grimoire.infra.local.smoke import SmokeOptions, run_smoke

    report = run_smoke(
        settings.with_values(topic_prefix=f"smoke{int(time.time())}"),
        SmokeOptions(up=_up_options(args, "smoke"), screenshot=Path(args.screenshot)),
    )
    sys.stdout.write(orjson.dumps(report).decode() + "\n")
    return 0 if report["passed"] else 1


def _run_demo(settings: Settings, args: argparse.Namespace) -> int:
    from grimoire.infra.demo.run import run_demo

    return run_demo(settings, ticks=args.ticks, block_interval_s=args.block_interval)


def _stack_command(
    sub: common.Subparsers, name: str, help: str, *, kafka: int, redis: int, http: int, mcp: int
) -> argparse.ArgumentParser:
    """The parser of a command that starts a local stack (`up`, `smoke`): its loopback
    ports first."""
    parser = sub.add_parser(name, help=help)
    parser.add_argument("--kafka-port", type=int, default=kafka)
    parser.add_argument("--redis-port", type=int, default=redis)
    parser.add_argument("--http-port", type=int, default=http)
    parser.add_argument("--mcp-port", type=int, default=mcp)
    return parser


def _add_services(sub: common.Subparsers) -> None:
    services = sub.add_parser("services", help="local tansu + Redis: up | down | status")
    services.add_argument("action", choices=["up", "down", "status"])


def _add_serve(sub: common.Subparsers) -> None:
    serve = sub.add_parser(
        "serve", help="the HTTP API (recall, memories, episodes, stats, commands, /metrics)"
    )
    serve.add_argument("--host", default=None, help="address to bind (default $GRIMOIRE_HTTP_HOST)")
    serve.add_argument(
        "--port", type=int, default=None, help="port (default $GRIMOIRE_HTTP_PORT, 8080)"
    )


def _add_up(sub: common.Subparsers) -> None:
    up = _stack_command(
        sub,
        "up",
        help="the whole service locally (broker, Redis, worker, HTTP API, inspector, MCP) "
        "until Ctrl-C",
        kafka=9092,
        redis=6379,
        http=8080,
        mcp=8765,
    )
    up.add_argument(
        "--tenant-prefix",
        default="",
        help="the first tenant key reaches agent ids with this prefix (default: every agent)",
    )
    up.add_argument(
        "--no-auth", action="store_true", help="switch tenant keys off (local development)"
    )
    up.add_argument(
        "--memory",
        action="store_true",
        help="keep the broker's log and Redis in memory (gone on stop) instead of on disk",
    )


def _add_smoke(sub: common.Subparsers) -> None:
    smoke = _stack_command(
        sub,
        "smoke",
        help="start the stack as `up` does, exercise every HTTP route and MCP tool, tenant "
        "keys on HTTP and Kafka, metrics and the inspector; JSON on the last line",
        kafka=19892,
        redis=16892,
        http=18089,
        mcp=18769,
    )
    smoke.add_argument("--screenshot", default="bench-results/inspector.png")


def _add_demo(sub: common.Subparsers) -> None:
    demo = sub.add_parser("demo", help="services + worker + simulated agent + recall questions")
    demo.add_argument("--ticks", type=int, default=6)
    demo.add_argument("--block-interval", type=float, default=None)


def _add_mcp(sub: common.Subparsers) -> None:
    mcp_cmd = sub.add_parser(
        "mcp", help="the MCP server (stdio or streamable HTTP), a client of the HTTP API"
    )
    mcp_cmd.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    mcp_cmd.add_argument("--host", default="127.0.0.1", help="HTTP transport: address to bind")
    mcp_cmd.add_argument("--port", type=int, default=8765, help="HTTP transport: port (path /mcp)")
    mcp_cmd.add_argument(
        "--api", default=None, help="the HTTP API's base URL (default $GRIMOIRE_API_URL or :8080)"
    )
    mcp_cmd.add_argument(
        "--key", default=None, help="a tenant key gmk_... (default $GRIMOIRE_API_KEY)"
    )
    mcp_cmd.add_argument("--agent", default=None, help="the tools' default agent id")
    mcp_cmd.add_argument(
        "--allow-destructive", action="store_true", help="also offer the forget and retract tools"
    )


COMMANDS: dict[str, common.Subcommand] = {
    "services": common.Subcommand(_add_services, _run_services),
    "serve": common.Subcommand(_add_serve, _run_serve),
    "up": common.Subcommand(_add_up, _run_up),
    "smoke": common.Subcommand(_add_smoke, _run_smoke),
    "demo": common.Subcommand(_add_demo, _run_demo),
    "mcp": common.Subcommand(_add_mcp, _run_mcp),
}
