"""Input messages as the handlers see them, independent of Faust."""

from __future__ import annotations

from dataclasses import dataclass

UNKNOWN_AGENT = "_unknown"
_PAYLOAD_PREVIEW_CHARS = 4_096


@dataclass(frozen=True, slots=True)
class InputMessage:
    value: bytes
    topic: str
    partition: int | None = None
    offset: int | None = None


def payload_preview(raw: bytes) -> str:
    return raw[: _PAYLOAD_PREVIEW_CHARS * 4].decode("utf-8", "replace")[:_PAYLOAD_PREVIEW_CHARS]
