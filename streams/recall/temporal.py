"""What a query asks of time, and how well a memory answers it.

A "when" question is best answered by a line that says when (its text carries a
time cue: "yesterday", "last week", "in 2022"); a query that names a window
("in May 2023", "two weeks ago") is best answered by memories whose event time
falls in it. Both are read from the query once per request (`TimeIntent.of`,
resolved against the request's event time) and matched against each pooled
memory's own text and event time (`time_match`), so they hold for any agent's
memory, not one conversation's wording.
"""

from __future__ import annotations

from dataclasses import dataclass

from grimoire.streams.model.time_words import TimeWindow, asks_when, has_time_cue, named_window

__all__ = ["NO_TIME_INTENT", "TimeIntent", "time_match"]


@dataclass(frozen=True, slots=True)
class TimeIntent:
    """The query asks when (`when`), and/or names a window of event time."""

    when: bool = False
    window: TimeWindow | None = None

    @classmethod
    def of(cls, query: str, as_of_ms: int) -> TimeIntent:
        return cls(asks_when(query), named_window(query, as_of_ms))

    @property
    def empty(self) -> bool:
        return not self.when and self.window is None


NO_TIME_INTENT = TimeIntent()


def time_match(intent: TimeIntent, text: str, ts_ms: int) -> tuple[float, float]:
    """(cue, window): 1.0 where the memory says when for a "when" question, and
    where its event time, or the time its words name, falls in the named
    window; 0.0 otherwise."""
    if intent.empty:
        return 0.0, 0.0
    # One scan says whether the text names a time at all; every span
    # `named_window` resolves is also a cue, so a text without one names none.
    says_when = has_time_cue(text)
    cue = 1.0 if intent.when and says_when else 0.0
    inside = 0.0
    if intent.window is not None:
        if intent.window.holds(ts_ms):
            inside = 1.0
        elif says_when:
            # "Last night" said on the 4th happened on the 3rd: a memory's own
            # time words, resolved against its event time, place it too.
            said = named_window(text, ts_ms)
            if said is not None and intent.window.overlaps(said):
                inside = 1.0
    return cue, inside
