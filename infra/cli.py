"""The `grimoire` command: worker, local services, recall, demo."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from grimoire.infra.logs import configure_logging
from grimoire.topics.declarations import TopicNames, ensure_topics

try:
    from grimoire.infra.settings import Settings
except ModuleNotFoundError as missing:  # an agent-side install: `grimoire[client]` only
    raise SystemExit(
        f"the grimoire command runs the worker side and needs {missing.name!r}: "
        "pip install 'grimoire[worker]'"
    ) from missing

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from grimoire.streams.config.agent_config import AgentConfig
    from grimoire.streams.trust.tenancy import ApiKeyRecord, TenantScope
    from grimoire.tables.config.store import ConfigStore
    from grimoire.tables.trust.api_keys import ApiKeyStore
    from grimoire.topics.client import GrimoireClient, RecallAnswer
    from grimoire.topics.schemas import CommandV1

logger = logging.getLogger(__name__)


def run_worker(settings: Settings) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # The model shares the cores with the event loop, Redis and the broker: idle
    # OpenMP threads must sleep rather than spin, or they starve everything else.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if settings.worker_nice:
        # Before any thread starts: Linux sets a thread's priority, and every thread
        # the worker makes later (the consumer's, the model lanes) inherits this one.
        os.nice(settings.worker_nice)
    import faust

    from grimoire.infra.app import create_app

    names = TopicNames(settings.topic_prefix)
    asyncio.run(
        ensure_topics(
            settings.bootstrap_servers,
            {name: settings.partitions for name in names.all_partitioned()},
            replication_factor=settings.replication_factor,
            security=settings.kafka_security,
        )
    )
    app = create_app(settings)
    logger.info("worker serves %s", ", ".join(sorted(role.value for role in settings.roles)))
    worker = faust.Worker(app, loglevel=settings.log_level, quiet=True)
    worker.execute_from_commandline()  # runs until SIGINT/SIGTERM, then exits the process
    return 0


async def _recall(
    settings: Settings, agent_id: str, query: str, k: int, api_key: str | None = None
) -> None:
    async with _gateway(settings, api_key) as client:
        answer = await client.recall(agent_id, query, k=k)
        for item in answer.items:
            sys.stdout.buffer.write(orjson.dumps(item.asdict()) + b"\n")


async def _stats(settings: Settings, agent_id: str) -> dict[str, Any]:
    from grimoire.infra.http.stats import agent_stats
    from grimoire.tables.redis_client import create_redis

    redis = create_redis(settings.redis_url, 2)
    try:
        return await agent_stats(redis, settings.topic_prefix, agent_id, settings)
    finally:
        await redis.aclose()


def _stats_table(report: dict[str, Any]) -> str:
    """The cognitive metrics as a person reads them, with their healthy ranges."""
    lines = [
        f"agent {report['agent_id']}: {report['candidates']} candidates, "
        f"{report['stored']} stored, {report['live_memories']} live, "
        f"watermark {report['watermark_ms']}, tick {report['tick']}",
        f"{'metric':<20} {'value':>10}  {'status':<8}  healthy (alarm)",
    ]
    for name, metric in report["cognitive"].items():
        value = metric["value"]
        shown = "-" if value is None else (f"{value:.4f}" if isinstance(value, float) else value)
        lines.append(
            f"{name:<20} {shown!s:>10}  {metric['status']:<8}  "
            f"{metric['healthy']} ({metric['alarm']})"
        )
    return "\n".join(lines) + "\n"


def run_serve(settings: Settings, host: str | None, port: int | None) -> int:
    """`grimoire serve`: the HTTP API until interrupted."""
    from grimoire.infra.http.server import run_server

    # uvicorn re-raises the signal it shut down on, once it has closed everything.
    with contextlib.suppress(KeyboardInterrupt):
        run_server(settings, host=host or settings.http_host, port=port or settings.http_port)
    return 0


async def _playbook(settings: Settings, agent_id: str) -> str | None:
    from grimoire.tables.maintenance.curator_store import RedisCuratorStore
    from grimoire.tables.redis_client import create_redis

    redis = create_redis(settings.redis_url, 2)
    try:
        store = RedisCuratorStore(redis, settings.topic_prefix)
        return await store.get_playbook(agent_id)
    finally:
        await redis.aclose()


async def _reindex(settings: Settings, agent_id: str) -> dict[str, object]:
    from dataclasses import asdict

    from tqdm import tqdm

    from grimoire.tables.memory.rebuild import rebuild_derived
    from grimoire.tables.redis_client import create_redis

    redis = create_redis(settings.redis_url, 2)
    bar = tqdm(unit="memory", desc="reindex", file=sys.stderr)

    def advance(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        return asdict(await rebuild_derived(redis, settings.topic_prefix, agent_id, advance))
    finally:
        bar.close()
        await redis.aclose()


async def _digest(settings: Settings, agent_ids: list[str]) -> list[dict[str, object]]:
    from grimoire.tables.redis_client import create_redis
    from grimoire.tables.trust.digest import agent_digest

    redis = create_redis(settings.redis_url, 2)
    try:
        return [
            (await agent_digest(redis, settings.topic_prefix, agent_id)).asdict()
            for agent_id in agent_ids
        ]
    finally:
        await redis.aclose()


async def _audit_verify(settings: Settings, agent_id: str) -> dict[str, object]:
    from grimoire.tables.redis_client import create_redis
    from grimoire.tables.trust.witness_store import RedisWitnessLog, audit

    redis = create_redis(settings.redis_url, 2)
    try:
        verdict = await audit(RedisWitnessLog(redis, settings.topic_prefix), agent_id)
    finally:
        await redis.aclose()
    return {
        "agent": agent_id,
        "verified": verdict.ok,
        "records": verdict.count,
        "first_broken": verdict.first_broken,
        "reason": verdict.reason,
        "head": verdict.head,
    }


async def _maintain(settings: Settings, agent_id: str, compact: bool) -> None:
    async with _gateway(settings, None) as client:
        await client.request_maintenance(agent_id, compact=compact)


@contextlib.asynccontextmanager
async def _api_keys(settings: Settings) -> AsyncIterator[ApiKeyStore]:
    """The deployment's API key store: in the key store's Redis, beside the journal
    keys (`GRIMOIRE_KEYSTORE_URL`, else the memory Redis)."""
    from grimoire.tables.redis_client import create_redis
    from grimoire.tables.trust.api_keys import RedisApiKeyStore

    redis = create_redis(settings.keystore_url or settings.redis_url, 2)
    try:
        yield RedisApiKeyStore(redis, settings.topic_prefix)
    finally:
        await redis.aclose()


def _key_listing(record: ApiKeyRecord) -> dict[str, Any]:
    """A key as `keys list` shows it: never its secret, nor its digest."""
    return {
        "key_id": record.key_id,
        "label": record.label,
        "scope": {
            "agent_ids": sorted(record.scope.agent_ids),
            "agent_prefix": record.scope.agent_prefix,
            "admin": record.scope.admin,
        },
        "created_ms": record.created_ms,
        "revoked": record.revoked,
    }


def _key_scope(args: argparse.Namespace) -> TenantScope | str:
    """The scope `keys create` asks for, or why it is not one."""
    from grimoire.streams.inbound.validators import AGENT_ID_ALPHABET, InputLimits, is_agent_id
    from grimoire.streams.trust.tenancy import TenantScope

    limits = InputLimits()
    if args.admin:
        return TenantScope(admin=True)
    if args.prefix is not None:
        # A prefix is the head of an agent id: the same alphabet, never empty.
        if not is_agent_id(args.prefix, limits):
            return f"--prefix must be 1-{limits.max_id_chars} of {AGENT_ID_ALPHABET}"
        return TenantScope(agent_prefix=args.prefix)
    bad = [agent for agent in args.agents if not is_agent_id(agent, limits)]
    if bad:
        return f"not an agent id: {bad[0]!r} (agent ids hold only {AGENT_ID_ALPHABET})"
    return TenantScope(agent_ids=frozenset(args.agents))


async def _keys_create(settings: Settings, scope: TenantScope, label: str) -> dict[str, Any]:
    async with _api_keys(settings) as store:
        record, token = await store.create(scope, label, now_ms=int(time.time() * 1000))
    return {**_key_listing(record), "token": token}


async def _keys_revoke(settings: Settings, key_id: str) -> bool:
    async with _api_keys(settings) as store:
        return await store.revoke(key_id)


async def _keys_list(settings: Settings) -> list[dict[str, Any]]:
    async with _api_keys(settings) as store:
        return [_key_listing(record) for record in await store.list()]


def _keys_command(settings: Settings, args: argparse.Namespace) -> int:
    if args.keys == "create":
        scope = _key_scope(args)
        if isinstance(scope, str):
            sys.stderr.write(f"grimoire keys create: {scope}\n")
            return 2
        created = asyncio.run(_keys_create(settings, scope, args.label))
        sys.stdout.write(orjson.dumps(created).decode() + "\n")
        sys.stderr.write(
            f"API key {created['key_id']} created. Keep its token now: only its digest "
            "is stored, it cannot be shown again.\n"
        )
        return 0
    if args.keys == "revoke":
        if not asyncio.run(_keys_revoke(settings, args.key_id)):
            sys.stderr.write(f"grimoire keys revoke: no API key {args.key_id!r}\n")
            return 1
        sys.stdout.write(orjson.dumps({"key_id": args.key_id, "revoked": True}).decode() + "\n")
        return 0
    for listed in asyncio.run(_keys_list(settings)):
        sys.stdout.write(orjson.dumps(listed).decode() + "\n")
    return 0


# ---- the operations of the HTTP API as commands ---------------------------------
#
# Each reads the stores or sends through Kafka exactly as its HTTP route does
# (infra/http/*.py), and checks its input first with the same rules, so a bad
# argument is refused here and never reaches the journal.

#: The `grimoire` commands built by `_add_ops_parsers` and run by `_ops_command`.
_OPS_COMMANDS = frozenset(
    {"agents", "search", "memory", "causal", "episodes", "config", "retract", "forget", "pin",
     "unpin", "events"}
)  # fmt: skip
#: `events --kind` → the input stream (infra/http/events.py `EVENT_KINDS`, kept equal
#: by a test: naming them here keeps `grimoire --help` from loading the HTTP app).
_EVENT_KINDS = ("episode", "tool_event", "transcript")
_MAX_EPISODES = 500  # as GET …/episodes?limit
_MAX_DEPTH = 3  # as GET …/graph?depth
_MAX_CAUSAL_HOPS = 4  # as GET …/causal/{id}?hops
_MAX_CAUSAL_LIMIT = 500  # ... and its limit
_CAUSAL_DIRECTIONS = ("effects", "causes", "both")


class _Refused(Exception):
    """A command refused with a one-line reason: exit code 2 for bad arguments, 1
    for something asked for that does not exist (or could not be done)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _api_key(args: argparse.Namespace) -> str | None:
    # The environment is the better place for a key (a flag shows in `ps`).
    return args.api_key or os.environ.get("GRIMOIRE_API_KEY") or None


