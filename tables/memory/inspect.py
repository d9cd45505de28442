"""Reads for inspection (the HTTP API, `grimoire stats`, the metrics scrape): one
memory with every stored field, its nexus-key neighbourhood, episodes and their
members with roles, and the readings behind the cognitive metrics of docs/design.md §8.

Nothing here writes, and nothing here is on a hot path. Every read is
scoped by agent id: a memory hash records its owner, and one owned by another
agent reads as absent, exactly as in the recall and write paths. RediSearch
queries start with the tenant filter (`grimoire.tables.queries`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson
from redis.asyncio import Redis
from redisvl.query.filter import FilterExpression, Num

from grimoire.streams.learn.runs import RUN_RECALLED, RUN_RECALLED_HITS
from grimoire.tables.codec.hash_values import stored_list, stored_number, stored_text, text_of
from grimoire.tables.codec.search_replies import total_results
from grimoire.tables.codec.watermark import WATERMARK_MEMBER
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.memory.graph import RedisGraph
from grimoire.tables.queries import live_filter, tenant_filter
from grimoire.tables.routing import SearchRouting

__all__ = [
    "CognitiveReading",
    "EpisodeMember",
    "EpisodeSummary",
    "GraphEdge",
    "GraphNode",
    "MaintenanceRun",
    "Neighbourhood",
    "agent_counters",
    "cognitive_reading",
    "deployment_counters",
    "episode_members",
    "episodes",
    "key_node_id",
    "live_count",
    "maintenance_runs",
    "memory_detail",
    "memory_exists",
    "neighbourhood",
]

logger = logging.getLogger(__name__)

# How a memory hash's fields read in an inspection (everything else is text; the
# vectors are left out: 1.5 KB of float32 each, of no use to a reader).
_VECTORS: Final = frozenset({"canonical", "eidolon"})
_NUMBERS: Final = frozenset(
    {
        "ts", "valid_from", "last_accessed", "last_seen", "importance", "confidence",
        "quality", "strength", "tick", "block", "included_count_total",
        "included_count_decay", "validated_count", "contradicted_count", "reinforced_count",
        "count", "recorded_at", "summary_level", "retracted_at",
    }
)  # fmt: skip
_FLAGS: Final = frozenset(
    {"deleted", "archived", "quarantined", "off_topic", "pinned", "retracted", "locked"}
)
_LISTS: Final = frozenset({"tags", "nexus_keys", "hyperedge_ids", "source_ids", "summary_of"})
_JSON: Final = frozenset({"affect", "admission"})
_USAGE: Final = ("included_count_total", "included_count_decay", "last_accessed")

# What a graph node or an episode member shows of a memory.
_GLANCE: Final = (
    "memory_id", "agent_id", "kind", "layer", "gist", "ts", "nexus_keys", "deleted",
    "archived", "quarantined", "retracted", "pinned",
)  # fmt: skip
_ROLE_ORDER: Final = {"trigger": 0, "context": 1, "action": 2, "outcome": 3}


def _number(value: Any) -> int | float | None:
    number = stored_number(value, float("nan"))
    if number != number:  # unreadable: NaN is the only value unequal to itself
        return None
    return int(number) if number.is_integer() and abs(number) < 2**53 else number


def _decode_field(name: str, value: Any) -> Any:
    if name in _NUMBERS:
        return _number(value)
    if name in _FLAGS:
        return stored_text(value) == "1"
    if name in _LISTS:
        return list(stored_list(value))
    if name in _JSON:
        raw = stored_text(value)
        try:
            return orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            return raw
    return stored_text(value)


def _owned(doc: Mapping[str, Any], agent_id: str) -> bool:
    return doc.get("memory_id") is not None and stored_text(doc.get("agent_id")) == agent_id


async def memory_detail(
    redis: Redis, prefix: str, agent_id: str, memory_id: str
) -> dict[str, Any] | None:
    """Every stored field of one of the agent's memories (vectors left out), with
    its usage counters; None when absent or another agent's."""
    keys = Keyspace(prefix)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.memory(agent_id, memory_id))
        pipe.hmget(keys.usage(agent_id, memory_id), list(_USAGE))
        raw, usage = await pipe.execute()
    doc = {text_of(name): value for name, value in raw.items()}
    if not _owned(doc, agent_id):
        return None
    detail = {
        name: _decode_field(name, value) for name, value in doc.items() if name not in _VECTORS
    }
    detail["id"] = detail.pop("memory_id")
    # The record's own counters are its creation values; the usage hash moves them.
    for name, value in zip(_USAGE, usage, strict=True):
        if value is None:
            continue
        used = _number(value)
        if name == "last_accessed":
            current = detail.get(name)
            if used is not None and (current is None or used > current):
                detail[name] = used
        else:
            detail[name] = used
    for name in _FLAGS:
        detail.setdefault(name, False)
    return dict(sorted(detail.items()))


