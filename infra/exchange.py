"""`grimoire export` and `grimoire import` (docs/export-format.md).

Export reads the agent's state straight from Redis (`tables/memory/imported.py`)
and writes the JSON Lines file, a progress bar on stderr. Import reads and
validates the whole file first (nothing is sent from a file that does not check
out), turns it into a successor's lines when asked, then publishes it as `import`
commands on `{prefix}.commands`, a chunk each: the sequencer journals them and the
apply loop writes them, so a replay of the journal writes the import again. It
then waits until the agent's fold has applied every chunk (`--no-wait` skips it).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from grimoire.infra.ports import ProgressBar
from grimoire.infra.settings import Settings
from grimoire.streams.exchange.chunks import (
    ImportChunk,
    chunk_lines,
    chunk_to_wire,
    import_id,
)
from grimoire.streams.exchange.format import (
    ExchangeError,
    ExportHeader,
    ExportTrailer,
    ExportWriter,
    StateLine,
    read_export,
)
from grimoire.streams.exchange.inherit import Inheritance, InheritanceOptions
from grimoire.tables.codec.hash_values import text_of
from grimoire.tables.codec.watermark import WATERMARK_MEMBER
from grimoire.tables.keyspace import Keyspace
from grimoire.tables.memory.imported import VECTOR_FIELDS, read_state_lines
from grimoire.tables.redis_client import create_redis
from grimoire.tables.schema.vector_space import compatible
from grimoire.topics.schemas import CommandV1

__all__ = [
    "ExportReport",
    "ImportPlan",
    "ImportReport",
    "chunk_command",
    "export_agent",
    "export_state",
    "import_file",
    "plan_import",
    "read_file",
]

logger = logging.getLogger(__name__)

DEFAULT_DIMS = 384
WAIT_POLL_S = 0.2


class _NoBar:
    def update(self, n: int = 1) -> None:
        return None

    def close(self) -> None:
        return None


def _bar(total: int, desc: str, unit: str, enabled: bool) -> ProgressBar:
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    bar: ProgressBar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr)
    return bar


@dataclass(frozen=True, slots=True)
class ExportReport:
    agent: str
    lines: int
    counts: dict[str, int]
    vectors: bool
    sha256: str
    out: str


@dataclass(frozen=True, slots=True)
class ImportReport:
    agent: str
    import_id: str
    chunks: int
    lines: int
    memories: int
    successor_of: str | None
    reembedded: bool  # memories go without vectors: the worker embeds them
    applied: bool | None  # every chunk applied (None: not waited for)


# ---- export -----------------------------------------------------------------------


async def export_agent(
    settings: Settings,
    agent_id: str,
    out: BinaryIO,
    *,
    vectors: bool = True,
    progress: bool = True,
    out_name: str = "-",
) -> ExportReport:
    """Write the agent's export to `out`; what was written."""
    redis = create_redis(settings.redis.url, 2)
    try:
        reading = _bar(0, "export: read", "key", progress)

        def advance(done: int, total: int) -> None:
            if isinstance(reading, _NoBar):
                return
            bar: Any = reading
            bar.total = total
            bar.n = done
            bar.refresh()

        header, lines = await export_state(
            redis, settings.broker.topic_prefix, agent_id, vectors=vectors, progress=advance
        )
        reading.close()
    finally:
        await redis.aclose()
    counts = dict(header.counts)
    writer = ExportWriter()
    out.write(writer.header(header))
    bar = _bar(len(lines), "export: write", "line", progress)
    for line in lines:
        out.write(writer.line(line))
        bar.update(1)
    bar.close()
    sha = writer.sha256
    out.write(writer.trailer())
    out.flush()
    return ExportReport(agent_id, len(lines), dict(sorted(counts.items())), vectors, sha, out_name)