def _add_api_key(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help="the tenant key gmk_... sent with the request (default $GRIMOIRE_API_KEY; "
        "needed where the workers check keys)",
    )


@contextlib.asynccontextmanager
async def _gateway(settings: Settings, api_key: str | None) -> AsyncIterator[GrimoireClient]:
    """A started client that puts `api_key` on every recall request and command."""
    from grimoire.topics.client import GrimoireClient

    async with GrimoireClient(
        settings.bootstrap_servers,
        settings.topic_prefix,
        partitions=settings.partitions,
        api_key=api_key,
        security=settings.kafka_security,
    ) as client:
        yield client


@contextlib.asynccontextmanager
async def _memory_redis(settings: Settings) -> AsyncIterator[Redis]:
    from grimoire.tables.redis_client import create_redis

    redis = create_redis(settings.redis_url, 2)
    try:
        yield redis
    finally:
        await redis.aclose()


@contextlib.asynccontextmanager
async def _config_store(settings: Settings) -> AsyncIterator[ConfigStore]:
    from grimoire.tables.config.store import RedisConfigStore

    async with _memory_redis(settings) as redis:
        yield RedisConfigStore(redis, settings.topic_prefix)


async def _agents(settings: Settings) -> list[str]:
    from grimoire.tables.maintenance.ledger import known_agents

    async with _memory_redis(settings) as redis:
        return sorted([agent async for agent in known_agents(redis, settings.topic_prefix)])


