"""The `grimoire` command: worker, local services, recall, demo."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

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


async def _stats(settings: Settings, agent_id: str) -> dict[str, object]:
    from dataclasses import asdict

    from grimoire.tables.maintenance.ledger import MaintenanceLedgerStore
    from grimoire.tables.memory.agent_state import AgentStateStore, AgentStats
    from grimoire.tables.redis_client import create_redis

    redis = create_redis(settings.redis_url, 2)
    try:
        state = AgentStateStore(redis, settings.topic_prefix)
        stats = AgentStats.from_counters(await state.stats(agent_id))
        field = await state.field(agent_id)
        ledger = await MaintenanceLedgerStore(redis, settings.topic_prefix).ledger(agent_id)
        return {
            "agent_id": agent_id,
            **asdict(stats),
            "admission_rate": round(stats.admission_rate, 4),
            "average_quality": round(stats.average_quality, 4),
            "watermark_ms": field.watermark_ms,
            "tick": field.tick,
            "regime": field.regime,
            "focus": list(field.digest()),
            "maintenance_ticks": asdict(ledger),
        }
    finally:
        await redis.aclose()


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
    stats = sub.add_parser("stats", help="an agent's write-path counters and field state (JSON)")
    stats.add_argument("--agent", required=True)
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
        sys.stdout.write(orjson.dumps(report).decode() + "\n")
        return 0
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
        from pathlib import Path

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
