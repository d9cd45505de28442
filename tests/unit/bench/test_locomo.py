"""bench.locomo_data, retrieval_metrics and bm25: parsing, scoring, baseline."""

from __future__ import annotations

import math

import pytest

from bench.bm25 import BM25, tokenize
from bench.locomo_data import load_conversations, parse_evidence, parse_session_date
from bench.retrieval_metrics import Judged, ndcg_at_k, recall_at_k, score

TINY = [
    {
        "sample_id": "c1",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat named Pixel."},
                {
                    "speaker": "Bo",
                    "dia_id": "D1:2",
                    "text": "Lovely!",
                    "blip_caption": "a photo of a cat",
                },
            ],
            "session_2_date_time": "10:37 am on 27 June, 2023",
            "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "I ran a marathon."}],
        },
        "qa": [
            {"question": "What is the cat called?", "evidence": ["D1:1"], "category": 4},
            {"question": "Who ran?", "evidence": ["D2:1; D1:2", "D2:1"], "category": 1},
            {"question": "Unanswerable?", "evidence": [], "category": 5},
        ],
    }
]  # fmt: skip


def test_session_dates_are_utc_epoch_ms() -> None:
    assert parse_session_date("1:56 pm on 8 May, 2023") == 1_683_554_160_000
    assert parse_session_date("12:09 am on 13 September, 2023") == 1_694_563_740_000


def test_evidence_is_parsed_robustly_in_order_without_duplicates() -> None:
    assert parse_evidence(["D8:6; D9:17", " D9:17 ", "D10:1"]) == ("D8:6", "D9:17", "D10:1")
    assert parse_evidence(["", "n/a"]) == ()


def test_loading_keeps_sessions_turns_captions_and_questions() -> None:
    (conv,) = load_conversations(TINY)
    assert conv.sample_id == "c1" and conv.speakers == ("Ann", "Bo")
    assert [s.number for s in conv.sessions] == [1, 2]
    assert conv.sessions[1].date_ms == parse_session_date("10:37 am on 27 June, 2023")
    assert [t.dia_id for t in conv.turns()] == ["D1:1", "D1:2", "D2:1"]
    assert conv.turns()[1].unit_text() == "Bo: Lovely! [shares a photo: a photo of a cat]"
    assert [q.evidence for q in conv.questions] == [("D1:1",), ("D2:1", "D1:2"), ()]
    assert [q.category for q in conv.questions] == [4, 1, 5]


def test_recall_at_k_is_the_fraction_of_evidence_in_the_top_k() -> None:
    ranked = ["a", "x", "a", "b", "y", "c"]  # the repeated "a" counts once
    assert recall_at_k(ranked, ["a", "b"], 1) == 0.5
    assert recall_at_k(ranked, ["a", "b"], 3) == 1.0
    assert recall_at_k(ranked, ["a", "b", "c", "z"], 5) == 0.75
    with pytest.raises(ValueError):
        recall_at_k(ranked, [], 5)


def test_ndcg_at_10_with_binary_relevance() -> None:
    # relevant at ranks 2 and 4: (1/log2(3) + 1/log2(5)) / (1 + 1/log2(3))
    expected = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert ndcg_at_k(["x", "a", "y", "b"], ["a", "b"], 10) == pytest.approx(expected)
    assert ndcg_at_k(["a", "b"], ["a", "b"], 10) == 1.0


def test_scores_average_per_category_and_leave_adversarial_out_of_the_headline() -> None:
    judged = [
        Judged(4, ("a",), ("a",)),  # R@5 1
        Judged(1, ("x",), ("a", "b")),  # R@5 0
        Judged(5, ("a",), ("a",)),  # adversarial: only in by_category
    ]
    result = score(judged)
    assert result["overall_no_adv"] == {"R@5": 0.5, "R@10": 0.5, "NDCG@10": 0.5, "n": 2}
    assert result["by_category"] == {
        "1": {"R@5": 0.0, "R@10": 0.0, "NDCG@10": 0.0, "n": 1},
        "4": {"R@5": 1.0, "R@10": 1.0, "NDCG@10": 1.0, "n": 1},
        "5": {"R@5": 1.0, "R@10": 1.0, "NDCG@10": 1.0, "n": 1},
    }


def test_bm25_ranks_by_rare_matching_terms_and_drops_non_matches() -> None:
    docs = ["the cat sat on the mat", "a dog barked", "cat and dog and cat", "nothing here"]
    bm25 = BM25(docs)
    assert tokenize("The Cat, the mat!") == ["cat", "mat"]
    # "mat" is rarer than "cat": doc 0 (cat + mat) beats doc 2 (cat twice).
    assert bm25.rank("cat mat", 10) == [0, 2]
    assert bm25.rank("dog", 10) == [1, 2]  # the shorter document first
    assert bm25.rank("zebra", 10) == []