async def _search(
    settings: Settings,
    agent_id: str,
    query: str,
    *,
    k: int | None,
    explain: bool,
    api_key: str | None,
) -> RecallAnswer:
    async with _gateway(settings, api_key) as client:
        return await client.recall(
            agent_id,
            query,
            k=k,
            explain=explain or None,
            record_usage=False,  # inspection: the worker counts nothing
            timeout=settings.http_recall_timeout_s,
        )


async def _memory(
    settings: Settings, agent_id: str, memory_id: str, depth: int | None
) -> dict[str, Any] | None:
    """The memory with every stored field; with `depth`, its nexus-key
    neighbourhood under "graph" (as GET …/memories/{id} and …/graph)."""
    from dataclasses import asdict

    from grimoire.tables.memory.inspect import memory_detail, neighbourhood

    async with _memory_redis(settings) as redis:
        found = await memory_detail(redis, settings.topic_prefix, agent_id, memory_id)
        if found is None or depth is None:
            return found
        graph = await neighbourhood(redis, settings.topic_prefix, agent_id, memory_id, depth=depth)
    if graph is None:  # gone between the two reads
        return None
    nodes = []
    for node in graph.nodes:
        shown: dict[str, Any] = {"id": node.id, "type": node.type, "label": node.label}
        if node.type == "memory":
            shown.update(kind=node.kind, status=node.status)
        else:
            shown["degree"] = node.degree
        nodes.append(shown)
    found["graph"] = {
        "depth": depth,
        "nodes": nodes,
        "edges": [asdict(edge) for edge in graph.edges],
        "truncated": graph.truncated,
    }
    return found


async def _episodes(
    settings: Settings, agent_id: str, limit: int, offset: int
) -> list[dict[str, Any]]:
    from dataclasses import asdict

    from grimoire.tables.memory.inspect import episodes

    async with _memory_redis(settings) as redis:
        found = await episodes(redis, settings.topic_prefix, agent_id, limit=limit, offset=offset)
    return [asdict(episode) for episode in found]


async def _episode(settings: Settings, agent_id: str, episode_id: str) -> list[dict[str, Any]]:
    """The episode's members with their roles; empty when the agent has no such one."""
    from dataclasses import asdict

    from grimoire.tables.memory.inspect import episode_members

    async with _memory_redis(settings) as redis:
        members = await episode_members(redis, settings.topic_prefix, agent_id, episode_id)
    return [asdict(member) for member in members]


async def _causal(
    settings: Settings, agent_id: str, memory_id: str, hops: int, direction: str, limit: int
) -> dict[str, object]:
    """The memory's causal neighbours, as GET …/causal/{memory_id} answers."""
    from grimoire.infra.http.causal import causal_neighbours, neighbours_json
    from grimoire.streams.learn.causal import Direction
    from grimoire.tables.learn.store import RedisLearningStore

    way = Direction(direction)
    async with _memory_redis(settings) as redis:
        store = RedisLearningStore(redis, settings.topic_prefix)
        found = await causal_neighbours(
            store, agent_id, memory_id, hops=hops, direction=way, limit=limit
        )
    return neighbours_json(memory_id, hops, way, limit, found)


async def _memory_exists(settings: Settings, agent_id: str, memory_id: str) -> bool:
    from grimoire.tables.memory.inspect import memory_exists

    async with _memory_redis(settings) as redis:
        return await memory_exists(redis, settings.topic_prefix, agent_id, memory_id)


async def _load_config(settings: Settings, agent_id: str) -> AgentConfig:
    async with _config_store(settings) as store:
        return (await store.load([agent_id]))[agent_id]


async def _send_command(settings: Settings, api_key: str | None, command: CommandV1) -> None:
    async with _gateway(settings, api_key) as client:
        await client.send_command(command)


async def _publish_event(settings: Settings, kind: str, agent_id: str, raw: bytes) -> None:
    async with _gateway(settings, None) as client:
        topic = {
            "episode": client.topics.episodes,
            "tool_event": client.topics.tool_events,
            "transcript": client.topics.transcripts,
        }[kind]
        await client.publish_raw(topic, agent_id, raw)


def _checked_agent(settings: Settings, agent_id: str) -> str:
    from grimoire.streams.inbound.validators import AGENT_ID_ALPHABET, is_agent_id

    limits = settings.input_limits
    if not is_agent_id(agent_id, limits):
        raise _Refused(
            2,
            f"not an agent id: {agent_id!r} (1-{limits.max_id_chars} of {AGENT_ID_ALPHABET})",
        )
    return agent_id


def _checked_id(name: str, value: str) -> str:
    if not value.strip():
        raise _Refused(2, f"{name} must not be empty")
    return value


