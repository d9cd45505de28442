"""`grimoire causal`: a memory's neighbours in the agent's causal graph.

The walk and its JSON are the HTTP route's own (`causal_neighbours` and
`neighbours_json` of infra/http/causal.py), imported when the command runs, so the
command and GET …/causal/{memory_id} cannot drift apart; the limits below are kept
equal to the route's by a test (naming them here keeps `grimoire --help` from
loading the HTTP app)."""

from __future__ import annotations

import argparse
import asyncio

from grimoire.infra.cli import common
from grimoire.infra.cli.ops import operation
from grimoire.infra.settings import Settings

__all__ = ["COMMANDS"]

_MAX_CAUSAL_HOPS = 4  # as GET …/causal/{id}?hops
_MAX_CAUSAL_LIMIT = 500  # ... and its limit
_CAUSAL_DIRECTIONS = ("effects", "causes", "both")


async def _causal(
    settings: Settings, agent_id: str, memory_id: str, hops: int, direction: str, limit: int
) -> dict[str, object]:
    """The memory's causal neighbours, as GET …/causal/{memory_id} answers."""
    from grimoire.infra.http.causal import causal_neighbours, neighbours_json
    from grimoire.streams.learn.causal import Direction
    from grimoire.tables.learn.store import RedisLearningStore

    way = Direction(direction)
    async with common.memory_redis(settings) as redis:
        store = RedisLearningStore(redis, settings.broker.topic_prefix)
        found = await causal_neighbours(
            store, agent_id, memory_id, hops=hops, direction=way, limit=limit
        )
    return neighbours_json(memory_id, hops, way, limit, found)


def _run_causal(settings: Settings, args: argparse.Namespace) -> int:
    memory_id = common.checked_id("MEMORY_ID", args.memory_id)
    hops = common.checked_range("--hops", args.hops, 1, _MAX_CAUSAL_HOPS)
    limit = common.checked_range("--limit", args.limit, 1, _MAX_CAUSAL_LIMIT)
    common.print_line(
        asyncio.run(_causal(settings, args.agent, memory_id, hops, args.direction, limit))
    )
    return 0


def _add_causal(sub: common.Subparsers) -> None:
    causal = common.agent_command(
        sub,
        "causal",
        help="a memory's causal neighbours, k hops away (JSON)",
        description="The memory's neighbours in the agent's causal graph (cause → effect "
        "edges learned from runs' outcomes), breadth-first up to --hops edges away, each "
        "with the edge it was reached by, as GET /v1/agents/{agent}/causal/{id}. One JSON "
        "object {memory_id, hops, direction, nodes, truncated}; a memory without edges "
        "has no nodes.",
    )
    causal.add_argument(
        "--hops", type=int, default=1, help=f"edges away, 1-{_MAX_CAUSAL_HOPS} (default 1)"
    )
    causal.add_argument(
        "--direction",
        choices=_CAUSAL_DIRECTIONS,
        default="effects",
        help="effects: cause → effect, causes: effect → cause, both (default effects)",
    )
    causal.add_argument(
        "--limit",
        type=int,
        default=200,
        help=f"most neighbours, 1-{_MAX_CAUSAL_LIMIT} (default 200)",
    )
    causal.add_argument("memory_id", metavar="MEMORY_ID")


COMMANDS: dict[str, common.Subcommand] = {
    "causal": common.Subcommand(_add_causal, operation(_run_causal)),
}
