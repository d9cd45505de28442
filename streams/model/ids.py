"""Deterministic, time-ordered memory ids.

A record id is a UUIDv7 whose 48-bit timestamp is the event time and whose
"random" bits are a hash of (agent, source event, part). Ids sort by event
time like any UUIDv7, yet a replay of the same event yields the same id.
"""

from __future__ import annotations

import hashlib
import uuid

_SEP = b"\x1f"


def stable_digest(*parts: str) -> bytes:
    """SHA-256 over parts joined by a separator no part can contain unescaped."""
    hasher = hashlib.sha256()
    for part in parts:
        escaped = part.encode("utf-8").replace(b"\\", b"\\\\").replace(_SEP, b"\\x1f")
        hasher.update(escaped)
        hasher.update(_SEP)
    return hasher.digest()


def memory_id(agent_id: str, source_event_id: str, part: int, ts_ms: int) -> str:
    digest = int.from_bytes(stable_digest(agent_id, source_event_id, str(part))[:10], "big")
    rand_a = digest >> 68  # 12 bits
    rand_b = digest & ((1 << 62) - 1)
    value = (ts_ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= rand_a << 64
    value |= 0b10 << 62
    value |= rand_b
    return str(uuid.UUID(int=value))


def content_event_id(canonical_payload: bytes) -> str:
    """Event id for publishers that sent none: a hash of the payload itself."""
    return "sha256:" + hashlib.sha256(canonical_payload).hexdigest()[:32]
