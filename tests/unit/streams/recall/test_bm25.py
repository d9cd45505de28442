"""The lexical lane's BM25, from an agent's own counts (streams/recall/bm25.py)."""

from __future__ import annotations

import math

import pytest

from grimoire.streams.recall.bm25 import Bm25Parameters, CorpusStats, term_score


def test_idf_is_the_textbook_probabilistic_weight() -> None:
    corpus = CorpusStats(memories=100, total_length=1_000, holding={"rare": 1, "common": 60})
    assert corpus.idf("rare") == pytest.approx(math.log(1 + 99.5 / 1.5))
    assert corpus.idf("common") == pytest.approx(math.log(1 + 40.5 / 60.5))
    assert corpus.idf("rare") > corpus.idf("common") > 0.0


def test_counts_that_are_estimates_never_weigh_negative_or_divide_by_zero() -> None:
    # Counted at write time and never purged: a term may be found though
    # uncounted, or counted by more memories than remain.
    corpus = CorpusStats(memories=3, total_length=30, holding={"over": 9, "once": 1})
    assert corpus.idf("uncounted") == corpus.idf("once") == pytest.approx(math.log(1 + 2.5 / 1.5))
    assert corpus.idf("over") == pytest.approx(math.log(1 + 0.5 / 3.5))
    assert corpus.idf("over") > 0.0
    assert CorpusStats(0, 0, {}).idf("any") == pytest.approx(math.log(1 + 0.5 / 1.5))


def test_term_score_saturates_with_frequency_and_shrinks_with_length() -> None:
    params = Bm25Parameters(k1=1.2, b=0.5)
    once = term_score(1.0, 10, 2.0, 10.0, params)
    assert once == pytest.approx(2.0)  # an average-length memory, tf 1: the idf itself
    twice = term_score(2.0, 10, 2.0, 10.0, params)
    assert once < twice < 2 * once
    assert term_score(1.0, 40, 2.0, 10.0, params) < once < term_score(1.0, 2, 2.0, 10.0, params)
    assert term_score(1.0, 40, 2.0, 10.0, params) == pytest.approx(
        2.0 * 2.2 / (1.0 + 1.2 * (0.5 + 0.5 * 4.0))
    )
    assert term_score(0.0, 10, 2.0, 10.0, params) == 0.0


def test_without_counted_lengths_every_memory_is_of_average_length() -> None:
    corpus = CorpusStats(memories=5, total_length=0, holding={})
    assert corpus.average_length() is None
    assert term_score(1.0, 3, 1.5, None) == term_score(1.0, 300, 1.5, None) == pytest.approx(1.5)
    assert CorpusStats(4, 10, {}).average_length() == 2.5


def test_parameters_are_checked() -> None:
    with pytest.raises(ValueError, match="k1"):
        Bm25Parameters(k1=-0.1)
    with pytest.raises(ValueError, match="b must"):
        Bm25Parameters(b=1.5)
