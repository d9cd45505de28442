"""grimoire.streams.recall.temporal: what a query asks of time, and how a memory's text
and event time answer it."""

from __future__ import annotations

from datetime import UTC, datetime

from grimoire.streams.model.time_words import TimeWindow
from grimoire.streams.recall.temporal import NO_TIME_INTENT, TimeIntent, time_match


def ms(year: int, month: int, day: int, hour: int = 0) -> int:
    return int(datetime(year, month, day, hour, tzinfo=UTC).timestamp() * 1000)


def day_window(year: int, month: int, day: int) -> TimeWindow:
    return TimeWindow(ms(year, month, day), ms(year, month, day + 1))


AS_OF = ms(2024, 3, 15, 10)
MAY_2023 = TimeWindow(ms(2023, 5, 1), ms(2023, 6, 1))


def test_intent_reads_when_and_window_from_the_query() -> None:
    assert TimeIntent.of("When did Maria paint in May 2023?", AS_OF) == TimeIntent(True, MAY_2023)
    assert TimeIntent.of("When did Maria paint?", AS_OF) == TimeIntent(True, None)
    assert TimeIntent.of("What did Maria paint in May 2023?", AS_OF) == TimeIntent(False, MAY_2023)
    assert TimeIntent.of("What did Maria paint yesterday?", AS_OF) == TimeIntent(
        False, day_window(2024, 3, 14)
    )


def test_intent_is_empty_without_when_or_window() -> None:
    assert TimeIntent.of("What did Maria paint?", AS_OF).empty
    assert NO_TIME_INTENT.empty
    assert TimeIntent() == NO_TIME_INTENT
    assert not TimeIntent(when=True).empty
    assert not TimeIntent(window=MAY_2023).empty


def test_a_when_question_matches_a_memory_that_says_when() -> None:
    when = TimeIntent(when=True)
    assert time_match(when, "I went to Paris last week", AS_OF) == (1.0, 0.0)
    assert time_match(when, "I went to Paris", AS_OF) == (0.0, 0.0)


def test_a_time_cue_counts_only_for_a_when_question() -> None:
    assert time_match(NO_TIME_INTENT, "I went to Paris last week", AS_OF) == (0.0, 0.0)
    in_may = TimeIntent(window=MAY_2023)
    assert time_match(in_may, "I went to Paris last week", AS_OF) == (0.0, 0.0)


def test_a_memory_whose_event_time_is_in_the_window_matches_it() -> None:
    intent = TimeIntent(window=MAY_2023)
    assert time_match(intent, "Maria painted a vase", ms(2023, 5, 1)) == (0.0, 1.0)
    assert time_match(intent, "Maria painted a vase", ms(2023, 5, 31, 23)) == (0.0, 1.0)
    assert time_match(intent, "Maria painted a vase", ms(2023, 6, 1)) == (0.0, 0.0)
    assert time_match(intent, "Maria painted a vase", ms(2023, 4, 30, 23)) == (0.0, 0.0)


def test_the_time_a_memory_names_is_resolved_against_its_own_event_time() -> None:
    said_on_the_4th = ms(2023, 5, 4, 9)
    on_the_3rd = TimeIntent(window=day_window(2023, 5, 3))
    on_the_10th = TimeIntent(window=day_window(2023, 5, 10))
    text = "we had dinner last night"
    assert time_match(on_the_3rd, text, said_on_the_4th) == (0.0, 1.0)
    assert time_match(on_the_10th, text, said_on_the_4th) == (0.0, 0.0)
    # without time words, only the stamp counts: the 4th is not the 3rd
    assert time_match(on_the_3rd, "we had dinner", said_on_the_4th) == (0.0, 0.0)


def test_a_when_question_naming_a_window_matches_on_both() -> None:
    intent = TimeIntent.of("When in May 2023 did we have dinner?", AS_OF)
    assert time_match(intent, "we had dinner yesterday", ms(2023, 5, 4)) == (1.0, 1.0)
    assert time_match(intent, "we had dinner", ms(2023, 5, 4)) == (0.0, 1.0)
    assert time_match(intent, "we had dinner yesterday", ms(2023, 7, 4)) == (1.0, 0.0)
