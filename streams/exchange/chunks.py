"""Import chunks: an export's state lines cut into commands the journal carries.

`grimoire import` sends the lines as `import` commands (`{prefix}.commands`), a
chunk each, so an import is journaled like any input and a replay writes it again
at its place. A chunk names its import (a hash of the file, the target agent and
the inheritance), its index and the count, so a re-sent chunk is recognised and
changes nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from grimoire.streams.exchange.format import (
    ExchangeError,
    StateLine,
    line_from_json,
    line_to_json,
)

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_CHUNK_LINES",
    "ImportChunk",
    "chunk_from_wire",
    "chunk_lines",
    "chunk_to_wire",
    "import_id",
]

DEFAULT_CHUNK_LINES: Final = 200
# Well under a Kafka message's usual 1 MiB once sealed and base64'd in the journal.
DEFAULT_CHUNK_BYTES: Final = 256 * 1024


@dataclass(frozen=True, slots=True)
class ImportChunk:
    import_id: str
    index: int  # 0-based
    total: int
    agent_id: str  # the agent written
    successor_of: str | None  # the predecessor, for an inheritance
    lines: tuple[StateLine, ...]

    @property
    def chunk_id(self) -> str:
        return f"{self.import_id}:{self.index}"

    @property
    def memory_ids(self) -> list[str]:
        return sorted({line.name for line in self.lines if line.type == "memory"})


def import_id(file_sha256: str, agent_id: str, successor_of: str | None, discount: float) -> str:
    """Names one import of one file into one agent (the same file imported again the
    same way is the same import, and changes nothing)."""
    parts = orjson.dumps([file_sha256, agent_id, successor_of, discount])
    return "imp-" + hashlib.sha256(parts).hexdigest()[:32]


def chunk_lines(
    lines: Iterable[StateLine],
    *,
    max_lines: int = DEFAULT_CHUNK_LINES,
    max_bytes: int = DEFAULT_CHUNK_BYTES,
) -> list[list[StateLine]]:
    """Consecutive lines, at most `max_lines` and about `max_bytes` of JSON a chunk
    (a single larger line is a chunk of its own)."""
    chunks: list[list[StateLine]] = []
    current: list[StateLine] = []
    size = 0
    for line in lines:
        length = len(orjson.dumps(line_to_json(line)))
        if current and (len(current) >= max_lines or size + length > max_bytes):
            chunks.append(current)
            current, size = [], 0
        current.append(line)
        size += length
    if current:
        chunks.append(current)
    return chunks


def chunk_to_wire(chunk: ImportChunk) -> dict[str, Any]:
    return {
        "import_id": chunk.import_id,
        "index": chunk.index,
        "total": chunk.total,
        "agent_id": chunk.agent_id,
        "successor_of": chunk.successor_of,
        "lines": [line_to_json(line) for line in chunk.lines],
    }


def chunk_from_wire(data: Any) -> ImportChunk:
    """A chunk from its wire form; `ExchangeError` (naming the line within the
    chunk, 1-based) when malformed. A memory line must belong to the chunk's agent."""
    if not isinstance(data, Mapping):
        raise ExchangeError("an import chunk must be an object")
    import_name, index, total = data.get("import_id"), data.get("index"), data.get("total")
    agent_id, successor_of = data.get("agent_id"), data.get("successor_of")
    lines = data.get("lines")
    if not isinstance(index, int) or not isinstance(total, int):
        raise ExchangeError("'index' and 'total' must be integers")
    if not isinstance(import_name, str) or not import_name:
        raise ExchangeError("'import_id' must be a non-empty string")
    if not _count(index) or not _count(total) or not 0 <= int(index) < int(total):
        raise ExchangeError("'index' and 'total' must be integers, 0 <= index < total")
    if not isinstance(agent_id, str) or not agent_id:
        raise ExchangeError("'agent_id' must be a non-empty string")
    if successor_of is not None and (not isinstance(successor_of, str) or not successor_of):
        raise ExchangeError("'successor_of' must be a non-empty string or null")
    if not isinstance(lines, list):
        raise ExchangeError("'lines' must be a list")
    parsed = tuple(line_from_json(item, n) for n, item in enumerate(lines, start=1))
    for n, line in enumerate(parsed, start=1):
        if line.type == "memory":
            owner = _hash(line).get(b"agent_id")
            if owner != agent_id.encode():
                raise ExchangeError(f"memory {line.name} is not {agent_id}'s", n)
    return ImportChunk(import_name, int(index), int(total), agent_id, successor_of, parsed)


def _hash(line: StateLine) -> dict[bytes, bytes]:
    value: Any = line.value
    return dict(value) if line.kind == "hash" else {}


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
