"""What a served recall changed, as a journal entry's payload.

Recall is a read: the memories it used (their usage counters and last access) and
the anti-rumination window it served are not written by the recall, but appended
to the agent's journal and applied in order by the fold, so a replay counts them
too. Only an answer that reached its caller is counted.

Applying an entry is a pure fold here (`fold_usage`: what the store holds for the
entry in, what to write out), so the rule "once per entry, once per recall request"
is tested without services; the store only loads the `UsageView` and commits the
`UsageChanges`.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from grimoire.streams.journal.entry import InvalidEntry

__all__ = [
    "USAGE_SEQ_WINDOW",
    "RecallUsage",
    "UsageChanges",
    "UsageView",
    "answered_twice",
    "decode_usage",
    "encode_usage",
    "fold_usage",
]

# How many of an agent's most recent usage entries are remembered as applied: only
# recent entries can be read again (after a crash), so older marks need no room.
USAGE_SEQ_WINDOW = 10_000


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


@dataclass(frozen=True, slots=True)
class UsageView:
    """What the store holds that decides whether one usage entry still applies, read
    before it is applied (one writer per agent: nothing changes it in between)."""

    seq_applied: bool  # the entry itself was applied (it is read again after a crash)
    # The seq of the entry that answered its recall request, if one was applied: a
    # recall served again after its worker died journals a second entry.
    request_seq: int | None = None


@dataclass(frozen=True, slots=True)
class UsageChanges:
    """What applying one usage entry writes, committed in one transaction so an entry
    read again after a crash finds either all of it or none."""

    agent_id: str
    seq: int
    request: str | None  # the recall request (topic:partition:offset) it answered
    memory_ids: tuple[str, ...]
    as_of_ms: int  # the uses move last access to the request's event time
    contrarian_window: int | None
    # Applied marks (entries and requests) scored below this seq are forgotten.
    forget_below: int


def fold_usage(
    view: UsageView,
    agent_id: str,
    usage: RecallUsage,
    seq: int,
    request: str | None,
    *,
    remembered: int = USAGE_SEQ_WINDOW,
) -> UsageChanges | None:
    """The writes of the usage entry `seq`, or None when it was applied already or
    its recall `request` was answered by another entry (the first answer counts).
    An entry that used nothing is still marked, so it is not weighed again."""
    if view.seq_applied or (request is not None and view.request_seq is not None):
        return None
    return UsageChanges(
        agent_id=agent_id,
        seq=seq,
        request=request,
        memory_ids=usage.memory_ids,
        as_of_ms=usage.as_of_ms,
        contrarian_window=usage.contrarian_window,
        forget_below=seq - remembered + 1,
    )


def answered_twice(view: UsageView, seq: int) -> bool:
    """Whether the recall request was answered by another entry than `seq`: its
    worker was killed before committing it, and the first answer's uses counted."""
    return view.request_seq is not None and view.request_seq != seq
