"""grimoire.streams.model.time_words: time cues in a memory's text, "when" questions,
and the window of event time a query names, resolved against a fixed as_of."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from grimoire.streams.model.time_words import TimeWindow, asks_when, has_time_cue, named_window


def ms(year: int, month: int, day: int, hour: int = 0) -> int:
    return int(datetime(year, month, day, hour, tzinfo=UTC).timestamp() * 1000)


def days(start: tuple[int, int, int], end: tuple[int, int, int]) -> TimeWindow:
    """The window from midnight UTC of `start` to midnight UTC of `end`."""
    return TimeWindow(ms(*start), ms(*end))


# Friday 15 March 2024, 10:00 UTC.
AS_OF = ms(2024, 3, 15, 10)


@pytest.mark.parametrize(
    "text",
    [
        "I went there yesterday",
        "We moved last week",
        "She started painting 3 years ago",
        "The party is on the 15th",
        "We met in May",
        "It was May 3",
        "That was back in 2023",
        "I run on Tuesday",
        "Fridays are for pottery",
        "We fly next month",
        "October was cold",
        "a week before the race",
        "since two weeks",
    ],
)
def test_text_that_names_a_time_carries_a_cue(text: str) -> None:
    assert has_time_cue(text)


@pytest.mark.parametrize(
    "text",
    [
        "I may go",
        "May I help?",
        "It may be",
        "I love pottery",
        "The disk is full on the node",
        "I ate 3 eggs",
        "",
    ],
)
def test_text_without_a_time_carries_no_cue(text: str) -> None:
    assert not has_time_cue(text)


@pytest.mark.parametrize(
    "query",
    [
        "When did Maria go to Paris?",
        "  when was the last deploy",
        "What year did she start painting?",
        "Which month was the trip?",
        "How long ago did he leave?",
        "How many weeks did the course take?",
        "In which year did they marry?",
        "Since when has the disk been full?",
    ],
)
def test_a_when_question_asks_when(query: str) -> None:
    assert asks_when(query)


@pytest.mark.parametrize(
    "query",
    [
        "What did Maria paint?",
        "Who went to Paris?",
        "What may help?",
        "Where is the file?",
        "Whenever you like",
        "",
    ],
)
def test_other_questions_do_not_ask_when(query: str) -> None:
    assert not asks_when(query)


@pytest.mark.parametrize(
    ("query", "window"),
    [
        ("What did she do on May 3, 2023?", days((2023, 5, 3), (2023, 5, 4))),
        ("on May 3rd, 2023", days((2023, 5, 3), (2023, 5, 4))),
        ("3 May 2023", days((2023, 5, 3), (2023, 5, 4))),
        ("the 3rd of May, 2023", days((2023, 5, 3), (2023, 5, 4))),
        ("on Dec 31 2022", days((2022, 12, 31), (2023, 1, 1))),
    ],
)
def test_a_date_names_its_day(query: str, window: TimeWindow) -> None:
    assert named_window(query, AS_OF) == window


def test_an_impossible_date_falls_back_to_its_month() -> None:
    assert named_window("February 30, 2023", AS_OF) == days((2023, 2, 1), (2023, 3, 1))
    assert named_window("May 45, 2023", AS_OF) == days((2023, 5, 1), (2023, 6, 1))


@pytest.mark.parametrize(
    ("query", "window"),
    [
        ("What did she paint in May 2023?", days((2023, 5, 1), (2023, 6, 1))),
        ("December, 2022", days((2022, 12, 1), (2023, 1, 1))),
        ("sep 2022", days((2022, 9, 1), (2022, 10, 1))),
    ],
)
def test_a_month_of_a_year_names_that_month(query: str, window: TimeWindow) -> None:
    assert named_window(query, AS_OF) == window


def test_a_year_names_the_whole_year() -> None:
    assert named_window("What happened in 2023?", AS_OF) == days((2023, 1, 1), (2024, 1, 1))
    assert named_window("during 1999", AS_OF) == days((1999, 1, 1), (2000, 1, 1))


def test_a_more_specific_form_wins() -> None:
    assert named_window("in 2021, on May 3, 2023", AS_OF) == days((2023, 5, 3), (2023, 5, 4))
    assert named_window("in 2021 or May 2023", AS_OF) == days((2023, 5, 1), (2023, 6, 1))


def test_last_month_name_is_the_latest_one_begun_before_the_as_of_month() -> None:
    # as_of in March 2024: February has begun this year, May last did in 2023
    assert named_window("last February", AS_OF) == days((2024, 2, 1), (2024, 3, 1))
    assert named_window("last May", AS_OF) == days((2023, 5, 1), (2023, 6, 1))
    # the as_of month itself: last year's
    assert named_window("last March", AS_OF) == days((2023, 3, 1), (2023, 4, 1))


def test_this_month_name_is_the_one_of_the_as_of_year() -> None:
    # said in March 2024, "this March" is the current month and "this June" the
    # coming one, not those of 2023
    assert named_window("What are we doing this March?", AS_OF) == days((2024, 3, 1), (2024, 4, 1))
    assert named_window("the trip this June", AS_OF) == days((2024, 6, 1), (2024, 7, 1))
    assert named_window("this February", AS_OF) == days((2024, 2, 1), (2024, 3, 1))


def test_may_as_a_verb_names_no_window() -> None:
    assert named_window("What may help?", AS_OF) is None
    assert named_window("Do you think this may help?", AS_OF) is None


def test_a_span_ago_is_centred_on_that_many_units_before_as_of() -> None:
    # two weeks before Friday 15 March 10:00 is Friday 1 March 10:00, give or take 3 days
    assert named_window("two weeks ago", AS_OF) == TimeWindow(
        ms(2024, 2, 27, 10), ms(2024, 3, 4, 10)
    )
    assert named_window("3 days ago", AS_OF) == TimeWindow(ms(2024, 3, 11, 10), ms(2024, 3, 13, 10))
    window = named_window("a year ago", AS_OF)
    assert window is not None
    assert window.holds(ms(2023, 3, 16))
    assert not window.holds(ms(2024, 3, 1))


@pytest.mark.parametrize(
    ("query", "window"),
    [
        ("yesterday", days((2024, 3, 14), (2024, 3, 15))),
        ("What did we eat last night?", days((2024, 3, 14), (2024, 3, 15))),
        ("today", days((2024, 3, 15), (2024, 3, 16))),
        ("this morning", days((2024, 3, 15), (2024, 3, 16))),
        # Monday to Monday before the as_of week (15 March 2024 is a Friday)
        ("last week", days((2024, 3, 4), (2024, 3, 11))),
        ("this week", days((2024, 3, 11), (2024, 3, 18))),
        ("last month", days((2024, 2, 1), (2024, 3, 1))),
        ("this month", days((2024, 3, 1), (2024, 4, 1))),
        ("last year", days((2023, 1, 1), (2024, 1, 1))),
        ("What did I do this year?", days((2024, 1, 1), (2025, 1, 1))),
    ],
)
def test_relative_words_resolve_against_as_of(query: str, window: TimeWindow) -> None:
    assert named_window(query, AS_OF) == window


def test_last_week_from_a_monday_and_a_sunday_is_the_week_before() -> None:
    assert named_window("last week", ms(2024, 3, 11, 8)) == days((2024, 3, 4), (2024, 3, 11))
    assert named_window("last week", ms(2024, 3, 17, 23)) == days((2024, 3, 4), (2024, 3, 11))


def test_last_month_in_january_is_december_of_the_year_before() -> None:
    january = ms(2024, 1, 10, 12)
    assert named_window("last month", january) == days((2023, 12, 1), (2024, 1, 1))
    assert named_window("yesterday", ms(2024, 1, 1, 1)) == days((2023, 12, 31), (2024, 1, 1))


@pytest.mark.parametrize("query", ["What did Maria paint?", "I may go", "", "How long ago?"])
def test_a_query_naming_no_time_has_no_window(query: str) -> None:
    assert named_window(query, AS_OF) is None


def test_a_window_ends_after_it_starts() -> None:
    with pytest.raises(ValueError):
        TimeWindow(10, 10)
    with pytest.raises(ValueError):
        TimeWindow(10, 5)
    assert TimeWindow(10, 11).end_ms == 11


def test_a_window_holds_its_start_but_not_its_end() -> None:
    window = TimeWindow(100, 200)
    assert window.holds(100)
    assert window.holds(199)
    assert not window.holds(200)
    assert not window.holds(99)


def test_windows_overlap_only_when_they_share_time() -> None:
    window = TimeWindow(100, 200)
    assert window.overlaps(TimeWindow(150, 250))
    assert window.overlaps(TimeWindow(50, 101))
    assert window.overlaps(TimeWindow(120, 130))
    assert window.overlaps(TimeWindow(0, 1_000))
    assert window.overlaps(window)
    # touching ends share no time (the end is exclusive)
    assert not window.overlaps(TimeWindow(200, 300))
    assert not window.overlaps(TimeWindow(0, 100))
    assert TimeWindow(150, 250).overlaps(window)
    assert not TimeWindow(200, 300).overlaps(window)


@pytest.mark.parametrize(
    "text",
    [
        "on May 3, 2023",
        "3 May 2023",
        "the 3rd of Sept, 2022",
        "in May 2023",
        "during 2021",
        "last May",
        "this March",
        "two weeks ago",
        "a year ago",
        "yesterday",
        "last night",
        "today",
        "tonight",
        "this morning",
        "last week",
        "this month",
        "last year",
    ],
)
def test_every_span_named_is_a_time_cue(text: str) -> None:
    # Recall resolves a memory's own span only when its text has a cue.
    assert named_window(text, AS_OF) is not None
    assert has_time_cue(text)
