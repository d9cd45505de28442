"""`grimoire events`: publish one episode, tool event or transcript line to the
agent's input topic, as POST /v1/agents/{agent}/events does (infra/http/events.py).

The event is checked with the worker's own normaliser first, so what the worker
would dead-letter is refused here (exit 2) and never published."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import orjson

from grimoire.infra.cli import common
from grimoire.infra.cli.ops import operation
from grimoire.infra.settings import Settings

__all__ = ["COMMANDS"]

#: `events --kind` → the input stream (infra/http/events.py `EVENT_KINDS`, kept equal
#: by a test: naming them here keeps `grimoire --help` from loading the HTTP app).
_EVENT_KINDS = ("episode", "tool_event", "transcript")


async def _publish_event(settings: Settings, kind: str, agent_id: str, raw: bytes) -> None:
    async with common.gateway(settings, None) as client:
        topic = {
            "episode": client.topics.episodes,
            "tool_event": client.topics.tool_events,
            "transcript": client.topics.transcripts,
        }[kind]
        await client.publish_raw(topic, agent_id, raw)


def _event_json(given: str) -> bytes:
    """`--json`: the object itself, `@FILE` or `-` (standard input)."""
    if given == "-":
        return sys.stdin.buffer.read()
    if given.startswith("@"):
        path = Path(given[1:])
        try:
            return path.read_bytes()
        except OSError as failed:
            raise common.Refused(2, f"cannot read {path}: {failed.strerror or failed}") from None
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
        raise common.Refused(2, f"--json is not JSON: {bad}") from None
    if not isinstance(body, dict):
        raise common.Refused(2, "--json must be a JSON object (the event's fields)")
    if body.setdefault("agent_id", args.agent) != args.agent:
        raise common.Refused(2, f"agent_id: the event names {body['agent_id']!r}, not --agent")
    raw = orjson.dumps(body)
    # The worker's own normaliser: what it would dead-letter is refused here.
    checked = normalize_event(event_type, raw, settings.input_limits)
    if isinstance(checked, Rejection):
        where = f"{checked.field}: " if checked.field else ""
        raise common.Refused(2, f"{where}{checked.detail} ({checked.reason})")
    asyncio.run(_publish_event(settings, args.kind, args.agent, raw))
    common.print_line(
        {
            "accepted": True,
            "kind": args.kind,
            "agent_id": args.agent,
            "event_id": checked.source_event_id,
            "candidates": [candidate.id for candidate in checked.candidates],
        }
    )
    return 0


def _add_events(sub: common.Subparsers) -> None:
    events = common.agent_command(
        sub,
        "events",
        help="publish one episode, tool event or transcript line, checked first (JSON)",
        description="Publish one event to the agent's input topic after checking it with "
        "the worker's own normaliser (what it would dead-letter is refused here, exit 2). "
        "--json holds the event's fields (EpisodeV1, ToolEventV1 or TranscriptV1) without "
        "agent_id, or @FILE, or - for standard input.",
    )
    events.add_argument("--kind", required=True, choices=_EVENT_KINDS)
    events.add_argument(
        "--json",
        required=True,
        metavar="JSON",
        help='the event, e.g. \'{"ts": 1790000000000, "text": "..."}\', @FILE or -',
    )


COMMANDS: dict[str, common.Subcommand] = {
    "events": common.Subcommand(_add_events, operation(_run_events)),
}
