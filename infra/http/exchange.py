"""Export and import over HTTP (docs/export-format.md), as `grimoire export` and
`grimoire import` do them, through the same functions (`grimoire.infra.exchange`).

* `GET /v1/agents/{agent}/export?vectors=true|false` streams the agent's JSON
  Lines file: header, state lines, trailer (its sha256 over what came before).
* `POST /v1/agents/{agent}/import?as_successor_of=&discount=` takes a whole file
  as the body, validates it before anything is sent (a bad file is a 400 naming
  its line), and publishes it as `import` commands, a chunk each, which the
  journal applies (202 with the import id and the chunk count; the agent's
  `applied_imports` tell when every chunk is in). An ordinary import restores the
  file's own agent, so the path must name it; a successor import (the path names
  the successor) also needs a key that reaches the predecessor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from grimoire.infra.exchange import chunk_command, export_state, plan_import, read_file
from grimoire.infra.http.bodies import read_body
from grimoire.infra.http.errors import ApiError, json_response
from grimoire.infra.http.routing import agent_endpoint, authorize, caller_key, deps_of
from grimoire.streams.exchange.format import ExchangeError, ExportWriter
from grimoire.streams.exchange.inherit import InheritanceOptions
from grimoire.streams.inbound.validators import INVALID_VALUE, is_agent_id
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.keyspace import Keyspace

__all__ = ["EXPORT_MEDIA_TYPE", "MAX_IMPORT_BYTES", "routes"]

EXPORT_MEDIA_TYPE = "application/x-ndjson"
# An import body is read whole (it is validated before a chunk is sent); larger
# files go through `grimoire import`, which reads from disk.
MAX_IMPORT_BYTES = 256 << 20


def _flag(request: Request, name: str, default: bool) -> bool:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise ApiError(400, INVALID_VALUE, f"{name!r} must be true or false, got {raw!r}", field=name)


@agent_endpoint
async def export(request: Request, agent_id: str) -> Response:
    vectors = _flag(request, "vectors", True)
    deps = deps_of(request)
    header, lines = await export_state(deps.redis, deps.prefix, agent_id, vectors=vectors)

    async def body() -> AsyncIterator[bytes]:
        writer = ExportWriter()
        yield writer.header(header)
        for line in lines:
            yield writer.line(line)
        yield writer.trailer()

    name = agent_id.replace("/", "_")
    return StreamingResponse(
        body(),
        media_type=EXPORT_MEDIA_TYPE,
        headers={"Content-Disposition": f'attachment; filename="{name}.jsonl"'},
    )


def _discount(request: Request) -> InheritanceOptions:
    raw = request.query_params.get("discount")
    if raw is None or raw == "":
        return InheritanceOptions()
    try:
        return InheritanceOptions(discount=float(raw))
    except ValueError as bad:
        raise ApiError(400, INVALID_VALUE, str(bad), field="discount") from None


@agent_endpoint
async def import_(request: Request, agent_id: str) -> Response:
    deps = deps_of(request)
    predecessor = request.query_params.get("as_successor_of") or None
    if predecessor is not None:
        if not is_agent_id(predecessor, deps.settings.input_limits):
            raise ApiError(
                400, INVALID_VALUE, "'as_successor_of' is not an agent id", field="as_successor_of"
            )
        # The successor's key must also reach what it inherits.
        await authorize(request, predecessor)
    options = _discount(request)
    raw = await read_body(request, MAX_IMPORT_BYTES)
    if not raw.strip():
        raise ApiError(400, "missing_field", "the body must be an export file (JSON Lines)")
    try:
        header, lines, trailer = read_file(raw.splitlines())
    except ExchangeError as bad:
        raise ApiError(400, INVALID_VALUE, str(bad), field="body") from None
    space = await deps.redis.get(Keyspace(deps.prefix).vector_space)
    try:
        plan = plan_import(
            header,
            lines,
            trailer,
            agent_id=agent_id,
            successor_of=predecessor,
            options=options,
            target_space=None if space is None else text_of(space),
        )
    except ExchangeError as bad:
        raise ApiError(400, INVALID_VALUE, str(bad), field="body") from None
    # The worker judges the caller's own key again, as for every command.
    key = caller_key(request)
    for chunk in plan.chunks:
        await deps.client.send_command(dataclasses.replace(chunk_command(chunk), api_key=key))
    return json_response(
        {
            "accepted": True,
            "agent_id": plan.agent_id,
            "import_id": plan.import_id,
            "chunks": len(plan.chunks),
            "lines": plan.lines,
            "memories": plan.memories,
            "successor_of": plan.successor_of,
            "reembedded": plan.reembedded,
        },
        202,
    )


def routes() -> list[Route]:
    return [
        Route("/v1/agents/{agent:path}/export", export, methods=["GET"]),
        Route("/v1/agents/{agent:path}/import", import_, methods=["POST"]),
    ]
