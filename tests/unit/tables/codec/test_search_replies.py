"""`total_results` reads a reply's match count in every form Redis gives it; the
integration tests' reader of EXPLAINSCORE (tests/support/explain_score.py) finds a
term's own counts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from grimoire.tables.codec.search_replies import total_results
from tests.support.explain_score import TermMatch, term_matches


@pytest.mark.parametrize(
    ("reply", "total"),
    [
        ({"total_results": 7, "results": []}, 7),  # RESP3, decoded keys
        ({b"total_results": 620, b"results": []}, 620),  # RESP3 from execute_command
        ({b"results": []}, 0),  # no count at all
        ([3, b"k1", b"k2", b"k3"], 3),  # raw RESP2 array
        (SimpleNamespace(total=12, docs=[]), 12),  # redis-py Result
    ],
)
def test_total_results_in_every_reply_form(reply: object, total: int) -> None:
    assert total_results(reply) == total


def _line(label: str, tf: float, length: int) -> bytes:
    return (
        f"{label}: (0.44 = IDF 0.36 * (F {tf:.2f} * (k1 1.2 + 1)) / (F {tf:.2f} + k1 1.2 * "
        f"(1 - b 0.5 + b 0.5 * Doc Len {length} / Average Doc Len 3.00)))"
    ).encode()


def _explained(*lines: bytes) -> list[object]:
    return [
        0.5,
        [b"Final BM25 : words BM25 0.56 * document score 1.00",
         [[b"(Weight 1.00 * children BM25 0.56)", [*lines, b"Irrelevant token -> score is 0"]]]],
    ]  # fmt: skip


def test_term_matches_read_the_terms_own_line_in_either_protocol() -> None:
    resp3 = {
        b"total_results": 2,
        b"results": [
            {b"id": b"gm:mem:{a}:m1", b"score": _explained(_line("a", 1, 7), _line("cat", 3, 7))},
            {b"id": b"gm:mem:{a}:m2", b"score": _explained(_line("cat", 1, 2))},
        ],
    }
    resp2 = [2, b"gm:mem:{a}:m1", resp3[b"results"][0][b"score"], b"gm:mem:{a}:m2",  # type: ignore[index]
             resp3[b"results"][1][b"score"]]  # type: ignore[index]  # fmt: skip
    expected = [TermMatch("gm:mem:{a}:m1", 3.0, 7), TermMatch("gm:mem:{a}:m2", 1.0, 2)]
    assert term_matches(resp3, "cat") == expected
    assert term_matches(resp2, "cat") == expected


def test_a_tag_spelled_like_the_term_yields_to_the_texts_frequency() -> None:
    # The agent `cat` searching "cat": two lines labelled alike; a tag's F is 1.
    reply = {"results": [{"id": "k", "score": _explained(_line("cat", 1, 9), _line("cat", 4, 9))}]}
    assert term_matches(reply, "cat") == [TermMatch("k", 4.0, 9)]
    reply = {"results": [{"id": "k", "score": _explained(_line("cat", 4, 9), _line("cat", 1, 9))}]}
    assert term_matches(reply, "cat") == [TermMatch("k", 4.0, 9)]


def test_a_reply_without_explanations_is_refused_rather_than_scored_zero() -> None:
    assert term_matches({"results": [{"id": "k", "score": 1.5}]}, "cat") == []
    with pytest.raises(TypeError):
        term_matches(SimpleNamespace(total=1, docs=[]), "cat")
