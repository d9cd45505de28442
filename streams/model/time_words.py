"""Time in words: what a memory's text says about when, and what a query asks.

An agent asks its memory "when did …" more than almost anything else, and the
answer is usually a line that says it in relative words ("yesterday", "last
week", "three years ago") at a known event time. This module reads those cues,
deterministically and without a model, for both sides of recall:

* a memory *carries a time cue* when its text names a time (a relative
  expression, a weekday, a month with a day or year, a year, a date);
* a query *asks when* ("when did …", "what year …", "how long ago …"), and may
  *name a window* ("in May 2023", "last May", "two weeks ago", "in 2023"), which
  is resolved against the request's event time (`as_of`), never the clock.

Resolution is calendar arithmetic in UTC on the event time handed in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Final

__all__ = [
    "MONTHS",
    "WEEKDAYS",
    "TimeWindow",
    "asks_when",
    "has_time_cue",
    "named_window",
]

MONTHS: Final = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
WEEKDAYS: Final = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAY_MS: Final = 86_400_000

_NUMBER_WORDS: Final = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "couple": 2,
    "few": 3,
    "several": 3,
}
_UNIT_WORDS: Final = (
    "day|week|weekend|month|year|night|morning|evening|afternoon|summer|winter|spring|fall|autumn"
)
_UNITS: Final = r"(?:" + _UNIT_WORDS + r")s?"
# Every month but May (a verb too), in full and abbreviated.
_MONTH: Final = (
    r"(?:"
    + "|".join(m for m in MONTHS if m != "may")
    + r"|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)"
)
_COUNT: Final = r"(?:\d+|" + "|".join(_NUMBER_WORDS) + r")"

# "May" is also a verb: it counts as a month only beside a day or a year.
_CUE: Final = re.compile(
    r"\b(?:"
    r"yesterday|today|tonight|tomorrow|recently|lately|earlier|ago|"
    r"(?:last|next|this|past|coming|previous)\s+(?:few\s+|couple\s+(?:of\s+)?)?" + _UNITS + r"|"
    r"(?:last|next|this|on)\s+(?:" + "|".join(WEEKDAYS) + r")|"
    r"(?:" + "|".join(WEEKDAYS) + r")s?|"
    r"" + _MONTH + r"|"
    r"may\s+\d{1,2}(?:st|nd|rd|th)?|\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?may|(?:in|of|since|until|last|next|early|late|mid)\s+may|"
    r"(?:19|20)\d\d|"
    r"\d{1,2}(?:st|nd|rd|th)|"
    r"\d{1,2}[/.-]\d{1,2}(?:[/.-]\d{2,4})?|"
    r"since\s+" + _COUNT + r"|"
    r"for\s+" + _COUNT + r"\s+" + _UNITS + r"|"
    r"(?:a|one|the)\s+(?:day|week|month|year)\s+(?:before|after)"
    r")\b",
    re.IGNORECASE,
)

_WHEN: Final = re.compile(
    r"^\s*(?:when|since when|until when)\b|"
    r"\b(?:what|which)\s+(?:year|month|day|date|week|weekend|time of (?:the )?year|season)\b|"
    r"\bhow\s+long\s+(?:ago|has|have|had|did|was|were|since|before|after)\b|"
    r"\bhow\s+many\s+(?:days|weeks|months|years)\b|"
    r"\b(?:in|during)\s+which\s+(?:year|month|week)\b",
    re.IGNORECASE,
)


# Recall asks this of every pooled memory for every question about time, and the
# same memories come back question after question: the scan is paid once a text.
@lru_cache(maxsize=4096)
def has_time_cue(text: str) -> bool:
    """Whether `text` names a time: a relative expression, a weekday, a month
    (the month "May" only beside a day or a preposition), a year or a date."""
    return _CUE.search(text) is not None


def asks_when(query: str) -> bool:
    """Whether the query asks for a time ("when …", "what year …", "how long ago …")."""
    return _WHEN.search(query) is not None


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """Event times from `start_ms` (inclusive) to `end_ms` (exclusive)."""

    start_ms: int
    end_ms: int

    def __post_init__(self) -> None:
        if self.end_ms <= self.start_ms:
            raise ValueError("a window ends after it starts")

    def holds(self, ts_ms: int) -> bool:
        return self.start_ms <= ts_ms < self.end_ms

    def overlaps(self, other: TimeWindow) -> bool:
        return self.start_ms < other.end_ms and other.start_ms < self.end_ms


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _month_start(year: int, month: int) -> datetime:
    year += (month - 1) // 12
    month = (month - 1) % 12 + 1
    return datetime(year, month, 1, tzinfo=UTC)


def _month_window(year: int, month: int) -> TimeWindow:
    return TimeWindow(_ms(_month_start(year, month)), _ms(_month_start(year, month + 1)))


def _day_window(day: datetime, days: int = 1) -> TimeWindow:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return TimeWindow(_ms(start), _ms(start + timedelta(days=days)))


def _month_number(word: str) -> int | None:
    word = word.lower()
    for index, name in enumerate(MONTHS, start=1):
        if word == name or (len(word) >= 3 and name.startswith(word)):
            return index
    return None


def _count(word: str) -> int | None:
    word = word.lower()
    if word.isdigit():
        return int(word)
    return _NUMBER_WORDS.get(word)


_DATE: Final = re.compile(
    r"\b(?:on\s+)?(?P<m1>"
    + _MONTH
    + r"|may)\s+(?P<d1>\d{1,2})(?:st|nd|rd|th)?,?\s+(?P<y1>(?:19|20)\d\d)\b|"
    r"\b(?P<d2>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<m2>"
    + _MONTH
    + r"|may),?\s+(?P<y2>(?:19|20)\d\d)\b",
    re.IGNORECASE,
)
_MONTH_YEAR: Final = re.compile(
    r"\b(?P<m>" + _MONTH + r"|may),?\s+(?:of\s+)?(?P<y>(?:19|20)\d\d)\b", re.IGNORECASE
)
_YEAR: Final = re.compile(r"\b(?:in|during|of|since|year)\s+(?P<y>(?:19|20)\d\d)\b", re.IGNORECASE)
# "this may help" is a verb: May counts after "last" only.
_LAST_MONTH_NAME: Final = re.compile(
    r"\b(?:last\s+(?P<m>" + _MONTH + r"|may)|this\s+(?P<t>" + _MONTH + r"))\b", re.IGNORECASE
)
_AGO: Final = re.compile(
    r"\b(?P<n>" + _COUNT + r")\s+(?P<u>day|week|month|year)s?\s+ago\b", re.IGNORECASE
)
_RELATIVE: Final = re.compile(
    r"\b(?P<w>yesterday|last\s+night|today|tonight|this\s+(?:morning|afternoon|evening)|"
    r"last\s+(?:week|month|year)|this\s+(?:week|month|year))\b",
    re.IGNORECASE,
)


_MONTH_STEMS: Final = tuple(m[:3] for m in MONTHS)
_RELATIVE_WORDS: Final = ("yesterday", "today", "tonight", "last", "this")


def named_window(query: str, as_of_ms: int) -> TimeWindow | None:
    """The window of event time the query names, resolved against `as_of_ms`;
    None when it names none. The most specific form found wins (a date, then a
    month of a year, a year, a month last seen, a span ago, a relative word)."""
    now = datetime.fromtimestamp(as_of_ms / 1000, tz=UTC)
    # Substring checks first (C speed): each pattern runs only where it can match.
    low = query.lower()
    names_month = any(stem in low for stem in _MONTH_STEMS)
    digits = any(ch.isdigit() for ch in low)
    found = _DATE.search(query) if names_month and digits else None
    if found is not None:
        month = _month_number(found.group("m1") or found.group("m2"))
        day = int(found.group("d1") or found.group("d2"))
        year = int(found.group("y1") or found.group("y2"))
        if month is not None:
            try:
                return _day_window(datetime(year, month, day, tzinfo=UTC))
            except ValueError:
                return _month_window(year, month)
    found = _MONTH_YEAR.search(query) if names_month and digits else None
    if found is not None:
        month = _month_number(found.group("m"))
        if month is not None:
            return _month_window(int(found.group("y")), month)
    found = _YEAR.search(query) if digits else None
    if found is not None:
        year = int(found.group("y"))
        return TimeWindow(_ms(_month_start(year, 1)), _ms(_month_start(year + 1, 1)))
    found = _LAST_MONTH_NAME.search(query) if names_month else None
    if found is not None:
        if found.group("t"):
            # "this March" is the as_of year's.
            month = _month_number(found.group("t"))
            if month is not None:
                return _month_window(now.year, month)
        else:
            month = _month_number(found.group("m"))
            if month is not None:
                # "last May" is the latest May that has begun before this month.
                year = now.year if month < now.month else now.year - 1
                return _month_window(year, month)
    found = _AGO.search(query) if "ago" in low else None
    if found is not None:
        count, unit = _count(found.group("n")), found.group("u").lower()
        if count is not None:
            return _ago(now, count, unit)
    found = _RELATIVE.search(query) if any(w in low for w in _RELATIVE_WORDS) else None
    if found is not None:
        return _relative(now, " ".join(found.group("w").lower().split()))
    return None


def _ago(now: datetime, count: int, unit: str) -> TimeWindow:
    """`count` units before `now`, give or take half a unit either side."""
    span_days = {"day": 1, "week": 7, "month": 30, "year": 365}[unit]
    centre = now - timedelta(days=count * span_days)
    half = timedelta(days=max(span_days // 2, 1))
    return TimeWindow(_ms(centre - half), _ms(centre + half))


_SPANS: Final = frozenset({"this week", "this month", "this year"})


def _relative(now: datetime, words: str) -> TimeWindow:
    today = datetime(now.year, now.month, now.day, tzinfo=UTC)
    if words in ("yesterday", "last night"):
        return _day_window(today - timedelta(days=1))
    if words in ("today", "tonight") or (words.startswith("this ") and words not in _SPANS):
        return _day_window(today)
    if words == "last week":
        monday = today - timedelta(days=today.weekday() + 7)
        return _day_window(monday, 7)
    if words == "this week":
        return _day_window(today - timedelta(days=today.weekday()), 7)
    if words == "last month":
        return _month_window(now.year, now.month - 1)
    if words == "this month":
        return _month_window(now.year, now.month)
    if words == "last year":
        return TimeWindow(_ms(_month_start(now.year - 1, 1)), _ms(_month_start(now.year, 1)))
    return TimeWindow(_ms(_month_start(now.year, 1)), _ms(_month_start(now.year + 1, 1)))
