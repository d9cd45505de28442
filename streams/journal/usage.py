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
    # The run the recall served, and the learnable factor values that ranked each
    # used memory: kept until the run's outcome learns from them.
    run_id: str = ""
    factors: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.memory_ids and self.contrarian_window is None


def encode_usage(usage: RecallUsage) -> bytes:
    data: dict[str, object] = {
        "memory_ids": list(usage.memory_ids), "as_of": usage.as_of_ms,
        "contrarian_window": usage.contrarian_window,
    }  # fmt: skip
    if usage.run_id:
        data["run_id"] = usage.run_id
        data["factors"] = {memory_id: dict(values) for memory_id, values in usage.factors}
    return orjson.dumps(data)


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
        run_id = data.get("run_id") or ""
        factors = data.get("factors") or {}
        if not isinstance(run_id, str) or not isinstance(factors, dict):
            raise TypeError("run_id / factors")
        used = tuple(
            (str(memory_id), tuple((str(k), float(v)) for k, v in values.items()))
            for memory_id, values in factors.items()
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidEntry(f"not a usage entry: {exc!r}") from exc
    return RecallUsage(tuple(ids), as_of, window, run_id, used)
