"""Session transcript lines (JSONL messages with content blocks) → layered parts.

Accepts the shape agent runtimes write: either `{"role", "content"}` or a
wrapper `{"type": "user"|"assistant", "message": {"role", "content"}}`, where
content is a string or a list of `text` / `thinking` / `tool_use` /
`tool_result` blocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from grimoire.streams.exceptions import InvalidEvent
from grimoire.streams.inbound.validators import (
    INVALID_VALUE,
    MISSING_FIELD,
    OVERSIZE,
    WRONG_TYPE,
    Fields,
    InputLimits,
)
from grimoire.streams.model.records import Layer

EMPTY_CONTENT = "empty_content"
_TEXT_LAYER = {"user": Layer.INPUT, "assistant": Layer.OUTPUT}


@dataclass(frozen=True, slots=True)
class TranscriptPart:
    layer: Layer
    text: str
    tool: str = ""
    is_error: bool = False


def _message(line: Any) -> Mapping[str, Any]:
    if not isinstance(line, dict):
        raise InvalidEvent(WRONG_TYPE, "'line' must be a JSON object", "line")
    inner = line.get("message")
    if isinstance(inner, dict):
        return inner
    return line


def _block_text(value: Any, limits: InputLimits, name: str) -> str:
    """Text of a block field that may itself be a string or a list of text blocks."""
    if isinstance(value, list):
        value = "\n".join(str(item.get("text", "")) for item in value if isinstance(item, dict))
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidEvent(WRONG_TYPE, f"{name} must be text", name)
    return Fields({name: value}, limits).text(name)


def _block_part(block: Any, role: str, limits: InputLimits) -> TranscriptPart | None:
    if not isinstance(block, dict):
        raise InvalidEvent(WRONG_TYPE, "content blocks must be objects", "line.content")
    block_type = block.get("type")
    if block_type == "text":
        text = _block_text(block.get("text"), limits, "line.content.text")
        return TranscriptPart(_TEXT_LAYER[role], text) if text.strip() else None
    if block_type == "thinking":
        text = _block_text(block.get("thinking"), limits, "line.content.thinking")
        return TranscriptPart(Layer.CONTEMPLATION, text) if text.strip() else None
    if block_type == "tool_use":
        name = _block_text(block.get("name"), limits, "line.content.name") or "unknown"
        args = orjson.dumps(block.get("input") or {}, option=orjson.OPT_SORT_KEYS).decode()
        text = _block_text(f"tool_use {name} {args}", limits, "line.content.input")
        return TranscriptPart(Layer.ACTION, text, tool=name)
    if block_type == "tool_result":
        body = _block_text(block.get("content"), limits, "line.content.content")
        failed = block.get("is_error") is True
        status = "error" if failed else "result"
        text = f"tool_{status} {body}".strip()
        return TranscriptPart(Layer.OBSERVATION, text, is_error=failed)
    raise InvalidEvent(INVALID_VALUE, f"unknown content block type {block_type!r}", "line.content")


def transcript_parts(line: Any, limits: InputLimits) -> list[TranscriptPart]:
    message = _message(line)
    role = message.get("role")
    if role is None:
        raise InvalidEvent(MISSING_FIELD, "message role is required", "line.role")
    if not isinstance(role, str):
        raise InvalidEvent(WRONG_TYPE, "message role must be a string", "line.role")
    if role not in _TEXT_LAYER:
        raise InvalidEvent(INVALID_VALUE, f"unsupported role {role!r}", "line.role")
    content = message.get("content")
    if isinstance(content, str):
        text = _block_text(content, limits, "line.content")
        parts = [TranscriptPart(_TEXT_LAYER[role], text)] if text.strip() else []
    elif isinstance(content, list):
        parts = []
        for block in content:
            part = _block_part(block, role, limits)
            if part is None:
                continue
            parts.append(part)
            # Each part becomes a memory: a line over the cap is refused whole
            # (dead-lettered), never cut to its first parts.
            if len(parts) > limits.max_parts_per_event:
                raise InvalidEvent(
                    OVERSIZE,
                    f"the line has over {limits.max_parts_per_event} content parts",
                    "line.content",
                )
    else:
        raise InvalidEvent(WRONG_TYPE, "message content must be a string or a list", "line.content")
    if not parts:
        raise InvalidEvent(
            EMPTY_CONTENT, "transcript line has no memorable content", "line.content"
        )
    return parts