async def export_state(
    redis: Any,
    prefix: str,
    agent_id: str,
    *,
    vectors: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[ExportHeader, list[StateLine]]:
    """The export's header and state lines, read from `redis` (the CLI's export
    and `GET /v1/agents/{agent}/export` both write these)."""
    keys = Keyspace(prefix)
    lines = await read_state_lines(redis, prefix, agent_id, vectors=vectors, progress=progress)
    watermark = await redis.zscore(keys.watermark(agent_id), WATERMARK_MEMBER)
    space = await redis.get(keys.vector_space)
    dims = await _dims(redis, keys, agent_id, lines)
    counts: dict[str, int] = {}
    for line in lines:
        counts[line.type] = counts.get(line.type, 0) + 1
    header = ExportHeader(
        agent_id=agent_id,
        watermark=None if watermark is None else int(watermark),
        counts=counts,
        vectors=vectors,
        space=None if space is None else text_of(space),
        dims=dims,
    )
    return header, list(lines)


async def _dims(redis: Any, keys: Keyspace, agent_id: str, lines: Sequence[StateLine]) -> int:
    for line in lines:
        if line.type == "memory":
            raw = await redis.hget(keys.memory(agent_id, line.name), VECTOR_FIELDS[0].decode())
            if raw:
                return len(raw) // 4
    return DEFAULT_DIMS


# ---- import -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ImportPlan:
    agent_id: str
    successor_of: str | None
    import_id: str
    chunks: tuple[ImportChunk, ...]
    lines: int
    memories: int
    reembedded: bool


def read_file(raw_lines: Iterable[bytes]) -> tuple[ExportHeader, list[StateLine], ExportTrailer]:
    """The whole file, validated (`ExchangeError` names the first bad line)."""
    header: ExportHeader | None = None
    trailer: ExportTrailer | None = None
    lines: list[StateLine] = []
    for item in read_export(raw_lines):
        if isinstance(item, ExportHeader):
            header = item
        elif isinstance(item, ExportTrailer):
            trailer = item
        else:
            lines.append(item)
    assert header is not None and trailer is not None  # read_export raises otherwise
    return header, lines, trailer


def plan_import(
    header: ExportHeader,
    lines: Sequence[StateLine],
    trailer: ExportTrailer,
    *,
    agent_id: str | None,
    successor_of: str | None,
    options: InheritanceOptions,
    target_space: str | None,
    max_chunk_lines: int = 200,
) -> ImportPlan:
    """What an import sends: the target agent, the (inherited) lines in chunks."""
    if successor_of is not None:
        if successor_of != header.agent_id:
            raise ExchangeError(f"the file is {header.agent_id}'s export, not {successor_of}'s", 1)
        if not agent_id:
            raise ExchangeError("--as-successor-of needs --agent (the successor)")
        target = agent_id
        lines = list(Inheritance(successor_of, target, options).lines(lines))
    else:
        target = agent_id or header.agent_id
        if target != header.agent_id:
            raise ExchangeError(
                f"the file is {header.agent_id}'s export: an ordinary import restores it as "
                f"{header.agent_id}; another agent inherits it with --as-successor-of"
            )
    reembed = not header.vectors or (
        target_space is not None
        and header.space is not None
        and not compatible(target_space, header.space)
    )
    if reembed and header.vectors:
        logger.warning(
            "the file's vectors are from %s, this deployment's from %s: re-embedding",
            header.space,
            target_space,
        )
        lines = [_without_vectors(line) for line in lines]
    name = import_id(
        trailer.sha256, target, successor_of, options.discount if successor_of else 1.0
    )
    grouped = chunk_lines(lines, max_lines=max_chunk_lines)
    chunks = tuple(
        ImportChunk(name, index, len(grouped), target, successor_of, tuple(group))
        for index, group in enumerate(grouped)
    )
    memories = sum(1 for line in lines if line.type == "memory")
    return ImportPlan(target, successor_of, name, chunks, len(lines), memories, reembed)


def _without_vectors(line: StateLine) -> StateLine:
    if line.type != "memory" or not isinstance(line.value, tuple):
        return line
    pairs = tuple(p for p in line.value if p[0] not in VECTOR_FIELDS)  # type: ignore[index]
    return StateLine(line.type, line.name, line.kind, pairs)  # type: ignore[arg-type]


async def import_file(
    settings: Settings,
    path: Path,
    *,
    agent_id: str | None = None,
    successor_of: str | None = None,
    options: InheritanceOptions | None = None,
    api_key: str | None = None,
    wait: bool = True,
    timeout_s: float = 600.0,
    progress: bool = True,
    check_key: Callable[[Sequence[str]], Awaitable[None]] | None = None,
) -> ImportReport:
    """Validate `path`, publish it as `import` commands and (by default) wait until
    the agent's journal has applied every chunk. `check_key` is given the agents
    the import writes or reads (the target, and a successor's predecessor) before
    anything is sent, and raises to refuse."""
    options = options or InheritanceOptions()
    with path.open("rb") as handle:
        header, lines, trailer = read_file(handle)
    keys = Keyspace(settings.broker.topic_prefix)
    redis = create_redis(settings.redis.url, 2)
    try:
        space = await redis.get(keys.vector_space)
        plan = plan_import(
            header,
            lines,
            trailer,
            agent_id=agent_id,
            successor_of=successor_of,
            options=options,
            target_space=None if space is None else text_of(space),
        )
        if check_key is not None:
            await check_key([plan.agent_id, *([plan.successor_of] if plan.successor_of else [])])
        await _publish(settings, plan, api_key, progress)
        applied: bool | None = None
        if wait:
            applied = await _wait_applied(redis, keys, plan, timeout_s, progress)
    finally:
        await redis.aclose()
    return ImportReport(
        plan.agent_id,
        plan.import_id,
        len(plan.chunks),
        plan.lines,
        plan.memories,
        plan.successor_of,
        plan.reembedded,
        applied,
    )


def chunk_command(chunk: ImportChunk) -> CommandV1:
    return CommandV1(
        agent_id=chunk.agent_id,
        command="import",
        import_chunk=chunk_to_wire(chunk),
        event_id=chunk.chunk_id,
    )


async def _publish(
    settings: Settings, plan: ImportPlan, api_key: str | None, progress: bool
) -> None:
    bar = _bar(len(plan.chunks), "import: send", "chunk", progress)
    async with settings.client(api_key) as client:
        for chunk in plan.chunks:
            await client.send_command(chunk_command(chunk))
            bar.update(1)
    bar.close()


async def _wait_applied(
    redis: Any, keys: Keyspace, plan: ImportPlan, timeout_s: float, progress: bool
) -> bool:
    wanted = {chunk.chunk_id for chunk in plan.chunks}
    bar = _bar(len(wanted), "import: applied", "chunk", progress)
    done = 0
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            members = await redis.smembers(keys.applied_imports(plan.agent_id))
            now = len(wanted & {text_of(m) for m in members})
            bar.update(now - done)
            done = now
            if done == len(wanted):
                return True
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(WAIT_POLL_S)
    finally:
        bar.close()
