"""The operator's commands about one agent's health and upkeep: `stats`, `playbook`,
`maintain`, `reindex`, `digest` and `audit verify`.

`stats` is the HTTP API's own report (`agent_stats` of infra/http/stats.py, as
GET …/stats); `playbook` and `audit verify` read the same stores as their routes
(infra/http/agents.py); `maintain` asks the workers through Kafka; `reindex` and
`digest` exist only here (an upgrade step and a cross-check between deployments)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

import orjson

from grimoire.infra.cli import common
from grimoire.infra.settings import Settings

__all__ = ["COMMANDS"]


async def _stats(settings: Settings, agent_id: str) -> dict[str, Any]:
    from grimoire.infra.http.stats import agent_stats

    async with common.memory_redis(settings) as redis:
        return await agent_stats(redis, settings.broker.topic_prefix, agent_id, settings)


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


async def _playbook(settings: Settings, agent_id: str) -> str | None:
    from grimoire.tables.maintenance.curator_store import RedisCuratorStore, playbook_text

    async with common.memory_redis(settings) as redis:
        store = RedisCuratorStore(redis, settings.broker.topic_prefix)
        return await playbook_text(store, agent_id, settings.recall.clade_discount)


async def _maintain(settings: Settings, agent_id: str, compact: bool) -> None:
    async with common.gateway(settings, None) as client:
        await client.request_maintenance(agent_id, compact=compact)


async def _reindex(settings: Settings, agent_id: str) -> dict[str, object]:
    from dataclasses import asdict

    from tqdm import tqdm

    from grimoire.tables.memory.rebuild import rebuild_derived
    from grimoire.tables.redis_client import create_redis

    redis = create_redis(settings.redis.url, 2)
    bar = tqdm(unit="memory", desc="reindex", file=sys.stderr)

    def advance(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        return asdict(await rebuild_derived(redis, settings.broker.topic_prefix, agent_id, advance))
    finally:
        bar.close()
        await redis.aclose()


async def _digest(settings: Settings, agent_ids: list[str]) -> list[dict[str, object]]:
    from grimoire.tables.trust.digest import agent_digest

    async with common.memory_redis(settings) as redis:
        return [
            (await agent_digest(redis, settings.broker.topic_prefix, agent_id)).asdict()
            for agent_id in agent_ids
        ]


async def _audit_verify(settings: Settings, agent_id: str) -> dict[str, object]:
    from grimoire.tables.trust.witness_store import RedisWitnessLog, audit

    async with common.memory_redis(settings) as redis:
        verdict = await audit(RedisWitnessLog(redis, settings.broker.topic_prefix), agent_id)
    return {
        "agent": agent_id,
        "verified": verdict.ok,
        "records": verdict.count,
        "first_broken": verdict.first_broken,
        "reason": verdict.reason,
        "head": verdict.head,
    }


def _run_stats(settings: Settings, args: argparse.Namespace) -> int:
    report = asyncio.run(_stats(settings, args.agent))
    if args.table:
        sys.stdout.write(_stats_table(report))
    else:
        sys.stdout.write(orjson.dumps(report).decode() + "\n")
    return 0


def _run_playbook(settings: Settings, args: argparse.Namespace) -> int:
    text = asyncio.run(_playbook(settings, args.agent))
    if text is None:
        sys.stderr.write(f"no PLAYBOOK.md yet for {args.agent}\n")
        return 1
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def _run_maintain(settings: Settings, args: argparse.Namespace) -> int:
    asyncio.run(_maintain(settings, args.agent, args.compact))
    return 0


def _run_reindex(settings: Settings, args: argparse.Namespace) -> int:
    report = asyncio.run(_reindex(settings, args.agent))
    sys.stdout.write(orjson.dumps(report).decode() + "\n")
    return 0


def _run_digest(settings: Settings, args: argparse.Namespace) -> int:
    for digest_report in asyncio.run(_digest(settings, args.agents)):
        sys.stdout.write(orjson.dumps(digest_report).decode() + "\n")
    return 0


def _run_audit(settings: Settings, args: argparse.Namespace) -> int:
    if args.audit != "verify":
        return 2
    verdict = asyncio.run(_audit_verify(settings, args.agent))
    sys.stdout.write(orjson.dumps(verdict).decode() + "\n")
    return 0 if verdict["verified"] else 1


def _add_stats(sub: common.Subparsers) -> None:
    stats = common.agent_command(
        sub,
        "stats",
        help="an agent's counters, field state and cognitive metrics with healthy ranges (JSON)",
    )
    stats.add_argument(
        "--table", action="store_true", help="a readable table of the cognitive metrics"
    )


def _add_playbook(sub: common.Subparsers) -> None:
    common.agent_command(sub, "playbook", help="print an agent's PLAYBOOK.md (curator output)")


def _add_maintain(sub: common.Subparsers) -> None:
    maintain = common.agent_command(sub, "maintain", help="ask for an agent's due maintenance now")
    maintain.add_argument("--compact", action="store_true", help="compact now, even if not due")


def _add_reindex(sub: common.Subparsers) -> None:
    common.agent_command(
        sub, "reindex", help="rebuild an agent's walk node table and term counts (after an upgrade)"
    )


def _add_digest(sub: common.Subparsers) -> None:
    digest = sub.add_parser(
        "digest", help="a digest of everything stored for each agent (one JSON line each)"
    )
    digest.add_argument("--agent", dest="agents", action="append", required=True)


def _add_audit(sub: common.Subparsers) -> None:
    audit = sub.add_parser("audit", help="check what is stored against its witnesses")
    audit_kind = audit.add_subparsers(dest="audit", required=True)
    common.agent_command(
        audit_kind,
        "verify",
        help="recompute an agent's witness chain (JSON; exit code 1 when broken)",
    )


COMMANDS: dict[str, common.Subcommand] = {
    "stats": common.Subcommand(_add_stats, _run_stats),
    "playbook": common.Subcommand(_add_playbook, _run_playbook),
    "maintain": common.Subcommand(_add_maintain, _run_maintain),
    "reindex": common.Subcommand(_add_reindex, _run_reindex),
    "digest": common.Subcommand(_add_digest, _run_digest),
    "audit": common.Subcommand(_add_audit, _run_audit),
}
