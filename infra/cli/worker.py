"""`grimoire worker`: one Faust worker, for the roles it is given.

The worker's process settings (its niceness, the OpenMP wait policy, offline model
loading) are set here, before any thread starts, because every thread it makes
later inherits them."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

from grimoire.infra.cli import common
from grimoire.infra.settings import Settings
from grimoire.topics.declarations import TopicNames, ensure_topics

__all__ = ["COMMANDS", "run_worker"]

logger = logging.getLogger(__name__)


def run_worker(settings: Settings) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # The model shares the cores with the event loop, Redis and the broker: idle
    # OpenMP threads must sleep rather than spin, or they starve everything else.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if settings.worker.nice:
        # Before any thread starts: Linux sets a thread's priority, and every thread
        # the worker makes later (the consumer's, the model lanes) inherits this one.
        os.nice(settings.worker.nice)
    import faust

    from grimoire.infra.app import create_app

    names = TopicNames(settings.broker.topic_prefix)
    asyncio.run(
        ensure_topics(
            settings.bootstrap_servers,
            {name: settings.broker.partitions for name in names.all_partitioned()},
            replication_factor=settings.broker.replication_factor,
            security=settings.kafka_security,
        )
    )
    app = create_app(settings)
    logger.info("worker serves %s", ", ".join(sorted(role.value for role in settings.roles)))
    worker = faust.Worker(app, loglevel=settings.worker.log_level, quiet=True)
    worker.execute_from_commandline()  # runs until SIGINT/SIGTERM, then exits the process
    return 0


def _run(settings: Settings, args: argparse.Namespace) -> int:
    if args.roles is not None:
        from grimoire.agents.roles import parse_roles

        try:
            parse_roles(args.roles)  # a bad one is a usage error, not a settings error
        except ValueError as exc:
            raise common.UsageError(str(exc)) from None
        settings = settings.with_values(worker_roles=args.roles)  # kept normalised
    return run_worker(settings)


def _add_worker(sub: common.Subparsers) -> None:
    worker_cmd = sub.add_parser("worker", help="run a Faust worker (settings from GRIMOIRE_* env)")
    worker_cmd.add_argument(
        "--roles",
        default=None,
        help="what this worker serves: ingest, recall or ingest,recall (default: "
        "GRIMOIRE_WORKER_ROLES, both); every role joins the same group",
    )


COMMANDS: dict[str, common.Subcommand] = {
    "worker": common.Subcommand(_add_worker, _run),
}
