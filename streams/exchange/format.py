"""The export file: JSON Lines, versioned, validated line by line.

An export is one agent's state as it is stored, one key (or one piece of a large
key) a line, so an import writes back exactly what was read and the state digest
of the importing deployment equals the source's (docs/export-format.md):

    {"format": "grimoire.export", "version": 1, "agent_id", "watermark", "counts",
     "vectors", "model": {"space", "dims"}}                        the header
    {"type": "memory", "name": "<memory id>", "kind": "hash", "value": {...}}
    ...                                                            state lines
    {"type": "trailer", "lines": N, "sha256": "<hex>"}             the trailer

`type` is the state family (`memory`, `usage`, `hyperedge`, `nexus`, `field_state`,
`playbook`, `config`, ...: the families of `tables/trust/agent_keys.py` that the
state digest covers), `name` what names the key within its family (the memory id,
the nexus key, the edge id; "" for a family with one key per agent), `kind` its
stored shape. Every stored value is bytes; a line carries it as a JSON string when
it is UTF-8 (nearly always) and as `{"b64": "..."}` otherwise (vectors). The
trailer's sha256 covers every byte before it, so a cut or edited file is refused.

Lines come in a fixed order (family order below, then name, then piece), and a
key's entries are sorted, so the same state exports to the same bytes. The header
holds no wall-clock time: `watermark` is the agent's latest event time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

import orjson

from grimoire.streams.exceptions import StreamsError

__all__ = [
    "FAMILY_ORDER",
    "FORMAT",
    "KINDS",
    "VERSION",
    "ExchangeError",
    "ExportHeader",
    "ExportTrailer",
    "ExportWriter",
    "StateLine",
    "StoredValue",
    "decode_line",
    "encode_line",
    "hash_line",
    "hash_of",
    "read_export",
    "split_line",
    "zset_of",
]

FORMAT: Final = "grimoire.export"
VERSION: Final = 1
TRAILER: Final = "trailer"

# Stored shapes. `member`: an agent's bytes in a deployment-wide hash (its field
# state); `score`: its score in a deployment-wide sorted set (watermark, window).
KINDS: Final = frozenset({"hash", "zset", "set", "list", "stream", "string", "member", "score"})

# Memories first: a successor import needs every inherited id before it remaps the
# keys that name memories. Families not named here follow, by name.
FAMILY_ORDER: Final = (
    "memory",
    "usage",
    "tombstone",
    "decayed",
    "hyperedge",
    "nexus",
    "nodes",
    "terms",
    "actors",
    "decay",
    "decay_seeded",
    "derivation",
    "decided",
    "stats",
    "outcomes",
    "pending_outcomes",
    "curator",
    "curator_entries",
    "curator_due",
    "curator_signatures",
    "curator_playbook",
    "playbook",
    "compaction_cursor",
    "compaction_pending",
    "compaction_plan",
    "compaction_outbox",
    "maintenance_ledger",
    "maintenance_log",
    "config",
    "field_state",
    "watermark",
    "contrarian_window",
)

Pairs: TypeAlias = tuple[tuple[bytes, bytes], ...]
# bytes (string, member), float (score), Pairs (hash), tuple[(bytes, float)] (zset),
# tuple[bytes] (set, list), tuple[Pairs] (stream)
StoredValue: TypeAlias = (
    bytes | float | Pairs | tuple[tuple[bytes, float], ...] | tuple[bytes, ...] | tuple[Pairs, ...]
)


class ExchangeError(StreamsError, ValueError):
    """An export file (or import chunk) this version cannot read; names the line."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message if line is None else f"line {line}: {message}")
        self.line = line
        self.detail = message


@dataclass(frozen=True, slots=True)
class ExportHeader:
    agent_id: str
    watermark: int | None  # the agent's latest event time (never the wall clock)
    counts: Mapping[str, int]  # family -> lines
    vectors: bool  # whether memory lines carry their vectors
    space: str | None  # the embedding space the vectors are in (model:precision)
    dims: int

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "agent_id": self.agent_id,
            "watermark": self.watermark,
            "counts": dict(sorted(self.counts.items())),
            "vectors": self.vectors,
            "model": {"space": self.space, "dims": self.dims},
        }


@dataclass(frozen=True, slots=True)
class ExportTrailer:
    lines: int  # state lines between header and trailer
    sha256: str  # of every byte before the trailer line


@dataclass(frozen=True, slots=True)
class StateLine:
    """One stored key (or a piece of one) of the agent's state."""

    type: str
    name: str
    kind: str
    value: StoredValue

    def sort_key(self) -> tuple[int, str, str]:
        try:
            rank = FAMILY_ORDER.index(self.type)
        except ValueError:
            rank = len(FAMILY_ORDER)
        return (rank, self.type, self.name)


def hash_of(line: StateLine) -> dict[bytes, bytes]:
    """A hash line's fields ({} for another kind)."""
    value: Any = line.value
    return dict(value) if line.kind == "hash" else {}


def zset_of(line: StateLine) -> list[tuple[bytes, float]]:
    """A sorted-set line's (member, score) pairs ([] for another kind)."""
    value: Any = line.value
    return list(value) if line.kind == "zset" else []


