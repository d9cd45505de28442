"""An agent's inputs block by block, as the journal tests write a history: block `i`
starts `i` blocks of 12 s after `BASE_TS` with an episode, a transcript line follows
3 s in and a tool call 6 s in, each with an event id of its kind and number (`ep-i`,
`line-i`, `tool-i`). What each one says is the test's."""

from __future__ import annotations

from typing import Any, Final

from grimoire.topics.schemas import EpisodeV1, ToolEventV1, TranscriptV1

__all__ = ["BASE_TS", "BLOCK_MS", "episode_at", "line_at", "tool_call_at"]

BASE_TS: Final = 1_790_000_000_000
BLOCK_MS: Final = 12_000


def episode_at(agent: str, i: int, text: str, **fields: Any) -> EpisodeV1:
    """Block `i`'s episode (its tick `i`)."""
    return EpisodeV1(
        agent_id=agent, ts=BASE_TS + i * BLOCK_MS, tick=i, event_id=f"ep-{i}", text=text, **fields
    )


def line_at(agent: str, i: int, line: dict[str, Any], **fields: Any) -> TranscriptV1:
    """Block `i`'s transcript line, of session `s-1`."""
    return TranscriptV1(
        agent_id=agent,
        ts=BASE_TS + 3_000 + i * BLOCK_MS,
        session_id="s-1",
        event_id=f"line-{i}",
        line=line,
        **fields,
    )


def tool_call_at(
    agent: str, i: int, tool: str, *, error: str, result: str, **fields: Any
) -> ToolEventV1:
    """Block `i`'s call of `tool`: every other one fails, the odd ones with `error`, the
    even ones return `result`."""
    failed = i % 2 == 1
    return ToolEventV1(
        agent_id=agent,
        ts=BASE_TS + 6_000 + i * BLOCK_MS,
        tool=tool,
        event_id=f"tool-{i}",
        error=error if failed else None,
        result=None if failed else result,
        **fields,
    )