async def memory_exists(redis: Redis, prefix: str, agent_id: str, memory_id: str) -> bool:
    """Whether the memory is stored and the agent's (deleted or not)."""
    owner = await redis.hget(Keyspace(prefix).memory(agent_id, memory_id), "agent_id")
    return owner is not None and text_of(owner) == agent_id


async def _glances(
    redis: Redis, prefix: str, agent_id: str, memory_ids: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """What a graph node or episode member shows of each memory; another agent's
    and missing ones are left out."""
    keys = Keyspace(prefix)
    async with redis.pipeline(transaction=False) as pipe:
        for memory_id in memory_ids:
            pipe.hmget(keys.memory(agent_id, memory_id), list(_GLANCE))
        rows = await pipe.execute()
    found: dict[str, dict[str, Any]] = {}
    for memory_id, row in zip(memory_ids, rows, strict=True):
        doc = dict(zip(_GLANCE, row, strict=True))
        if _owned(doc, agent_id):
            found[memory_id] = {name: _decode_field(name, value) for name, value in doc.items()}
    return found


# ---- the nexus-key neighbourhood --------------------------------------------


@dataclass(frozen=True, slots=True)
class GraphNode:
    id: str  # a memory id, or `key:<nexus key>`
    type: str  # memory | key
    label: str  # a memory's gist, or the nexus key
    kind: str = ""  # a memory's kind
    degree: int | None = None  # a key's member count
    status: str = ""  # a memory's: live | deleted | archived | quarantined | retracted


@dataclass(frozen=True, slots=True)
class GraphEdge:
    source: str
    target: str


@dataclass(frozen=True, slots=True)
class Neighbourhood:
    nodes: tuple[GraphNode, ...]
    edges: tuple[GraphEdge, ...]
    truncated: bool = False  # a limit left nodes out

    def to_json(self, depth: int) -> dict[str, Any]:
        """The shape the HTTP API (`.../graph`) and the CLI (`memory --depth`) show:
        a memory node with its kind and status, a key node with its degree."""
        nodes: list[dict[str, Any]] = []
        for node in self.nodes:
            shown: dict[str, Any] = {"id": node.id, "type": node.type, "label": node.label}
            if node.type == "memory":
                shown.update(kind=node.kind, status=node.status)
            else:
                shown["degree"] = node.degree
            nodes.append(shown)
        return {
            "depth": depth,
            "nodes": nodes,
            "edges": [{"source": e.source, "target": e.target} for e in self.edges],
            "truncated": self.truncated,
        }


def key_node_id(nexus_key: str) -> str:
    return f"key:{nexus_key}"


def _status(glance: Mapping[str, Any]) -> str:
    for flag in ("retracted", "deleted", "archived", "quarantined"):
        if glance.get(flag):
            return flag
    return "live"


def _memory_node(memory_id: str, glance: Mapping[str, Any]) -> GraphNode:
    return GraphNode(
        id=memory_id,
        type="memory",
        label=str(glance.get("gist") or ""),
        kind=str(glance.get("kind") or ""),
        status=_status(glance),
    )


async def _newest_members(
    redis: Redis, prefix: str, agent_id: str, nexus_keys: Sequence[str], limit: int
) -> dict[str, list[str]]:
    """Each key's newest `limit` members (`RedisGraph.newest`), in one round trip."""
    keys = Keyspace(prefix)
    async with redis.pipeline(transaction=False) as pipe:
        for key in nexus_keys:
            pipe.zrevrange(keys.nexus(agent_id, key), 0, limit - 1)
        rows = await pipe.execute()
    return {key: [text_of(m) for m in row] for key, row in zip(nexus_keys, rows, strict=True)}


async def neighbourhood(
    redis: Redis,
    prefix: str,
    agent_id: str,
    memory_id: str,
    *,
    depth: int = 1,
    per_key: int = 10,
    max_nodes: int = 200,
) -> Neighbourhood | None:
    """The memory, its nexus keys and each key's newest `per_key` members, `depth`
    rounds out (memory → key → memory is one round); None when the memory is
    absent or another agent's. At most `max_nodes` nodes (`truncated` says so)."""
    start = await _glances(redis, prefix, agent_id, [memory_id])
    if memory_id not in start:
        return None
    graph = RedisGraph(redis, prefix)
    nodes: dict[str, GraphNode] = {memory_id: _memory_node(memory_id, start[memory_id])}
    edges: set[tuple[str, str]] = set()
    glances = dict(start)
    frontier = [memory_id]
    seen_keys: set[str] = set()
    truncated = False
    for _ in range(depth):
        round_keys: list[str] = []
        for mid in frontier:
            for key in glances[mid].get("nexus_keys") or ():
                edges.add((mid, key_node_id(key)))
                if key not in seen_keys:
                    seen_keys.add(key)
                    round_keys.append(key)
        if not round_keys:
            break
        degrees = await graph.degrees(agent_id, round_keys)
        members = await _newest_members(redis, prefix, agent_id, round_keys, per_key)
        fresh = sorted({m for ids in members.values() for m in ids} - set(glances))
        glances.update(await _glances(redis, prefix, agent_id, fresh))
        next_frontier: list[str] = []
        for key in round_keys:
            if len(nodes) >= max_nodes:
                truncated = True
                break
            nodes[key_node_id(key)] = GraphNode(
                id=key_node_id(key), type="key", label=key, degree=degrees.get(key, 0)
            )
            for member in members[key]:
                if member not in glances:
                    continue  # gone since the key was read
                if member not in nodes:
                    if len(nodes) >= max_nodes:
                        truncated = True
                        continue
                    nodes[member] = _memory_node(member, glances[member])
                    next_frontier.append(member)
                edges.add((member, key_node_id(key)))
        frontier = next_frontier
        if truncated or not frontier:
            break
    kept = [GraphEdge(s, t) for s, t in sorted(edges) if s in nodes and t in nodes]
    return Neighbourhood(nodes=tuple(nodes.values()), edges=tuple(kept), truncated=truncated)


# ---- episodes (hyperedges) ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class EpisodeSummary:
    episode_id: str  # the hyperedge id: `turn:<turn>` or `run:<run id>`
    members: int
    first_ts: int
    last_ts: int


@dataclass(frozen=True, slots=True)
class EpisodeMember:
    id: str
    role: str
    kind: str
    layer: str
    gist: str
    ts: int
    status: str


def _aggregate_rows(reply: Any) -> list[dict[str, str]]:
    """FT.AGGREGATE rows as {field: text}, from a RESP3 map or a RESP2 array."""
    if isinstance(reply, dict):
        rows = reply.get("results", reply.get(b"results", []))
        found = []
        for row in rows:
            extra = row.get("extra_attributes", row.get(b"extra_attributes", {}))
            found.append({text_of(k): stored_text(v) for k, v in extra.items()})
        return found
    found = []
    for row in list(reply)[1:]:
        found.append({text_of(row[i]): stored_text(row[i + 1]) for i in range(0, len(row) - 1, 2)})
    return found


def _total(reply: Any) -> int:
    return total_results(reply)


async def episodes(
    redis: Redis, prefix: str, agent_id: str, *, limit: int = 50, offset: int = 0
) -> list[EpisodeSummary]:
    """The agent's episodes (hyperedges), newest first by their latest member."""
    reply = await _on_agents_index(
        redis, prefix, agent_id,
        "FT.AGGREGATE", str(tenant_filter(agent_id)),
        "GROUPBY", 1, "@hyperedge_ids",
        "REDUCE", "COUNT", 0, "AS", "members",
        "REDUCE", "MIN", 1, "@ts", "AS", "first_ts",
        "REDUCE", "MAX", 1, "@ts", "AS", "last_ts",
        # The tie-break keeps a page stable when two episodes end at the same time.
        "SORTBY", 4, "@last_ts", "DESC", "@hyperedge_ids", "ASC",
        # One extra: the group of memories without an episode may take a place.
        "LIMIT", offset, limit + 1,
        "DIALECT", 2,
    )  # fmt: skip
    found = []
    for row in _aggregate_rows(reply):
        edge = row.get("hyperedge_ids", "")
        if not edge:
            continue
        found.append(
            EpisodeSummary(
                episode_id=edge,
                members=int(stored_number(row.get("members"), 0.0)),
                first_ts=int(stored_number(row.get("first_ts"), 0.0)),
                last_ts=int(stored_number(row.get("last_ts"), 0.0)),
            )
        )
    return found[:limit]


async def episode_members(
    redis: Redis, prefix: str, agent_id: str, episode_id: str
) -> list[EpisodeMember]:
    """An episode's members with their roles, in role order then time; empty when
    the agent has no such episode."""
    roles = await RedisGraph(redis, prefix).hyperedge(agent_id, episode_id)
    glances = await _glances(redis, prefix, agent_id, sorted(roles))
    members = [
        EpisodeMember(
            id=memory_id,
            role=roles[memory_id],
            kind=str(glance.get("kind") or ""),
            layer=str(glance.get("layer") or ""),
            gist=str(glance.get("gist") or ""),
            ts=int(glance.get("ts") or 0),
            status=_status(glance),
        )
        for memory_id, glance in glances.items()
    ]
    members.sort(key=lambda m: (_ROLE_ORDER.get(m.role, len(_ROLE_ORDER)), m.ts, m.id))
    return members


# ---- counters and the cognitive metrics ---------------------------------------


async def deployment_counters(redis: Redis, prefix: str) -> dict[str, float]:
    """The deployment-wide counters (`Keyspace.metrics`): ingest batches, embedding
    cache, authentication refusals, ..."""
    raw = await redis.hgetall(Keyspace(prefix).metrics)
    return {text_of(k): stored_number(v, 0.0) for k, v in raw.items()}


async def agent_counters(
    redis: Redis, prefix: str, agent_ids: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Each agent's write-path counters (`AgentStateStore.stats`), in one round trip."""
    keys = Keyspace(prefix)
    async with redis.pipeline(transaction=False) as pipe:
        for agent_id in agent_ids:
            pipe.hgetall(keys.stats(agent_id))
        rows = await pipe.execute()
    return {
        agent_id: {text_of(k): stored_number(v, 0.0) for k, v in row.items()}
        for agent_id, row in zip(agent_ids, rows, strict=True)
    }


async def _on_agents_index(
    redis: Redis, prefix: str, agent_id: str, command: str, *arguments: Any
) -> Any:
    """An FT command on the index holding `agent_id`'s memories (on a cluster, its
    master's: `grimoire.tables.routing`); `arguments` follow the index name."""
    target = await SearchRouting(redis, prefix).target(agent_id)
    return await redis.execute_command(command, target.index, *arguments, **target.options)


async def _count(redis: Redis, prefix: str, agent_id: str, where: FilterExpression) -> int:
    reply = await _on_agents_index(
        redis, prefix, agent_id, "FT.SEARCH", str(where), "NOCONTENT", "LIMIT", 0, 0, "DIALECT", 2
    )
    return _total(reply)


async def live_count(redis: Redis, prefix: str, agent_id: str) -> int:
    """Memories recall may return (not deleted, quarantined or archived): the
    "active entry count" of docs/design.md §8."""
    return await _count(redis, prefix, agent_id, live_filter(agent_id))


@dataclass(frozen=True, slots=True)
class CognitiveReading:
    """What the cognitive metrics of docs/design.md §8 are computed from, for one agent.

    The window is event time ending at the agent's watermark (never the wall
    clock: an agent replayed or paused reads the same)."""

    candidates: int
    stored: int  # admitted + quarantined
    window_ms: int
    window_end_ms: int | None  # the agent's watermark; None before its first event
    window_memories: int  # live memories written in the window
    window_quality: float | None  # their mean quality
    live: int
    # The hit rate's counters (`streams.learn.runs.run_recall_counters`, in the
    # agent's stats, applied with each run's credits): memories the ended runs
    # recalled, and those of them a successful run credited.
    recalled: int
    hits: int

    @property
    def admission_rate(self) -> float | None:
        return self.stored / self.candidates if self.candidates else None

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.recalled if self.recalled else None


async def _window_quality(
    redis: Redis, prefix: str, agent_id: str, since_ms: int
) -> tuple[int, float | None]:
    where = live_filter(agent_id) & (Num("ts") >= since_ms)
    reply = await _on_agents_index(
        redis, prefix, agent_id,
        "FT.AGGREGATE", str(where),
        "GROUPBY", 0, "REDUCE", "COUNT", 0, "AS", "n", "REDUCE", "AVG", 1, "@quality", "AS", "q",
        "DIALECT", 2,
    )  # fmt: skip
    rows = _aggregate_rows(reply)
    if not rows:
        return 0, None
    count = int(stored_number(rows[0].get("n"), 0.0))
    mean = stored_number(rows[0].get("q"), float("nan"))
    return count, (mean if count and mean == mean else None)


async def cognitive_reading(
    redis: Redis,
    prefix: str,
    agent_id: str,
    *,
    window_ms: int = 7 * 24 * 3_600_000,
) -> CognitiveReading:
    counters = (await agent_counters(redis, prefix, [agent_id]))[agent_id]
    score = await redis.zscore(Keyspace(prefix).watermark(agent_id), WATERMARK_MEMBER)
    end = None if score is None else int(score)
    window_count, window_quality = (0, None)
    if end is not None:
        window_count, window_quality = await _window_quality(
            redis, prefix, agent_id, end - window_ms
        )
    return CognitiveReading(
        candidates=int(counters.get("candidates", 0)),
        stored=int(counters.get("admit", 0) + counters.get("quarantine", 0)),
        window_ms=window_ms,
        window_end_ms=end,
        window_memories=window_count,
        window_quality=window_quality,
        live=await live_count(redis, prefix, agent_id),
        recalled=int(counters.get(RUN_RECALLED, 0)),
        hits=int(counters.get(RUN_RECALLED_HITS, 0)),
    )


# ---- maintenance --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MaintenanceRun:
    task: str
    tick: int
    elapsed_ms: float | None


async def maintenance_runs(
    redis: Redis, prefix: str, agent_id: str, *, count: int = 50
) -> list[MaintenanceRun]:
    """The agent's latest completed maintenance tasks (newest first), from the
    ledger's log (`MaintenanceLedgerStore.history` reads all of it)."""
    rows = await redis.xrevrange(Keyspace(prefix).maintenance_log(agent_id), count=count)
    runs = []
    for _, fields in rows:
        entry = {text_of(k): stored_text(v) for k, v in fields.items()}
        elapsed = stored_number(entry.get("elapsed_ms"), -1.0)
        runs.append(
            MaintenanceRun(
                task=entry.get("task", ""),
                tick=int(stored_number(entry.get("tick"), 0.0)),
                elapsed_ms=elapsed if elapsed >= 0 else None,
            )
        )
    return runs
