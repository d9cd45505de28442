"""What a served recall changed, as a journal entry's payload.

Recall is a read: the memories it used (their usage counters and last access) and
the anti-rumination window it served are not written by the recall, but appended
to the agent's journal and applied in order by the fold, so a replay counts them
too. Only an answer that reached its caller is counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from grimoire.streams.journal.entry import InvalidEntry

__all__ = ["RecallUsage", "decode_usage", "encode_usage"]


@dataclass(frozen=True, slots=True)
class RecallUsage:
    memory_ids: tuple[str, ...]
    as_of_ms: int  # the request's event time: usage moves last access to it
    contrarian_window: int | None = None  # the anti-rumination window served, if any

    @property
    def empty(self) -> bool:
        return not self.memory_ids and self.contrarian_window is None


def encode_usage(usage: RecallUsage) -> bytes:
    return orjson.dumps(
        {"memory_ids": list(usage.memory_ids), "as_of": usage.as_of_ms,
         "contrarian_window": usage.contrarian_window}
    )  # fmt: skip


def decode_usage(raw: bytes) -> RecallUsage:
    try:
        data = orjson.loads(raw)
        ids = data["memory_ids"]
        as_of = data["as_of"]
        window = data.get("contrarian_window")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise TypeError("memory_ids")
        if not isinstance(as_of, int) or (window is not None and not isinstance(window, int)):
            raise TypeError("as_of / contrarian_window")
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidEntry(f"not a usage entry: {exc!r}") from exc
    return RecallUsage(tuple(ids), as_of, window)
