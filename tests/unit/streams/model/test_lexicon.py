"""grimoire.streams.model.lexicon: the stems and time words the lexical lane indexes,
the same for a memory and for a query."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest

from grimoire.streams.model.lexicon import LexicalForm, lexical_form, query_terms, time_words
from grimoire.streams.model.time_words import MONTHS, WEEKDAYS


def ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    """Milliseconds since the epoch of a UTC calendar time."""
    return int(datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp() * 1000)


def words(text: str) -> tuple[str, ...]:
    return lexical_form(text, None).words


def test_inflections_of_a_word_share_one_stem() -> None:
    assert words("painted paints painting paint") == ("paint",) * 4
    assert len(set(words("pottery potteries"))) == 1


def test_stopwords_and_one_character_words_are_dropped() -> None:
    assert words("The cat is on a mat with b and c") == ("cat", "mat")
    assert words("the a I of to") == ()
    assert words("") == ()


def test_case_does_not_matter() -> None:
    assert words("Painted CAT") == words("painted cat")


def test_a_possessive_s_is_dropped_and_apostrophes_removed() -> None:
    assert words("Maria's") == ("maria",)
    assert words("Maria's dog") == words("Maria dog")
    assert words("don't") == ("dont",)
    # "it's" is "it" once its 's goes: a stopword, dropped
    assert words("it's") == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("file.py", ("file_py",)),
        ("v1.2", ("v1_2",)),
        ("node.js", ("node_js",)),
        ("a.b.c", ("a_b_c",)),
    ],
)
def test_inner_dots_become_underscores(text: str, expected: tuple[str, ...]) -> None:
    assert words(text) == expected


def test_identifiers_and_numbers_are_kept_as_written_not_stemmed() -> None:
    assert words("42 2023 1984 3.14") == ("42", "2023", "1984", "3_14")
    # an identifier with digits or dots is not stemmed ("files" alone would be)
    assert words("files.py node7s") == ("files_py", "node7s")
    assert words("files") == ("file",)


def test_a_trailing_dot_is_punctuation_not_part_of_the_word() -> None:
    assert words("I painted.") == ("paint",)
    assert words("see file.py.") == ("see", "file_py")


def test_unicode_is_nfkc_normalized_and_casefolded() -> None:
    fullwidth = "\uff30\uff21\uff29\uff2e\uff34\uff25\uff24"  # "PAINTED" in full-width letters
    assert words(fullwidth) == words("painted") == ("paint",)
    assert words("Straße") == words("STRASSE")
    assert words("\ufb01les") == words("files")  # the "fi" ligature
    assert words("ÉCOLE") == words("école")


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        ((1970, 1, 1, 0, 0), ("january", "1970", "thursday", "night")),
        ((2023, 5, 3, 9, 30), ("may", "2023", "wednesday", "morning")),
        ((2024, 2, 29, 13, 0), ("february", "2024", "thursday", "afternoon")),
        ((2022, 12, 25, 19, 45), ("december", "2022", "sunday", "evening")),
    ],
)
def test_time_words_name_month_year_weekday_and_part_of_day_in_utc(
    moment: tuple[int, int, int, int, int], expected: tuple[str, ...]
) -> None:
    assert time_words(ms(*moment)) == expected


@pytest.mark.parametrize(
    ("hour", "minute", "part"),
    [
        (4, 59, "night"),
        (5, 0, "morning"),
        (11, 59, "morning"),
        (12, 0, "afternoon"),
        (16, 59, "afternoon"),
        (17, 0, "evening"),
        (21, 59, "evening"),
        (22, 0, "night"),
        (23, 59, "night"),
        (0, 0, "night"),
    ],
)
def test_part_of_day_boundaries(hour: int, minute: int, part: str) -> None:
    assert time_words(ms(2023, 5, 3, hour, minute))[3] == part


def test_time_words_are_utc_whatever_the_local_zone() -> None:
    # 23:30 UTC on Sunday 31 December: still December, 2023, Sunday, night
    assert time_words(ms(2023, 12, 31, 23, 30)) == ("december", "2023", "sunday", "night")
    assert time_words(ms(2024, 1, 1, 0, 30)) == ("january", "2024", "monday", "night")


def test_a_memory_is_indexed_under_its_stems_then_its_time_words() -> None:
    # a Wednesday afternoon in May 2023: words the stemmer leaves as they are
    ts = ms(2023, 5, 3, 14, 30)
    form = lexical_form("Maria painted the fence", ts)
    assert form.words == ("maria", "paint", "fenc", "may", "2023", "wednesday", "afternoon")
    assert form.words[3:] == time_words(ts)


def test_a_memory_without_an_event_time_has_no_time_words() -> None:
    form = lexical_form("Maria painted the fence", None)
    assert form.words == ("maria", "paint", "fenc")
    assert lexical_form("", None).words == ()
    assert lexical_form("", ms(2023, 5, 3, 14)).words == ("may", "2023", "wednesday", "afternoon")


def test_the_stored_text_parses_back_to_the_same_form() -> None:
    form = lexical_form("Maria's paintings of file.py, v1.2 in 2023", ms(2023, 5, 3, 9))
    assert form.text == " ".join(form.words)
    assert LexicalForm.parse(form.text) == form
    assert LexicalForm.parse("") == LexicalForm(())


def test_length_counts_every_word_and_terms_are_distinct_in_first_seen_order() -> None:
    form = lexical_form("paint painted fence painting fences cat", None)
    assert form.words == ("paint", "paint", "fenc", "paint", "fenc", "cat")
    assert form.length == 6
    assert form.terms() == ("paint", "fenc", "cat")


def test_a_query_word_meets_a_memory_word_with_the_same_stem() -> None:
    memory = lexical_form("She was painting pottery at the studio", ms(2023, 5, 3, 9))
    terms = query_terms("Who paints potteries in studios?")
    assert terms == ("paint", "potteri", "studio")
    assert set(terms) <= set(memory.words)


def test_query_terms_are_distinct_in_first_seen_order() -> None:
    assert query_terms("Painted paints, painting; the fence FENCES") == ("paint", "fenc")
    assert query_terms("the of a") == ()


def test_query_terms_respect_the_limit() -> None:
    query = "alpha bravo charlie delta echo foxtrot golf hotel"
    assert query_terms(query, limit=3) == ("alpha", "bravo", "charli")
    assert query_terms(query, limit=0) == ()
    many = " ".join(f"word{i}" for i in range(100))
    assert len(query_terms(many)) == 32
    assert query_terms(many)[:2] == ("word0", "word1")


@pytest.mark.parametrize(
    ("name", "ts"),
    [
        *((month, ms(2023, number, 10, 14)) for number, month in enumerate(MONTHS, start=1)),
        # 1 May 2023 is a Monday
        *((weekday, ms(2023, 5, 1 + offset, 14)) for offset, weekday in enumerate(WEEKDAYS)),
        ("morning", ms(2023, 5, 3, 9)),
        ("afternoon", ms(2023, 5, 3, 14)),
        ("evening", ms(2023, 5, 3, 19)),
        ("night", ms(2023, 5, 3, 23)),
    ],
)
def test_a_query_naming_a_time_word_meets_a_memory_at_that_time(name: str, ts: int) -> None:
    """The module's promise: "what did she do in May 2023" finds May's memories by
    their time. That holds for every month, weekday and part of day, not only for
    the ones the stemmer leaves alone ("january" stems to "januari", "morning" to "morn")."""
    assert name in time_words(ts)
    memory = lexical_form("went out", ts)
    terms = query_terms(f"What did she do on {name.capitalize()}?")
    assert set(terms) & set(memory.words), f"query {terms} never meets {memory.words}"


def test_the_same_text_always_gives_the_same_words() -> None:
    text = "Maria's paintings of file.py and v1.2, painted in \uff2d\uff21\uff39 2023"
    ts = ms(2023, 5, 3, 9)
    assert lexical_form(text, ts) == lexical_form(text, ts)
    assert query_terms(text) == query_terms(text)


def test_stemming_gives_the_same_words_from_many_threads() -> None:
    texts = [f"painted paintings run{i} running runs files.py {i} connected" for i in range(200)]
    expected = [lexical_form(text, ms(2023, 5, 3, 9)) for text in texts]
    expected_terms = [query_terms(text) for text in texts]
    with ThreadPoolExecutor(max_workers=8) as pool:
        forms = list(pool.map(lambda text: lexical_form(text, ms(2023, 5, 3, 9)), texts))
        terms = list(pool.map(query_terms, texts))
    assert forms == expected
    assert terms == expected_terms