def _checked_range(name: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise _Refused(2, f"{name} must be within [{low}, {high}], got {value}")
    return value


def _print_line(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS).decode() + "\n")


def _event_id() -> str:
    import uuid

    # A fresh id per call: repeating a command is a new command (pin, unpin, pin).
    return f"cli-{uuid.uuid4().hex}"


def _send(settings: Settings, args: argparse.Namespace, command: str, **target: Any) -> int:
    from grimoire.topics.schemas import CommandV1

    event_id = _event_id()
    asyncio.run(
        _send_command(
            settings,
            _api_key(args),
            CommandV1(agent_id=args.agent, command=command, event_id=event_id, **target),
        )
    )
    _print_line(
        {"accepted": True, "command": command, "agent_id": args.agent, "event_id": event_id}
        | target
    )
    return 0


def _run_search(settings: Settings, args: argparse.Namespace) -> int:
    from grimoire.streams.inbound.events import Rejection
    from grimoire.streams.inbound.recall_request import parse_recall_request

    # The worker's own parser first (as POST …/search), with placeholders for the
    # routing fields the client fills in.
    wire: dict[str, Any] = {
        "agent_id": args.agent,
        "query": args.query,
        "reply_to": TopicNames(settings.topic_prefix).reply_topic("cli"),
        "correlation_id": "cli",
    }
    if args.k is not None:
        wire["k"] = args.k
    parsed = parse_recall_request(orjson.dumps(wire), settings.recall_limits, settings.input_limits)
    if isinstance(parsed, Rejection):
        where = f"{parsed.field}: " if parsed.field else ""
        raise _Refused(2, f"{where}{parsed.detail} ({parsed.reason})")
    answer = asyncio.run(
        _search(
            settings,
            args.agent,
            args.query,
            k=args.k,
            explain=args.explain,
            api_key=_api_key(args),
        )
    )
    for item in answer.items:
        _print_line(item.asdict())
    return 0


def _run_memory(settings: Settings, args: argparse.Namespace) -> int:
    memory_id = _checked_id("MEMORY_ID", args.memory_id)
    depth = _checked_range("--depth", args.depth, 1, _MAX_DEPTH) if args.graph else None
    found = asyncio.run(_memory(settings, args.agent, memory_id, depth))
    if found is None:
        raise _Refused(1, f"agent {args.agent!r} has no memory {memory_id!r}")
    _print_line(found)
    return 0


def _run_causal(settings: Settings, args: argparse.Namespace) -> int:
    memory_id = _checked_id("MEMORY_ID", args.memory_id)
    hops = _checked_range("--hops", args.hops, 1, _MAX_CAUSAL_HOPS)
    limit = _checked_range("--limit", args.limit, 1, _MAX_CAUSAL_LIMIT)
    _print_line(asyncio.run(_causal(settings, args.agent, memory_id, hops, args.direction, limit)))
    return 0


def _run_episodes(settings: Settings, args: argparse.Namespace) -> int:
    if args.episode is not None:
        episode_id = _checked_id("--episode", args.episode)
        members = asyncio.run(_episode(settings, args.agent, episode_id))
        if not members:
            raise _Refused(1, f"agent {args.agent!r} has no episode {episode_id!r}")
        _print_line({"episode_id": episode_id, "members": members})
        return 0
    limit = _checked_range("--limit", args.limit, 1, _MAX_EPISODES)
    offset = _checked_range("--offset", args.offset, 0, 1_000_000)
    for episode in asyncio.run(_episodes(settings, args.agent, limit, offset)):
        _print_line(episode)
    return 0


