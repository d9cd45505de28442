"""GET /v1/agents/{agent}/causal/{memory_id}: the memory's causal neighbours, up to
`hops` edges away (docs/design.md §7's k-hop neighbours over the causal graph), following
cause → effect (`effects`), effect → cause (`causes`) or both.

The walk is `grimoire.streams.learn.causal.k_hop` over the agent's edges in the
learning store; the store is read one hop at a time first (k_hop reads
synchronously), exactly the nodes the walk will ask for. A memory without edges,
or one the agent does not have, has no neighbours (an empty list, not a 404: the
graph is the agent's own, so nothing of another agent can be reached)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from grimoire.infra.http.errors import ApiError, json_response
from grimoire.infra.http.routing import agent_endpoint, deps_of, int_param
from grimoire.streams.inbound.validators import INVALID_VALUE
from grimoire.streams.learn.causal import CausalEdge, Direction, Reached, k_hop
from grimoire.tables.learn.store import RedisLearningStore
from grimoire.tables.ports.learn import LearningStore

__all__ = ["MAX_HOPS", "MAX_LIMIT", "causal_neighbours", "neighbours_json", "routes"]

MAX_HOPS = 4
MAX_LIMIT = 500
DEFAULT_LIMIT = 200


def _follows(edge: CausalEdge, node: str, direction: Direction) -> str | None:
    """The end of `edge` the walk goes on to from `node` (as k_hop's own rule)."""
    if direction in (Direction.EFFECTS, Direction.BOTH) and edge.cause == node:
        return edge.effect
    if direction in (Direction.CAUSES, Direction.BOTH) and edge.effect == node:
        return edge.cause
    return None


async def causal_neighbours(
    store: LearningStore,
    agent_id: str,
    memory_id: str,
    *,
    hops: int,
    direction: Direction,
    limit: int = DEFAULT_LIMIT,
) -> list[Reached]:
    """`k_hop` from `memory_id` over the agent's stored edges.

    The store is async and k_hop is not: the breadth-first layers are read first
    (each node k_hop will expand, once, one round trip per hop), stopping where
    k_hop stops (no frontier left, or `limit` nodes reached), then k_hop runs over
    what was read."""
    read: dict[str, list[CausalEdge]] = {}
    seen = {memory_id}
    frontier = [memory_id]
    reached = 0
    for _ in range(hops):
        if not frontier or reached >= limit:
            break
        by_node = await store.edges_of(agent_id, frontier)
        read.update({node: list(by_node.get(node, ())) for node in frontier})
        found = {
            nxt
            for node in frontier
            for edge in read[node]
            if (nxt := _follows(edge, node, direction)) is not None and nxt not in seen
        }
        frontier = sorted(found)
        seen.update(found)
        reached += len(found)

    def edges_of(nodes: Sequence[str]) -> Mapping[str, Sequence[CausalEdge]]:
        return {node: read.get(node, []) for node in nodes}

    return k_hop(memory_id, hops, edges_of, direction=direction, limit=limit)


def neighbours_json(
    memory_id: str, hops: int, direction: Direction, limit: int, found: Sequence[Reached]
) -> dict[str, object]:
    """The route's answer (the CLI prints the same)."""
    return {
        "memory_id": memory_id,
        "hops": hops,
        "direction": direction.value,
        "nodes": [
            {"memory_id": node.memory_id, "hops": node.hops, "via": node.via.to_wire()}
            for node in found
        ],
        # At the limit there may be more than was returned.
        "truncated": len(found) >= limit,
    }


def _direction(request: Request) -> Direction:
    raw = request.query_params.get("direction") or Direction.EFFECTS.value
    try:
        return Direction(raw)
    except ValueError:
        choices = ", ".join(d.value for d in Direction)
        raise ApiError(
            400, INVALID_VALUE, f"'direction' must be one of {choices}, got {raw!r}",
            field="direction",
        ) from None  # fmt: skip


@agent_endpoint
async def causal(request: Request, agent_id: str) -> Response:
    memory_id = str(request.path_params["memory_id"])
    hops = int_param(request, "hops", 1, 1, MAX_HOPS)
    direction = _direction(request)
    limit = int_param(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    deps = deps_of(request)
    store = RedisLearningStore(deps.redis, deps.prefix)
    found = await causal_neighbours(
        store, agent_id, memory_id, hops=hops, direction=direction, limit=limit
    )
    return json_response(neighbours_json(memory_id, hops, direction, limit, found))


def routes() -> list[Route]:
    return [Route("/v1/agents/{agent:path}/causal/{memory_id}", causal, methods=["GET"])]
