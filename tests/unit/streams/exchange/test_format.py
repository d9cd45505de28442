"""The export file's format: round trips, determinism, and a clear error with its
line number for every malformed line (never a crash)."""

from __future__ import annotations

import orjson
import pytest

from grimoire.streams.exchange.chunks import (
    ImportChunk,
    chunk_from_wire,
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
    decode_line,
    encode_line,
    read_export,
    sorted_lines,
    split_line,
)

VECTOR = bytes(range(256)) * 6  # not UTF-8: travels as base64


def _lines() -> list[StateLine]:
    memory = StateLine(
        "memory",
        "m1",
        "hash",
        ((b"agent_id", b"a"), (b"canonical", VECTOR), (b"text", "caf\u00e9 \u2615".encode())),
    )
    return sorted_lines(
        [
            StateLine("nexus", "tool:curl", "zset", ((b"m1", 1.5), (b"m2", 2.0))),
            memory,
            StateLine("config", "", "string", b'{"top_k":3}'),
            StateLine("decided", "", "set", (b"e1", b"e2")),
            StateLine("maintenance_log", "", "stream", (((b"tick", b"1"),), ((b"tick", b"2"),))),
            StateLine("field_state", "", "member", b'{"focus":[]}'),
            StateLine("watermark", "", "score", 1_790_000_000_000.0),
            StateLine("curator_entries", "", "list", (b"x", b"y")),
        ]
    )


def _file(lines: list[StateLine]) -> bytes:
    counts: dict[str, int] = {}
    for line in lines:
        counts[line.type] = counts.get(line.type, 0) + 1
    writer = ExportWriter()
    out = writer.header(ExportHeader("a", 1_790_000_000_000, counts, True, "m:float32", 384))
    for line in lines:
        out += writer.line(line)
    return out + writer.trailer()


def _read(raw: bytes) -> list[object]:
    return list(read_export(raw.splitlines(keepends=True)))


def test_every_kind_round_trips_byte_for_byte() -> None:
    for line in _lines():
        assert decode_line(encode_line(line)) == line
    items = _read(_file(_lines()))
    assert isinstance(items[0], ExportHeader) and items[0].agent_id == "a"
    assert items[1:-1] == _lines()
    assert isinstance(items[-1], ExportTrailer) and items[-1].lines == len(_lines())


def test_the_same_state_gives_the_same_bytes_and_memories_come_first() -> None:
    assert _file(_lines()) == _file(list(reversed(_lines())) and _lines())
    assert _lines()[0].type == "memory"
    writer = ExportWriter()
    writer.line(_lines()[1])
    with pytest.raises(ValueError, match="out of order"):
        writer.line(_lines()[0])


def test_a_vector_travels_as_base64_and_text_as_text() -> None:
    memory = orjson.loads(encode_line(_lines()[0]))
    assert memory["value"]["text"] == "caf\u00e9 \u2615"
    assert set(memory["value"]["canonical"]) == {"b64"}


@pytest.mark.parametrize(
    ("mutate", "line", "message"),
    [
        (lambda ls: [b"not json\n", *ls[1:]], 1, "not JSON"),
        (lambda ls: [ls[0].replace(b'"version":1', b'"version":9'), *ls[1:]], 1, "version 9"),
        (
            lambda ls: [
                *ls[:3],
                b'{"type":"memory","name":"x","kind":"blob","value":1}\n',
                *ls[4:],
            ],
            4,
            "'kind'",
        ),
        (lambda ls: [*ls[:2], ls[2].replace(b"tool:curl", b"tool:wget"), *ls[3:]], None, "sha256"),
        (lambda ls: ls[:-1], None, "cut short"),
        (lambda ls: [*ls, ls[1]], None, "after the trailer"),
        (lambda ls: [*ls[:2], b"\n", *ls[2:]], 3, "empty line"),
        (
            lambda ls: [
                *ls[:2],
                b'{"type":"nexus","name":"k","kind":"zset","value":[["m",null]]}\n',
                *ls[3:],
            ],
            3,
            "expected a number",
        ),
        (
            lambda ls: [
                *ls[:2],
                b'{"type":"memory","name":"k","kind":"hash","value":{"v":{"b64":"**"}}}\n',
                *ls[3:],
            ],
            3,
            "bad base64",
        ),
    ],
)
def test_a_malformed_file_names_its_line(mutate: object, line: int | None, message: str) -> None:
    raw_lines = _file(_lines()).splitlines(keepends=True)
    bad = b"".join(mutate(raw_lines))  # type: ignore[operator]
    with pytest.raises(ExchangeError, match=message) as caught:
        _read(bad)
    if line is not None:
        assert caught.value.line == line


def test_large_keys_split_and_chunks_stay_bounded() -> None:
    big = StateLine("nodes", "", "hash", tuple((f"m{i:04}".encode(), b"x") for i in range(1_201)))
    pieces = split_line(big, 500)
    assert [len(p.value) for p in pieces] == [500, 500, 201]  # type: ignore[arg-type]
    lines = [StateLine("decided", "", "set", (f"e{i}".encode(),)) for i in range(450)]
    assert [len(c) for c in chunk_lines(lines, max_lines=200)] == [200, 200, 50]
    heavy = [_lines()[0]] * 10
    size = len(encode_line(heavy[0])) - 1
    assert [len(c) for c in chunk_lines(heavy, max_bytes=3 * size)] == [3, 3, 3, 1]


def test_a_chunk_round_trips_and_refuses_another_agents_memory() -> None:
    name = import_id("f" * 64, "a", None, 1.0)
    assert name == import_id("f" * 64, "a", None, 1.0) != import_id("f" * 64, "b", "a", 0.5)
    chunk = ImportChunk(name, 0, 1, "a", None, tuple(_lines()))
    wire = orjson.loads(orjson.dumps(chunk_to_wire(chunk)))
    assert chunk_from_wire(wire) == chunk
    wire["agent_id"] = "b"
    with pytest.raises(ExchangeError, match="line 1: memory m1 is not b's"):
        chunk_from_wire(wire)
    with pytest.raises(ExchangeError, match="index"):
        chunk_from_wire({**chunk_to_wire(chunk), "index": 1})
