"""The reads of an agent's memory: `recall`, and the inspection commands `agents`,
`search`, `memory` and `episodes`.

`recall` and `search` ask the workers through Kafka (the worker's own recall parser
checks a search first, as POST …/search does); the others read Redis with the same
`grimoire.tables` functions as their HTTP routes (infra/http/agents.py,
memories.py, episodes.py), so a command and its route answer alike."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Any

import orjson

from grimoire.infra.cli import common
from grimoire.infra.cli.ops import operation
from grimoire.infra.settings import Settings
from grimoire.topics.declarations import TopicNames

if TYPE_CHECKING:
    from grimoire.topics.client import RecallAnswer

__all__ = ["COMMANDS"]

_MAX_EPISODES = 500  # as GET …/episodes?limit
_MAX_DEPTH = 3  # as GET …/graph?depth


async def _recall(
    settings: Settings, agent_id: str, query: str, k: int, api_key: str | None = None
) -> None:
    async with common.gateway(settings, api_key) as client:
        answer = await client.recall(agent_id, query, k=k)
        for item in answer.items:
            sys.stdout.buffer.write(orjson.dumps(item.asdict()) + b"\n")


async def _agents(settings: Settings) -> list[str]:
    from grimoire.tables.maintenance.ledger import known_agents

    async with common.memory_redis(settings) as redis:
        return sorted([agent async for agent in known_agents(redis, settings.broker.topic_prefix)])


async def _search(
    settings: Settings,
    agent_id: str,
    query: str,
    *,
    k: int | None,
    explain: bool,
    api_key: str | None,
) -> RecallAnswer:
    async with common.gateway(settings, api_key) as client:
        return await client.recall(
            agent_id,
            query,
            k=k,
            explain=explain or None,
            record_usage=False,  # inspection: the worker counts nothing
            timeout=settings.http.recall_timeout_s,
        )


async def _memory(
    settings: Settings, agent_id: str, memory_id: str, depth: int | None
) -> dict[str, Any] | None:
    """The memory with every stored field; with `depth`, its nexus-key
    neighbourhood under "graph" (as GET …/memories/{id} and …/graph)."""
    from grimoire.tables.memory.inspect import memory_detail, neighbourhood

    async with common.memory_redis(settings) as redis:
        found = await memory_detail(redis, settings.broker.topic_prefix, agent_id, memory_id)
        if found is None or depth is None:
            return found
        graph = await neighbourhood(
            redis, settings.broker.topic_prefix, agent_id, memory_id, depth=depth
        )
    if graph is None:  # gone between the two reads
        return None
    found["graph"] = graph.to_json(depth)
    return found


async def _episodes(
    settings: Settings, agent_id: str, limit: int, offset: int
) -> list[dict[str, Any]]:
    from dataclasses import asdict

    from grimoire.tables.memory.inspect import episodes

    async with common.memory_redis(settings) as redis:
        found = await episodes(
            redis, settings.broker.topic_prefix, agent_id, limit=limit, offset=offset
        )
    return [asdict(episode) for episode in found]


async def _episode(settings: Settings, agent_id: str, episode_id: str) -> list[dict[str, Any]]:
    """The episode's members with their roles; empty when the agent has no such one."""
    from dataclasses import asdict

    from grimoire.tables.memory.inspect import episode_members

    async with common.memory_redis(settings) as redis:
        members = await episode_members(redis, settings.broker.topic_prefix, agent_id, episode_id)
    return [asdict(member) for member in members]


def _run_recall(settings: Settings, args: argparse.Namespace) -> int:
    asyncio.run(_recall(settings, args.agent, args.query, args.k, common.api_key(args)))
    return 0


def _run_agents(settings: Settings, _args: argparse.Namespace) -> int:
    for agent_id in asyncio.run(_agents(settings)):
        common.print_line({"agent_id": agent_id})
    return 0


def _run_search(settings: Settings, args: argparse.Namespace) -> int:
    from grimoire.streams.inbound.events import Rejection
    from grimoire.streams.inbound.recall_request import parse_recall_request

    # The worker's own parser first (as POST …/search), with placeholders for the
    # routing fields the client fills in.
    wire: dict[str, Any] = {
        "agent_id": args.agent,
        "query": args.query,
        "reply_to": TopicNames(settings.broker.topic_prefix).reply_topic("cli"),
        "correlation_id": "cli",
    }
    if args.k is not None:
        wire["k"] = args.k
    parsed = parse_recall_request(orjson.dumps(wire), settings.recall_limits, settings.input_limits)
    if isinstance(parsed, Rejection):
        where = f"{parsed.field}: " if parsed.field else ""
        raise common.Refused(2, f"{where}{parsed.detail} ({parsed.reason})")
    answer = asyncio.run(
        _search(
            settings,
            args.agent,
            args.query,
            k=args.k,
            explain=args.explain,
            api_key=common.api_key(args),
        )
    )
    for item in answer.items:
        common.print_line(item.asdict())
    return 0


