"""An agent's watermark and contrarian window as stored: each a ZSET of one member
scored with the value (`Keyspace.watermark`, `Keyspace.contrarian_window`).

A sorted set of one, so `ZADD GT` keeps the maximum in one command, inside the
agent's transaction, with no script: an old batch redelivered never moves either
back.
"""

from __future__ import annotations

from typing import Final

__all__ = ["WATERMARK_MEMBER", "WINDOW_MEMBER"]

WATERMARK_MEMBER: Final = "watermark"
WINDOW_MEMBER: Final = "window"