def _config_update(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs as a partial configuration: a value is JSON when it parses
    (`true`, `5`, `["observation"]`, `null` to reset), else the text as it is."""
    update: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise _Refused(2, f"expected key=value, got {pair!r}")
        if key in update:
            raise _Refused(2, f"{key!r} is given twice")
        try:
            update[key] = orjson.loads(raw)
        except orjson.JSONDecodeError:
            update[key] = raw
    return update


def _run_config(settings: Settings, args: argparse.Namespace) -> int:
    from grimoire.streams.config.agent_config import apply_update
    from grimoire.streams.exceptions import InvalidEvent
    from grimoire.topics.schemas import CommandV1

    if args.config == "get":
        config = asyncio.run(_load_config(settings, args.agent))
        _print_line({"agent_id": args.agent, "config": config.to_wire()})
        return 0
    update = _config_update(args.pairs)
    # Validated as the worker will, merged into the configuration stored now, so a
    # bad value never reaches the journal (as PUT …/config).
    current = asyncio.run(_load_config(settings, args.agent))
    try:
        expected = apply_update(current, update)
    except InvalidEvent as bad:
        where = f"{bad.field}: " if bad.field else ""
        raise _Refused(2, f"{where}{bad.detail} ({bad.reason})") from None
    event_id = _event_id()
    asyncio.run(
        _send_command(
            settings,
            _api_key(args),
            CommandV1(agent_id=args.agent, command="configure", config=update, event_id=event_id),
        )
    )
    # `config`: the configuration once applied, unless another change lands first.
    _print_line(
        {
            "accepted": True,
            "command": "configure",
            "agent_id": args.agent,
            "event_id": event_id,
            "config": expected.to_wire(),
        }
    )
    return 0


def _run_retract(settings: Settings, args: argparse.Namespace) -> int:
    from grimoire.streams.exceptions import InvalidEvent
    from grimoire.streams.inbound.validators import Fields

    try:
        source = Fields(
            {"source_event_id": args.source_event_id}, settings.input_limits
        ).identifier("source_event_id", required=True)
    except InvalidEvent as bad:
        raise _Refused(2, f"--source-event-id: {bad.detail} ({bad.reason})") from None
    return _send(settings, args, "retract", source_event_id=source)


def _run_forget(settings: Settings, args: argparse.Namespace) -> int:
    if not args.yes:
        raise _Refused(
            2,
            f"refusing to forget agent {args.agent!r} without --yes: it erases all of its "
            "memory and makes its journal entries unreadable, for good",
        )
    return _send(settings, args, "forget")


def _run_pin(settings: Settings, args: argparse.Namespace) -> int:
    memory_id = _checked_id("MEMORY_ID", args.memory_id)
    if not asyncio.run(_memory_exists(settings, args.agent, memory_id)):
        raise _Refused(1, f"agent {args.agent!r} has no memory {memory_id!r}")
    return _send(settings, args, args.command, memory_id=memory_id)


def _event_json(given: str) -> bytes:
    """`--json`: the object itself, `@FILE` or `-` (standard input)."""
    if given == "-":
        return sys.stdin.buffer.read()
    if given.startswith("@"):
        path = Path(given[1:])
        try:
            return path.read_bytes()
        except OSError as failed:
            raise _Refused(2, f"cannot read {path}: {failed.strerror or failed}") from None
    return given.encode()


def _run_events(settings: Settings, args: argparse.Namespace) -> int:
    from grimoire.streams.inbound.events import Rejection, normalize_event
    from grimoire.streams.model.records import EventType

    event_type = {
        "episode": EventType.EPISODE,
        "tool_event": EventType.TOOL,
        "transcript": EventType.TRANSCRIPT,
    }[args.kind]
    try:
        body = orjson.loads(_event_json(args.json))
    except orjson.JSONDecodeError as bad:
        raise _Refused(2, f"--json is not JSON: {bad}") from None
    if not isinstance(body, dict):
        raise _Refused(2, "--json must be a JSON object (the event's fields)")
    if body.setdefault("agent_id", args.agent) != args.agent:
        raise _Refused(2, f"agent_id: the event names {body['agent_id']!r}, not --agent")
    raw = orjson.dumps(body)
    # The worker's own normaliser: what it would dead-letter is refused here.
    checked = normalize_event(event_type, raw, settings.input_limits)
    if isinstance(checked, Rejection):
        where = f"{checked.field}: " if checked.field else ""
        raise _Refused(2, f"{where}{checked.detail} ({checked.reason})")
    asyncio.run(_publish_event(settings, args.kind, args.agent, raw))
    _print_line(
        {
            "accepted": True,
            "kind": args.kind,
            "agent_id": args.agent,
            "event_id": checked.source_event_id,
            "candidates": [candidate.id for candidate in checked.candidates],
        }
    )
    return 0


def _run_agents(settings: Settings, _args: argparse.Namespace) -> int:
    for agent_id in asyncio.run(_agents(settings)):
        _print_line({"agent_id": agent_id})
    return 0


_OPS_RUNNERS = {
    "agents": _run_agents,
    "search": _run_search,
    "memory": _run_memory,
    "causal": _run_causal,
    "episodes": _run_episodes,
    "config": _run_config,
    "retract": _run_retract,
    "forget": _run_forget,
    "pin": _run_pin,
    "unpin": _run_pin,
    "events": _run_events,
}


def _ops_command(settings: Settings, args: argparse.Namespace) -> int:
    """Run one of the operation commands: a refusal or an unreachable service is a
    one-line message on stderr and an exit code, never a traceback."""
    from aiokafka.errors import KafkaError

    from grimoire.tables.exceptions import is_outage
    from grimoire.topics.client import RecallFailed, RecallTimeout, RecallUnauthorized

    name = args.command if args.command != "config" else f"config {args.config}"
    try:
        if getattr(args, "agent", None) is not None:
            _checked_agent(settings, args.agent)
        return _OPS_RUNNERS[args.command](settings, args)
    except _Refused as refused:
        message, code = refused.message, refused.code
    except RecallTimeout:
        message = f"no worker answered within {settings.http_recall_timeout_s}s"
        code = 1
    except RecallUnauthorized as refused_key:
        message, code = f"the worker refused the key: {refused_key}", 1
    except RecallFailed as failed:
        # `reason: detail`: the worker's own failure, or a request it refused as bad.
        message = f"the worker refused the request: {failed}"
        code = 1 if str(failed).startswith("internal_error") else 2
    except KafkaError as unreachable:
        message = f"cannot reach the broker at {settings.bootstrap_servers}: {unreachable}"
        code = 1
    except Exception as failure:
        if not is_outage(failure):
            raise
        message, code = f"the store is unavailable: {failure}", 1
    sys.stderr.write(f"grimoire {name}: {message}\n")
    return code


def _add_ops_parsers(sub: Any) -> None:
    """The parsers of the operation commands (one per HTTP route family)."""
    agents = sub.add_parser(
        "agents", help="every agent with an ingested event, one JSON line each (as GET /v1/agents)"
    )
    agents.set_defaults(agent=None)

    search = sub.add_parser(
        "search",
        help="a recall that counts no usage (inspection): one JSON line per item",
        description="Ask a recall question as inspection (record_usage=false: nothing is "
        "counted), through the workers as POST /v1/agents/{agent}/search does. One JSON "
        "line per item.",
    )
    search.add_argument("--agent", required=True)
    search.add_argument(
        "--k", type=int, default=None, help="items to return (default: the agent's top_k)"
    )
    search.add_argument(
        "--explain", action="store_true", help="each item's ranking factors under 'scores'"
    )
    _add_api_key(search)
    search.add_argument("query")

    memory = sub.add_parser(
        "memory",
        help="one memory with its full text and every stored field (JSON; exit 1 if absent)",
        description="The memory with its full text, every stored field (vectors left out), "
        "usage counters and status flags, as GET /v1/agents/{agent}/memories/{id}. Another "
        "agent's memory reads as absent (exit 1).",
    )
    memory.add_argument("--agent", required=True)
    memory.add_argument(
        "--graph",
        action="store_true",
        help="add its nexus-key neighbourhood under 'graph' ({nodes, edges, truncated})",
    )
    memory.add_argument(
        "--depth", type=int, default=1, help=f"--graph: hops from it, 1-{_MAX_DEPTH} (default 1)"
    )
    memory.add_argument("memory_id", metavar="MEMORY_ID")

    causal = sub.add_parser(
        "causal",
        help="a memory's causal neighbours, k hops away (JSON)",
        description="The memory's neighbours in the agent's causal graph (cause → effect "
        "edges learned from runs' outcomes), breadth-first up to --hops edges away, each "
        "with the edge it was reached by, as GET /v1/agents/{agent}/causal/{id}. One JSON "
        "object {memory_id, hops, direction, nodes, truncated}; a memory without edges "
        "has no nodes.",
    )
    causal.add_argument("--agent", required=True)
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

    episodes = sub.add_parser(
        "episodes",
        help="an agent's episodes, newest first (one JSON line each), or one with --episode",
        description="Without --episode: the agent's episodes (hyperedges: turn:..., run:...), "
        "newest first, one JSON line each {episode_id, members, first_ts, last_ts}. With "
        "--episode: that episode's members with their roles (exit 1 if the agent has none).",
    )
    episodes.add_argument("--agent", required=True)
    episodes.add_argument(
        "--episode", default=None, metavar="EPISODE_ID", help="one episode's members and roles"
    )
    episodes.add_argument(
        "--limit", type=int, default=50, help=f"episodes to list, 1-{_MAX_EPISODES} (default 50)"
    )
    episodes.add_argument("--offset", type=int, default=0, help="episodes to skip (paging)")

    config = sub.add_parser(
        "config", help="an agent's runtime configuration: get | set key=value ..."
    )
    config_kind = config.add_subparsers(dest="config", required=True)
    config_get = config_kind.add_parser(
        "get", help="the agent's configuration, every setting (JSON)"
    )
    config_get.add_argument("--agent", required=True)
    config_set = config_kind.add_parser(
        "set",
        help="change settings: a configure command through the journal (effective from "
        "the agent's next event)",
        description="Change part of the agent's configuration: memory_enabled, "
        "ingest_enabled, retrieval_enabled, top_k, time_window_ms, layers, lane_weights. "
        "Each value is JSON when it parses, else text; key=null resets a setting. "
        "Checked against the stored configuration first (exit 2 naming the field), then "
        "sent as a configure command. Examples: ingest_enabled=false top_k=8 "
        "'layers=[\"observation\"]' 'lane_weights={\"bm25\": 2}' time_window_ms=null",
    )
    config_set.add_argument("--agent", required=True)
    _add_api_key(config_set)
    config_set.add_argument("pairs", nargs="+", metavar="key=value")

    retract = sub.add_parser(
        "retract",
        help="retract a source event and what was derived from it (a command; JSON)",
    )
    retract.add_argument("--agent", required=True)
    retract.add_argument(
        "--source-event-id", required=True, help="the event_id the memory came from"
    )
    _add_api_key(retract)

    forget = sub.add_parser(
        "forget",
        help="erase an agent: all of its memory, its journal made unreadable (needs --yes)",
    )
    forget.add_argument("--agent", required=True)
    forget.add_argument("--yes", action="store_true", help="yes, erase it (there is no undo)")
    _add_api_key(forget)

    for action, what in (
        ("pin", "pin a memory: never compacted or archived"),
        ("unpin", "unpin a memory (compaction and archiving may take it again)"),
    ):
        pinning = sub.add_parser(action, help=f"{what} (a command; exit 1 if absent)")
        pinning.add_argument("--agent", required=True)
        _add_api_key(pinning)
        pinning.add_argument("memory_id", metavar="MEMORY_ID")

    events = sub.add_parser(
        "events",
        help="publish one episode, tool event or transcript line, checked first (JSON)",
        description="Publish one event to the agent's input topic after checking it with "
        "the worker's own normaliser (what it would dead-letter is refused here, exit 2). "
        "--json holds the event's fields (EpisodeV1, ToolEventV1 or TranscriptV1) without "
        "agent_id, or @FILE, or - for standard input.",
    )
    events.add_argument("--agent", required=True)
    events.add_argument("--kind", required=True, choices=_EVENT_KINDS)
    events.add_argument(
        "--json",
        required=True,
        metavar="JSON",
        help='the event, e.g. \'{"ts": 1790000000000, "text": "..."}\', @FILE or -',
    )


def run_mcp(args: argparse.Namespace) -> int:
    """`grimoire mcp`: serve until interrupted. On stdio, stdout is the protocol's:
    logs go to stderr (where `configure_logging` already sends them)."""
    import contextlib

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


def _stack_ports(
    parser: argparse.ArgumentParser, *, kafka: int, redis: int, http: int, mcp: int
) -> None:
    """The loopback ports of a local stack (`up`, `smoke`)."""
    parser.add_argument("--kafka-port", type=int, default=kafka)
    parser.add_argument("--redis-port", type=int, default=redis)
    parser.add_argument("--http-port", type=int, default=http)
    parser.add_argument("--mcp-port", type=int, default=mcp)


def _up_options(args: argparse.Namespace, state: str) -> Any:
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


def _add_exchange_parsers(sub: Any) -> None:
    export = sub.add_parser(
        "export", help="write an agent's state as a JSON Lines file (docs/export-format.md)"
    )
    export.add_argument("--agent", required=True)
    export.add_argument("--out", default=None, help="the file (default: stdout)")
    export.add_argument(
        "--vectors",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="carry the memories' vectors (without: the importing worker re-embeds)",
    )
    export.add_argument("--no-progress", action="store_true", help="no progress bar")
    importing = sub.add_parser(
        "import", help="write an export into an agent through its journal (JSON report)"
    )
    importing.add_argument("file")
    importing.add_argument("--agent", default=None, help="the agent written (default: the file's)")
    importing.add_argument(
        "--as-successor-of",
        dest="successor_of",
        default=None,
        metavar="AGENT",
        help="--agent inherits the file's agent's memories (provenance predecessor)",
    )
    importing.add_argument(
        "--inheritance-discount",
        type=float,
        default=0.5,
        help="a successor's confidence = the predecessor's x this (default 0.5)",
    )
    importing.add_argument("--prefix", default=None, help="the deployment (default: settings)")
    importing.add_argument(
        "--no-wait", action="store_true", help="return once sent, before it is applied"
    )
    importing.add_argument("--timeout", type=float, default=600.0, help="seconds to wait")
    importing.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_api_key(importing)


def _import_key_check(settings: Settings, api_key: str | None) -> Any:
    """Where the workers check keys, an import's key must reach every agent it
    touches (the target; a successor's predecessor too): refused here, before a
    chunk is sent, rather than dead-lettered chunk by chunk while the CLI waits."""
    if not settings.auth_enabled:
        return None

    async def check(agents: list[str]) -> None:
        from grimoire.tables.trust.api_keys import Authenticator

        async with _api_keys(settings) as store:
            authenticator = Authenticator(store, enabled=True, ttl_s=0.0)
            for agent in agents:
                decision = await authenticator.check(api_key, agent)
                if not decision.ok:
                    raise _Refused(1, f"the key is refused for {agent!r}: {decision.detail}")

    return check


def _exchange_command(settings: Settings, args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from grimoire.infra.exchange import export_agent, import_file
    from grimoire.streams.exchange.format import ExchangeError
    from grimoire.streams.exchange.inherit import InheritanceOptions

    try:
        if args.command == "export":
            agent = _checked_agent(settings, args.agent)
            if args.out:
                with open(args.out, "wb") as out:
                    done = asyncio.run(
                        export_agent(settings, agent, out, vectors=args.vectors,
                                     progress=not args.no_progress, out_name=args.out)
                    )  # fmt: skip
                sys.stderr.write(orjson.dumps(asdict(done)).decode() + "\n")
            else:
                done = asyncio.run(
                    export_agent(settings, agent, sys.stdout.buffer, vectors=args.vectors,
                                 progress=not args.no_progress)
                )  # fmt: skip
            return 0
        if args.prefix:
            settings = settings.model_copy(update={"topic_prefix": args.prefix})
        report = asyncio.run(
            import_file(
                settings,
                Path(args.file),
                agent_id=args.agent,
                successor_of=args.successor_of,
                options=InheritanceOptions(args.inheritance_discount),
                api_key=_api_key(args),
                wait=not args.no_wait,
                timeout_s=args.timeout,
                progress=not args.no_progress,
                check_key=_import_key_check(settings, _api_key(args)),
            )
        )
    except _Refused as refused:
        sys.stderr.write(f"grimoire {args.command}: {refused.message}\n")
        return refused.code
    except (ExchangeError, ValueError, OSError) as exc:
        sys.stderr.write(f"grimoire {args.command}: {exc}\n")
        return 2
    sys.stdout.write(orjson.dumps(asdict(report)).decode() + "\n")
    return 0 if report.applied is not False else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grimoire", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    worker_cmd = sub.add_parser("worker", help="run a Faust worker (settings from GRIMOIRE_* env)")
    worker_cmd.add_argument(
        "--roles",
        default=None,
        help="what this worker serves: ingest, recall or ingest,recall (default: "
        "GRIMOIRE_WORKER_ROLES, both); every role joins the same group",
    )
    services = sub.add_parser("services", help="local tansu + Redis: up | down | status")
    services.add_argument("action", choices=["up", "down", "status"])
    recall = sub.add_parser("recall", help="ask a recall question and print the items")
    recall.add_argument("--agent", required=True)
    recall.add_argument("--k", type=int, default=5)
    _add_api_key(recall)
    recall.add_argument("query")
    _add_ops_parsers(sub)
    stats = sub.add_parser(
        "stats",
        help="an agent's counters, field state and cognitive metrics with healthy ranges (JSON)",
    )
    stats.add_argument("--agent", required=True)
    stats.add_argument(
        "--table", action="store_true", help="a readable table of the cognitive metrics"
    )
    serve = sub.add_parser(
        "serve", help="the HTTP API (recall, memories, episodes, stats, commands, /metrics)"
    )
    serve.add_argument("--host", default=None, help="address to bind (default $GRIMOIRE_HTTP_HOST)")
    serve.add_argument(
        "--port", type=int, default=None, help="port (default $GRIMOIRE_HTTP_PORT, 8080)"
    )
    playbook = sub.add_parser("playbook", help="print an agent's PLAYBOOK.md (curator output)")
    playbook.add_argument("--agent", required=True)
    maintain = sub.add_parser("maintain", help="ask for an agent's due maintenance now")
    maintain.add_argument("--agent", required=True)
    maintain.add_argument("--compact", action="store_true", help="compact now, even if not due")
    reindex = sub.add_parser(
        "reindex", help="rebuild an agent's walk node table and term counts (after an upgrade)"
    )
    reindex.add_argument("--agent", required=True)
    digest = sub.add_parser(
        "digest", help="a digest of everything stored for each agent (one JSON line each)"
    )
    digest.add_argument("--agent", dest="agents", action="append", required=True)
    audit = sub.add_parser("audit", help="check what is stored against its witnesses")
    audit_kind = audit.add_subparsers(dest="audit", required=True)
    verify = audit_kind.add_parser(
        "verify", help="recompute an agent's witness chain (JSON; exit code 1 when broken)"
    )
    verify.add_argument("--agent", required=True)
    keys = sub.add_parser("keys", help="tenant API keys: create | revoke | list")
    keys_kind = keys.add_subparsers(dest="keys", required=True)
    keys_create = keys_kind.add_parser(
        "create", help="a new key for agents, a prefix or all (JSON; its token shown once)"
    )
    scope = keys_create.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--agent",
        dest="agents",
        metavar="AGENT",
        action="append",
        help="an agent id it reaches (repeatable)",
    )
    scope.add_argument("--prefix", default=None, help="every agent id starting with this")
    scope.add_argument("--admin", action="store_true", help="every agent (the operator's key)")
    keys_create.add_argument("--label", default="", help="a note for listings (who holds it)")
    keys_revoke = keys_kind.add_parser(
        "revoke", help="revoke a key by id (refused everywhere within seconds)"
    )
    keys_revoke.add_argument("key_id")
    keys_kind.add_parser("list", help="every key, one JSON line each (never a secret)")
    replay_cmd = sub.add_parser(
        "replay", help="fold the journal into an empty store or a new prefix (JSON report)"
    )
    replay_cmd.add_argument(
        "--into-prefix", default=None, help="a new prefix to build (default: the deployment's)"
    )
    replay_cmd.add_argument(
        "--wipe", action="store_true", help="first delete the target's memory state (not keys)"
    )
    replay_cmd.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_exchange_parsers(sub)
    up = sub.add_parser(
        "up",
        help="the whole service locally (broker, Redis, worker, HTTP API, inspector, MCP) "
        "until Ctrl-C",
    )
    _stack_ports(up, kafka=9092, redis=6379, http=8080, mcp=8765)
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
    smoke = sub.add_parser(
        "smoke",
        help="start the stack as `up` does, exercise every HTTP route and MCP tool, tenant "
        "keys on HTTP and Kafka, metrics and the inspector; JSON on the last line",
    )
    _stack_ports(smoke, kafka=19892, redis=16892, http=18089, mcp=18769)
    smoke.add_argument("--screenshot", default="bench-results/inspector.png")
    demo = sub.add_parser("demo", help="services + worker + simulated agent + recall questions")
    demo.add_argument("--ticks", type=int, default=6)
    demo.add_argument("--block-interval", type=float, default=None)
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
    args = parser.parse_args(argv)

    settings = Settings()
    configure_logging(settings.log_level)
    if args.command == "worker":
        if args.roles is not None:
            from grimoire.agents.roles import parse_roles

            try:
                roles = parse_roles(args.roles)
            except ValueError as exc:
                parser.error(str(exc))
            # model_copy does not validate: the roles go in normalised, as the field keeps them.
            settings = settings.model_copy(
                update={"worker_roles": ",".join(sorted(role.value for role in roles))}
            )
        return run_worker(settings)
    if args.command == "services":
        from grimoire.infra.local import services as local_services

        return local_services.main([args.action])
    if args.command == "recall":
        asyncio.run(_recall(settings, args.agent, args.query, args.k, _api_key(args)))
        return 0
    if args.command in _OPS_COMMANDS:
        return _ops_command(settings, args)
    if args.command == "stats":
        report = asyncio.run(_stats(settings, args.agent))
        if args.table:
            sys.stdout.write(_stats_table(report))
        else:
            sys.stdout.write(orjson.dumps(report).decode() + "\n")
        return 0
    if args.command == "serve":
        return run_serve(settings, args.host, args.port)
    if args.command == "playbook":
        text = asyncio.run(_playbook(settings, args.agent))
        if text is None:
            sys.stderr.write(f"no PLAYBOOK.md yet for {args.agent}\n")
            return 1
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return 0
    if args.command == "maintain":
        asyncio.run(_maintain(settings, args.agent, args.compact))
        return 0
    if args.command == "reindex":
        report = asyncio.run(_reindex(settings, args.agent))
        sys.stdout.write(orjson.dumps(report).decode() + "\n")
        return 0
    if args.command == "digest":
        for digest_report in asyncio.run(_digest(settings, args.agents)):
            sys.stdout.write(orjson.dumps(digest_report).decode() + "\n")
        return 0
    if args.command == "audit" and args.audit == "verify":
        verdict = asyncio.run(_audit_verify(settings, args.agent))
        sys.stdout.write(orjson.dumps(verdict).decode() + "\n")
        return 0 if verdict["verified"] else 1
    if args.command == "keys":
        return _keys_command(settings, args)
    if args.command == "replay":
        from dataclasses import asdict

        from grimoire.infra.replay import replay

        replayed = asyncio.run(
            replay(
                settings,
                into_prefix=args.into_prefix,
                wipe=args.wipe,
                progress=not args.no_progress,
            )
        )
        sys.stdout.write(
            orjson.dumps(asdict(replayed), option=orjson.OPT_NON_STR_KEYS).decode() + "\n"
        )
        return 0
    if args.command in ("export", "import"):
        return _exchange_command(settings, args)
    if args.command == "mcp":
        return run_mcp(args)
    if args.command == "up":
        from grimoire.infra.local.up import run_up

        return run_up(
            settings.model_copy(update={"auth_enabled": not args.no_auth}), _up_options(args, "run")
        )
    if args.command == "smoke":
        from grimoire.infra.local.smoke import SmokeOptions, run_smoke

        report = run_smoke(
            settings.model_copy(update={"topic_prefix": f"smoke{int(time.time())}"}),
            SmokeOptions(up=_up_options(args, "smoke"), screenshot=Path(args.screenshot)),
        )
        sys.stdout.write(orjson.dumps(report).decode() + "\n")
        return 0 if report["passed"] else 1
    if args.command == "demo":
        from grimoire.infra.demo.run import run_demo

        return run_demo(settings, ticks=args.ticks, block_interval_s=args.block_interval)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
