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
    from grimoire.streams.trust.tenancy import ApiKeyRecord, TenantScope
    from grimoire.tables.trust.api_keys import ApiKeyStore

logger = logging.getLogger(__name__)


def run_worker(settings: Settings) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # The model shares the cores with the event loop, Redis and the broker: idle
    # OpenMP threads must sleep rather than spin, or they starve everything else.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import faust

    from grimoire.infra.app import create_app

    names = TopicNames(settings.topic_prefix)
    asyncio.run(
        ensure_topics(
            settings.bootstrap_servers,
            {name: settings.partitions for name in names.all_partitioned()},
            replication_factor=settings.replication_factor,
        )
    )
    app = create_app(settings)
    worker = faust.Worker(app, loglevel=settings.log_level, quiet=True)
    worker.execute_from_commandline()  # runs until SIGINT/SIGTERM, then exits the process
    return 0


async def _recall(settings: Settings, agent_id: str, query: str, k: int) -> None:
    from grimoire.topics.client import GrimoireClient

    async with GrimoireClient(
        settings.bootstrap_servers, settings.topic_prefix, partitions=settings.partitions
    ) as client:
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

    from grimoire.tables.memory.rebuild import rebuild_derived
    from grimoire.tables.redis_client import create_redis

    redis = create_redis(settings.redis_url, 2)
    try:
        return asdict(await rebuild_derived(redis, settings.topic_prefix, agent_id))
    finally:
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
    from grimoire.topics.client import GrimoireClient

    async with GrimoireClient(
        settings.bootstrap_servers, settings.topic_prefix, partitions=settings.partitions
    ) as client:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grimoire", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("worker", help="run a Faust worker (settings from GRIMOIRE_* env)")
    services = sub.add_parser("services", help="local tansu + Redis: up | down | status")
    services.add_argument("action", choices=["up", "down", "status"])
    recall = sub.add_parser("recall", help="ask a recall question and print the items")
    recall.add_argument("--agent", required=True)
    recall.add_argument("--k", type=int, default=5)
    recall.add_argument("query")
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
    up = sub.add_parser(
        "up",
        help="the whole service locally (broker, Redis, worker, HTTP API, inspector, MCP) "
        "until Ctrl-C",
    )
    up.add_argument("--kafka-port", type=int, default=9092)
    up.add_argument("--redis-port", type=int, default=6379)
    up.add_argument("--http-port", type=int, default=8080)
    up.add_argument("--mcp-port", type=int, default=8765)
    up.add_argument(
        "--tenant-prefix",
        default="",
        help="the first tenant key reaches agent ids with this prefix (default: every agent)",
    )
    up.add_argument(
        "--no-auth", action="store_true", help="switch tenant keys off (local development)"
    )
    demo = sub.add_parser("demo", help="services + worker + simulated agent + recall questions")
    demo.add_argument("--ticks", type=int, default=6)
    demo.add_argument("--block-interval", type=float, default=None)
    bench = sub.add_parser("bench", help="benchmarks (JSON on the last line)")
    bench_kind = bench.add_subparsers(dest="bench", required=True)
    ingest = bench_kind.add_parser("ingest", help="the real write path on a generated stream")
    ingest.add_argument("--events", type=int, default=20_000)
    ingest.add_argument("--agents", type=int, default=20)
    ingest.add_argument(
        "--mix", choices=["both", "repetitive", "distinct"], default="both", help="stream(s) to run"
    )
    recall_bench = bench_kind.add_parser("recall", help="recall latency at 10k and 100k memories")
    recall_bench.add_argument("--sizes", default="10000,100000", help="comma-separated sizes")
    recall_bench.add_argument("--queries", type=int, default=200, help="timed queries per size")
    maint_bench = bench_kind.add_parser(
        "maintenance", help="one due maintenance pass at 10k and 100k memories"
    )
    maint_bench.add_argument("--sizes", default="10000,100000", help="comma-separated sizes")
    maint_bench.add_argument("--fresh", type=int, default=500, help="new memories per pass")
    faults = bench_kind.add_parser(
        "faults", help="worker kills, a Redis restart and hostile input against a clean run"
    )
    faults.add_argument("--events", type=int, default=20_000)
    faults.add_argument("--agents", type=int, default=20)
    faults.add_argument("--kills", type=int, default=3, help="worker SIGKILLs")
    faults.add_argument("--fuzz", type=int, default=10_000, help="hostile messages")
    faults.add_argument("--seed", type=int, default=21)
    faults.add_argument(
        "--without", action="append", default=[], help="leave a fuzz kind out (repeatable)"
    )
    locomo = bench_kind.add_parser("locomo", help="LoCoMo evidence retrieval vs BM25 and dense")
    locomo.add_argument("--data", default=None, help="a LoCoMo-format JSON file")
    locomo.add_argument("--conversations", default="", help="comma-separated sample ids")
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
        return run_worker(settings)
    if args.command == "services":
        from grimoire.infra.local import services as local_services

        return local_services.main([args.action])
    if args.command == "recall":
        asyncio.run(_recall(settings, args.agent, args.query, args.k))
        return 0
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
    if args.command == "mcp":
        return run_mcp(args)
    if args.command == "up":
        from grimoire.infra.local.up import UpOptions, run_up

        options = UpOptions(
            state_dir=Path(os.environ.get("GRIMOIRE_STATE_DIR", ".grimoire")) / "run",
            kafka_port=args.kafka_port,
            redis_port=args.redis_port,
            http_port=args.http_port,
            mcp_port=args.mcp_port,
            tenant_prefix=args.tenant_prefix,
        )
        return run_up(settings.model_copy(update={"auth_enabled": not args.no_auth}), options)
    if args.command == "demo":
        from grimoire.infra.demo.run import run_demo

        return run_demo(settings, ticks=args.ticks, block_interval_s=args.block_interval)
    if args.command == "bench" and args.bench == "ingest":
        from grimoire.infra.bench.ingest import run_ingest_bench

        mixes = ("repetitive", "distinct") if args.mix == "both" else (args.mix,)
        result = run_ingest_bench(settings, events=args.events, agents=args.agents, mixes=mixes)
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
        return 0
    if args.command == "bench" and args.bench == "recall":
        from grimoire.infra.bench.recall import run_recall_bench

        sizes = tuple(int(size) for size in args.sizes.split(","))
        result = run_recall_bench(settings, sizes=sizes, queries=args.queries)
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
        return 0
    if args.command == "bench" and args.bench == "maintenance":
        from grimoire.infra.bench.maintenance import run_maintenance_bench

        sizes = tuple(int(size) for size in args.sizes.split(","))
        result = run_maintenance_bench(settings, sizes=sizes, fresh=args.fresh)
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
        return 0
    if args.command == "bench" and args.bench == "faults":
        from grimoire.infra.bench.faults import run_faults_bench

        result = run_faults_bench(
            settings,
            events=args.events,
            agents=args.agents,
            kills=args.kills,
            fuzz=args.fuzz,
            seed=args.seed,
            without=tuple(args.without),
        )
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
        return 0
    if args.command == "bench" and args.bench == "locomo":
        from grimoire.infra.bench.locomo import default_data_path, run_locomo_bench

        data = Path(args.data) if args.data else default_data_path()
        if not data.is_file():
            sys.stderr.write(
                f"grimoire bench locomo: no LoCoMo file at {data}; pass --data FILE "
                '(make bench-locomo LOCOMO_ARGS="--data FILE")\n'
            )
            return 2
        wanted = tuple(c for c in args.conversations.split(",") if c)
        result = run_locomo_bench(settings, data_path=data, conversation_ids=wanted)
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
        return 0
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
