"""bench.lexicon: plain BM25 over the lexical form, each part on and off."""

from __future__ import annotations

from pathlib import Path

import orjson

from bench.lexicon import run_lexicon_bench

SESSIONS = {
    "speaker_a": "Ann",
    "speaker_b": "Bo",
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [
        # More lines than a top 5 holds, first: a miss (all scores 0, ties by
        # order) is then a miss.
        *({"speaker": "Bo", "dia_id": f"D1:{n}", "text": f"filler line {n}"} for n in range(3, 10)),
        {"speaker": "Bo", "dia_id": "D1:2", "text": "Nice, I slept all day."},
        {"speaker": "Ann", "dia_id": "D1:1", "text": "I painted the fence blue."},
    ],
    "session_2_date_time": "10:37 am on 27 June, 2023",
    "session_2": [
        {"speaker": "Bo", "dia_id": "D2:1", "text": "We baked bread together."},
        {"speaker": "Ann", "dia_id": "D2:2", "text": "Then we watched a film."},
    ],
}
QUESTIONS = [
    # Only a stem meets it: "paint" / "painted".
    {"question": "Who likes to paint fences?", "evidence": ["D1:1"], "category": 4},
    # Only the time words meet it: "June" is no word of any line.
    {"question": "What happened in June?", "evidence": ["D2:1"], "category": 2},
    {"question": "Unanswerable?", "evidence": [], "category": 5},
]


def test_each_part_finds_what_only_it_can_and_both_find_both(tmp_path: Path) -> None:
    data = tmp_path / "tiny.json"
    data.write_bytes(orjson.dumps([{"sample_id": "c1", "conversation": SESSIONS, "qa": QUESTIONS}]))
    forms = run_lexicon_bench(data)["bm25_r_at_5_by_lexical_form"]
    assert forms["stems_on_time_words_on"]["4"] == 1.0
    assert forms["stems_off_time_words_on"]["4"] == 0.0
    assert forms["stems_on_time_words_off"]["4"] == 1.0
    assert forms["stems_on_time_words_on"]["2"] == 1.0
    assert forms["stems_on_time_words_off"]["2"] == 0.0
    assert forms["stems_off_time_words_off"]["R@5"] == 0.0
    assert all(form["n"] == 2 for form in forms.values())  # category 5 and no evidence left out