def _run_memory(settings: Settings, args: argparse.Namespace) -> int:
    memory_id = common.checked_id("MEMORY_ID", args.memory_id)
    depth = common.checked_range("--depth", args.depth, 1, _MAX_DEPTH) if args.graph else None
    found = asyncio.run(_memory(settings, args.agent, memory_id, depth))
    if found is None:
        raise common.Refused(1, f"agent {args.agent!r} has no memory {memory_id!r}")
    common.print_line(found)
    return 0


def _run_episodes(settings: Settings, args: argparse.Namespace) -> int:
    if args.episode is not None:
        episode_id = common.checked_id("--episode", args.episode)
        members = asyncio.run(_episode(settings, args.agent, episode_id))
        if not members:
            raise common.Refused(1, f"agent {args.agent!r} has no episode {episode_id!r}")
        common.print_line({"episode_id": episode_id, "members": members})
        return 0
    limit = common.checked_range("--limit", args.limit, 1, _MAX_EPISODES)
    offset = common.checked_range("--offset", args.offset, 0, 1_000_000)
    for episode in asyncio.run(_episodes(settings, args.agent, limit, offset)):
        common.print_line(episode)
    return 0


def _add_recall(sub: common.Subparsers) -> None:
    recall = common.agent_command(sub, "recall", help="ask a recall question and print the items")
    recall.add_argument("--k", type=int, default=5)
    common.add_api_key(recall)
    recall.add_argument("query")


def _add_agents(sub: common.Subparsers) -> None:
    agents = sub.add_parser(
        "agents", help="every agent with an ingested event, one JSON line each (as GET /v1/agents)"
    )
    agents.set_defaults(agent=None)


def _add_search(sub: common.Subparsers) -> None:
    search = common.agent_command(
        sub,
        "search",
        help="a recall that counts no usage (inspection): one JSON line per item",
        description="Ask a recall question as inspection (record_usage=false: nothing is "
        "counted), through the workers as POST /v1/agents/{agent}/search does. One JSON "
        "line per item.",
    )
    search.add_argument(
        "--k", type=int, default=None, help="items to return (default: the agent's top_k)"
    )
    search.add_argument(
        "--explain", action="store_true", help="each item's ranking factors under 'scores'"
    )
    common.add_api_key(search)
    search.add_argument("query")


def _add_memory(sub: common.Subparsers) -> None:
    memory = common.agent_command(
        sub,
        "memory",
        help="one memory with its full text and every stored field (JSON; exit 1 if absent)",
        description="The memory with its full text, every stored field (vectors left out), "
        "usage counters and status flags, as GET /v1/agents/{agent}/memories/{id}. Another "
        "agent's memory reads as absent (exit 1).",
    )
    memory.add_argument(
        "--graph",
        action="store_true",
        help="add its nexus-key neighbourhood under 'graph' ({nodes, edges, truncated})",
    )
    memory.add_argument(
        "--depth", type=int, default=1, help=f"--graph: hops from it, 1-{_MAX_DEPTH} (default 1)"
    )
    memory.add_argument("memory_id", metavar="MEMORY_ID")


def _add_episodes(sub: common.Subparsers) -> None:
    episodes = common.agent_command(
        sub,
        "episodes",
        help="an agent's episodes, newest first (one JSON line each), or one with --episode",
        description="Without --episode: the agent's episodes (hyperedges: turn:..., run:...), "
        "newest first, one JSON line each {episode_id, members, first_ts, last_ts}. With "
        "--episode: that episode's members with their roles (exit 1 if the agent has none).",
    )
    episodes.add_argument(
        "--episode", default=None, metavar="EPISODE_ID", help="one episode's members and roles"
    )
    episodes.add_argument(
        "--limit", type=int, default=50, help=f"episodes to list, 1-{_MAX_EPISODES} (default 50)"
    )
    episodes.add_argument("--offset", type=int, default=0, help="episodes to skip (paging)")


COMMANDS: dict[str, common.Subcommand] = {
    "recall": common.Subcommand(_add_recall, _run_recall),
    "agents": common.Subcommand(_add_agents, operation(_run_agents)),
    "search": common.Subcommand(_add_search, operation(_run_search)),
    "memory": common.Subcommand(_add_memory, operation(_run_memory)),
    "episodes": common.Subcommand(_add_episodes, operation(_run_episodes)),
}