def hash_line(line: StateLine, fields: dict[bytes, bytes], name: str | None = None) -> StateLine:
    """`line` holding `fields` instead (sorted, as a reader gives them)."""
    pairs: Pairs = tuple(sorted(fields.items()))
    return StateLine(line.type, line.name if name is None else name, "hash", pairs)


# ---- values <-> JSON ------------------------------------------------------------


def _enc(raw: bytes) -> Any:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(raw).decode("ascii")}


def _dec(value: Any, where: str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ExchangeError(f"{where}: bad base64 ({exc})") from None
    raise ExchangeError(f"{where}: expected a string or {{'b64': ...}}")


def _field_name(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ExchangeError(f"a hash field that is not UTF-8: {raw[:40]!r}") from None


def _score(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ExchangeError(f"{where}: expected a number")
    score = float(value)
    if math.isnan(score):
        raise ExchangeError(f"{where}: NaN")
    return score


def _value_to_json(kind: str, value: StoredValue) -> Any:
    # The shapes are checked where a value is built (`_value_from_json`, the
    # readers); `Any` here keeps the per-kind unpacking readable.
    raw: Any = value
    if kind in ("string", "member"):
        return _enc(raw)
    if kind == "score":
        return float(raw)
    if kind == "hash":
        return {_field_name(f): _enc(v) for f, v in raw}
    if kind == "zset":
        return [[_enc(m), s] for m, s in raw]
    if kind in ("set", "list"):
        return [_enc(m) for m in raw]
    if kind == "stream":
        return [{_field_name(f): _enc(v) for f, v in entry} for entry in raw]
    raise ExchangeError(f"no encoding for kind {kind!r}")


def _pairs(value: Any, where: str) -> Pairs:
    if not isinstance(value, dict):
        raise ExchangeError(f"{where}: a hash must be an object")
    return tuple(sorted((k.encode("utf-8"), _dec(v, f"{where}.{k}")) for k, v in value.items()))


def _value_from_json(kind: str, value: Any, where: str) -> StoredValue:
    if kind in ("string", "member"):
        return _dec(value, where)
    if kind == "score":
        return _score(value, where)
    if kind == "hash":
        return _pairs(value, where)
    if not isinstance(value, list):
        raise ExchangeError(f"{where}: a {kind} must be a list")
    if kind == "zset":
        out: list[tuple[bytes, float]] = []
        for i, item in enumerate(value):
            if not isinstance(item, list) or len(item) != 2:
                raise ExchangeError(f"{where}[{i}]: expected [member, score]")
            out.append((_dec(item[0], f"{where}[{i}]"), _score(item[1], f"{where}[{i}]")))
        return tuple(out)
    if kind in ("set", "list"):
        return tuple(_dec(item, f"{where}[{i}]") for i, item in enumerate(value))
    if kind == "stream":
        return tuple(_pairs(entry, f"{where}[{i}]") for i, entry in enumerate(value))
    raise ExchangeError(f"{where}: unknown kind {kind!r}")


def line_to_json(line: StateLine) -> dict[str, Any]:
    return {
        "type": line.type,
        "name": line.name,
        "kind": line.kind,
        "value": _value_to_json(line.kind, line.value),
    }


def line_from_json(data: Any, line: int | None = None) -> StateLine:
    """A state line from its JSON object; `ExchangeError` naming `line` if malformed."""
    try:
        if not isinstance(data, dict):
            raise ExchangeError("a state line must be a JSON object")
        family, name, kind = data.get("type"), data.get("name", ""), data.get("kind")
        if not isinstance(family, str) or not family or family == TRAILER:
            raise ExchangeError("'type' must name a state family")
        if not isinstance(name, str):
            raise ExchangeError("'name' must be a string")
        if kind not in KINDS:
            raise ExchangeError(f"'kind' must be one of {sorted(KINDS)}")
        if "value" not in data:
            raise ExchangeError("'value' is missing")
        return StateLine(family, name, kind, _value_from_json(kind, data["value"], "value"))
    except ExchangeError as exc:
        raise ExchangeError(exc.detail, line) from None


def encode_line(line: StateLine) -> bytes:
    return orjson.dumps(line_to_json(line)) + b"\n"


def decode_line(raw: bytes, line: int | None = None) -> StateLine:
    return line_from_json(_loads(raw, line), line)


def _loads(raw: bytes, line: int | None) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ExchangeError(f"not JSON ({exc})", line) from None


# ---- splitting large keys -------------------------------------------------------


def split_line(line: StateLine, max_entries: int) -> list[StateLine]:
    """A hash, sorted set or set of more than `max_entries` entries as several lines
    of the same key (an import merges them); other kinds stay whole (a list or
    stream keeps its order, a string is one value)."""
    if max_entries < 1:
        raise ValueError("max_entries must be >= 1")
    value = line.value
    if line.kind not in ("hash", "zset", "set") or not isinstance(value, tuple):
        return [line]
    if len(value) <= max_entries:
        return [line]
    return [
        StateLine(line.type, line.name, line.kind, _piece(value, start, max_entries))
        for start in range(0, len(value), max_entries)
    ]


def _piece(value: tuple[Any, ...], start: int, size: int) -> Any:
    return value[start : start + size]


# ---- writing and reading a whole file ----------------------------------------------


@dataclass
class ExportWriter:
    """Builds the file's bytes line by line, keeping the running sha256 the trailer
    carries. Lines must come in `StateLine.sort_key` order (the exporter sorts)."""

    _hasher: Any = field(default_factory=hashlib.sha256)
    _lines: int = 0
    _last: tuple[int, str, str] | None = None

    def header(self, header: ExportHeader) -> bytes:
        return self._take(orjson.dumps(header.to_json()) + b"\n")

    def line(self, line: StateLine) -> bytes:
        key = line.sort_key()
        if self._last is not None and key < self._last:
            raise ValueError(f"state lines out of order: {key} after {self._last}")
        self._last = key
        self._lines += 1
        return self._take(encode_line(line))

    def trailer(self) -> bytes:
        trailer = {"type": TRAILER, "lines": self._lines, "sha256": self._hasher.hexdigest()}
        return orjson.dumps(trailer) + b"\n"

    @property
    def sha256(self) -> str:
        return str(self._hasher.hexdigest())

    def _take(self, raw: bytes) -> bytes:
        self._hasher.update(raw)
        return raw


def _header(data: Any, line: int) -> ExportHeader:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ExchangeError(f"not a {FORMAT} file (no header)", line)
    if data.get("version") != VERSION:
        raise ExchangeError(
            f"version {data.get('version')!r}; this Grimoire reads version {VERSION}", line
        )
    agent_id, model, counts = data.get("agent_id"), data.get("model"), data.get("counts")
    if not isinstance(agent_id, str) or not agent_id:
        raise ExchangeError("'agent_id' must be a non-empty string", line)
    watermark = data.get("watermark")
    if watermark is not None and (isinstance(watermark, bool) or not isinstance(watermark, int)):
        raise ExchangeError("'watermark' must be an integer or null", line)
    if not isinstance(data.get("vectors"), bool):
        raise ExchangeError("'vectors' must be true or false", line)
    if not isinstance(model, dict) or not isinstance(model.get("dims"), int):
        raise ExchangeError("'model' must be {space, dims}", line)
    space = model.get("space")
    if space is not None and not isinstance(space, str):
        raise ExchangeError("'model.space' must be a string or null", line)
    if not isinstance(counts, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
        for k, v in counts.items()
    ):
        raise ExchangeError("'counts' must map families to integers", line)
    return ExportHeader(agent_id, watermark, counts, data["vectors"], space, model["dims"])


def read_export(lines: Iterable[bytes]) -> Iterator[ExportHeader | StateLine | ExportTrailer]:
    """The header, each state line, then the trailer, validated as they are read:
    a malformed line, a missing or wrong trailer, or lines after it raise
    `ExchangeError` naming the line (1-based). Consumers act on a state line only
    once the trailer has checked out, or accept that a bad file stops midway."""
    hasher = hashlib.sha256()
    header: ExportHeader | None = None
    trailer: ExportTrailer | None = None
    count = 0
    number = 0
    seen: dict[str, int] = {}
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            raise ExchangeError("empty line", number)
        if trailer is not None:
            raise ExchangeError("a line after the trailer", number)
        data = _loads(raw, number)
        if header is None:
            header = _header(data, number)
            hasher.update(_with_newline(raw))
            yield header
            continue
        if isinstance(data, dict) and data.get("type") == TRAILER:
            trailer = _trailer(data, number, count, hasher.hexdigest())
            if dict(seen) != {k: v for k, v in header.counts.items() if v}:
                raise ExchangeError(
                    f"the header counts {dict(header.counts)}, the file holds {seen}", number
                )
            yield trailer
            continue
        state = line_from_json(data, number)
        hasher.update(_with_newline(raw))
        count += 1
        seen[state.type] = seen.get(state.type, 0) + 1
        yield state
    if header is None:
        raise ExchangeError("empty file (no header)", 1)
    if trailer is None:
        raise ExchangeError("no trailer: the file is cut short", number + 1)


def _trailer(data: Mapping[str, Any], line: int, count: int, digest: str) -> ExportTrailer:
    lines, sha = data.get("lines"), data.get("sha256")
    if not isinstance(lines, int) or not isinstance(sha, str):
        raise ExchangeError("the trailer must be {type, lines, sha256}", line)
    if lines != count:
        raise ExchangeError(f"the trailer counts {lines} lines, the file holds {count}", line)
    if sha != digest:
        raise ExchangeError("sha256 mismatch: the file was changed or cut", line)
    return ExportTrailer(lines, sha)


def _with_newline(raw: bytes) -> bytes:
    return raw if raw.endswith(b"\n") else raw + b"\n"


def sorted_lines(lines: Sequence[StateLine]) -> list[StateLine]:
    """State lines in file order (stable: pieces of one key keep their order)."""
    return sorted(lines, key=StateLine.sort_key)
