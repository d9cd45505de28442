"""How the operation commands of the HTTP API fail: a refusal or an unreachable
service is one line on stderr and an exit code, never a traceback.

Each operation command (`agents`, `search`, `memory`, `causal`, `episodes`,
`config`, `retract`, `forget`, `pin`, `unpin`, `events`) reads the stores or sends
through Kafka exactly as its HTTP route does (infra/http/*.py), and checks its input
first with the same rules, so a bad argument is refused here and never reaches the
journal. `operation` wraps each of them with that policy once."""

from __future__ import annotations

import argparse
import functools
import sys

from grimoire.infra.cli import common
from grimoire.infra.settings import Settings

__all__ = ["operation"]


def operation(run: common.Handler) -> common.Handler:
    """`run` with the agent id checked first and every expected failure answered as
    `grimoire NAME: message` with exit code 1 (nothing there, a service down) or 2
    (a bad argument); an unexpected error is raised as it is."""

    @functools.wraps(run)
    def guarded(settings: Settings, args: argparse.Namespace) -> int:
        from aiokafka.errors import KafkaError

        from grimoire.tables.exceptions import is_outage
        from grimoire.topics.client import RecallFailed, RecallTimeout, RecallUnauthorized

        name = args.command if args.command != "config" else f"config {args.config}"
        try:
            if getattr(args, "agent", None) is not None:
                common.checked_agent(settings, args.agent)
            return run(settings, args)
        except common.Refused as refused:
            message, code = refused.message, refused.code
        except RecallTimeout:
            message = f"no worker answered within {settings.http.recall_timeout_s}s"
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

    return guarded
