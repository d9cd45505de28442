"""grimoire.streams.model.ids: deterministic UUIDv7 memory ids and content event ids."""

from __future__ import annotations

import hashlib
import uuid

import pytest

from grimoire.streams.model.ids import content_event_id, memory_id, stable_digest

TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _hand_packed_id(agent_id: str, event_id: str, part: int, ts_ms: int) -> str:
    """The UUIDv7 layout assembled byte by byte, independently of the implementation.

    48-bit ts | ver 0111 | 12 bits = digest bits 79..68 | var 10 | 62 bits = digest bits 61..0,
    where digest = the first 80 bits of sha256(agent 0x1f event 0x1f part 0x1f).
    """
    d = hashlib.sha256(f"{agent_id}\x1f{event_id}\x1f{part}\x1f".encode()).digest()[:10]
    out = bytearray(ts_ms.to_bytes(6, "big"))
    out.append(0x70 | (d[0] >> 4))
    out.append(((d[0] & 0x0F) << 4) | (d[1] >> 4))
    out.append(0x80 | (d[2] & 0x3F))
    out.extend(d[3:10])
    assert len(out) == 16
    h = out.hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@pytest.mark.parametrize(
    ("agent_id", "event_id", "part", "ts_ms"),
    [
        ("agent-1", "ev-1", 0, TS),
        ("golem-7", "sha256:0123456789abcdef0123456789abcdef", 3, 946_684_800_000),
        ("a", "b", 12, 4_102_444_800_000),
    ],
)
def test_memory_id_is_a_uuid7_carrying_the_event_time(
    agent_id: str, event_id: str, part: int, ts_ms: int
) -> None:
    value = memory_id(agent_id, event_id, part, ts_ms)
    parsed = uuid.UUID(value)
    assert str(parsed) == value  # canonical lowercase, dashed form
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122
    assert (parsed.int >> 76) & 0xF == 7
    assert (parsed.int >> 62) & 0b11 == 0b10
    assert parsed.int >> 80 == ts_ms


def test_memory_id_matches_the_hand_packed_layout() -> None:
    assert memory_id("agent-1", "ev-1", 0, TS) == _hand_packed_id("agent-1", "ev-1", 0, TS)
    assert memory_id("golem-7", "e", 5, TS + 1) == _hand_packed_id("golem-7", "e", 5, TS + 1)


def test_memory_id_is_stable_across_calls() -> None:
    ids = {memory_id("agent-1", "ev-1", 0, TS) for _ in range(5)}
    assert len(ids) == 1


def test_memory_ids_sort_by_time() -> None:
    # Different agents/events give unrelated "random" bits; time must dominate the order.
    timestamps = [TS + 5_000, TS, TS + 1, 946_684_800_000, TS + 86_400_000, TS + 2]
    ids = [memory_id(f"agent-{i}", f"ev-{9 - i}", i, ts) for i, ts in enumerate(timestamps)]
    by_string = [ts for _, ts in sorted(zip(ids, timestamps, strict=True))]
    assert by_string == sorted(timestamps)
    assert sorted(ids, key=lambda v: uuid.UUID(v).int) == sorted(ids)


@pytest.mark.parametrize(
    "other",
    [
        ("agent-2", "ev-1", 0, TS),
        ("agent-1", "ev-2", 0, TS),
        ("agent-1", "ev-1", 1, TS),
        ("agent-1", "ev-1", 0, TS + 1),
    ],
    ids=["agent", "event", "part", "ts"],
)
def test_memory_id_depends_on_every_input(other: tuple[str, str, int, int]) -> None:
    assert memory_id("agent-1", "ev-1", 0, TS) != memory_id(*other)


def test_parts_are_separated_not_concatenated() -> None:
    assert memory_id("ab", "c", 0, TS) != memory_id("a", "bc", 0, TS)
    assert memory_id("a", "b1", 0, TS) != memory_id("a", "b", 10, TS)
    assert stable_digest("ab", "c") != stable_digest("a", "bc")


def test_stable_digest_is_sha256_of_separated_parts() -> None:
    expected = hashlib.sha256(b"x\x1fyz\x1f").digest()
    assert stable_digest("x", "yz") == expected
    assert len(stable_digest()) == 32


def test_stable_digest_escaping_is_injective() -> None:
    """The docstring promises parts are separated unambiguously.

    A part holding the separator is rewritten to the literal text `\\x1f`, but a
    backslash is not escaped itself, so "a<0x1f>b" and the 6-char "a\\x1fb" collide.
    """
    assert stable_digest("a\x1fb") != stable_digest("a\\x1fb")


def test_content_event_id() -> None:
    payload = b'{"agent_id":"a","text":"t","ts":1}'
    expected = "sha256:" + hashlib.sha256(payload).hexdigest()[:32]
    assert content_event_id(payload) == expected
    assert len(content_event_id(payload)) == len("sha256:") + 32
    assert content_event_id(payload) != content_event_id(payload + b" ")
